// Small graphs, boxes and responses the tests build on.
import type { Box, Scene } from "../src/layout";
import { END, START, type EdgeIR, type GraphIR, type GraphResponse, type HoleRef, type NodeIR } from "../src/types";

export function node(name: string, extra: Partial<NodeIR> = {}): NodeIR {
  return { name, cls: name, inputs: [], outputs: [], has_hole: false, hole: null, line: null, ...extra };
}

export function edge(source: string | null, target: string | null, extra: Partial<EdgeIR> = {}): EdgeIR {
  return { source, target, kind: "sequential", path: null, label: null, branch: null, code: null, ...extra };
}

export function graph(nodes: NodeIR[], edges: EdgeIR[] = []): GraphIR {
  return { name: "g", state: null, style: "builder", nodes, edges, added: [] };
}

/** A chain START → names… → END. */
export function chain(...names: string[]): GraphIR {
  const ids = [START, ...names, END];
  return graph(names.map((n) => node(n)), ids.slice(1).map((to, i) => edge(ids[i], to)));
}

export function hole(file: string, nodeName: string): HoleRef {
  return { file, node: nodeName, message: "write me", line: 3 };
}

export function response(extra: Partial<GraphResponse> = {}): GraphResponse {
  return {
    file: "/p/flow.py",
    graph: chain("A"),
    graphs: ["g"],
    selected: "g",
    version: "v1",
    layout: {},
    holes: [],
    parse_error: null,
    ...extra,
  };
}

export function box(id: string, x: number, y: number, w = 100, h = 50, kind: Box["kind"] = "node"): Box {
  return { id, kind, x, y, w, h };
}

export function boxes(...list: Box[]): Map<string, Box> {
  return new Map(list.map((b) => [b.id, b]));
}

export function scene(list: Box[], wireIndexes: number[] = []): Scene {
  const wires = wireIndexes.map((index) => ({ id: `w${index}`, edge: edge("a", "b"), index, from: "a", to: "b", label: null, loop: false, style: "solid" as const }));
  return { boxes: boxes(...list), wires, width: 0, height: 0 };
}

// Opening a subgraph node: a node that runs another graph (``add(compiled)``,
// ``NodeIR.subgraph``) opens into that graph's own canvas, with a breadcrumb back. The graph
// may live in this file or in another module of the project (``NodeIR.subgraph_file``); edits
// in it are edits of that graph, written into the file that defines it.
import { type Nested, shownFile, shownNested, showFile } from "./api";
import * as debug from "./debug/index";
import { byId, h } from "./dom";
import { refreshAsk } from "./run-panel";
import { state, switchGraph } from "./store";
import { reload } from "./sync";
import type { NodeIR } from "./types";

/** Where each graph of the breadcrumb lives (file ``null``: the opened one), beside ``state.trail``. */
let trailFiles: { file: string | null; nested: Nested | null }[] = [];

/** Whether ``node`` runs a graph the canvas can open: one of this file, of a module it read,
 * or one it knows the shape of (the decomposed agent loop, shown read-only) — not an opaque
 * box, whose ``subgraph_error`` says why. */
export function canOpen(node: NodeIR | undefined): boolean {
  if (!node?.subgraph || node.subgraph_error || shownNested()) return false;
  return !!node.subgraph_file || state.graphs.includes(node.subgraph) || !!node.child;
}

/** Open the graph ``node`` runs; the breadcrumb gains the graph shown now. */
export async function openSubgraph(node: NodeIR): Promise<void> {
  if (!canOpen(node) || !state.graphName) return;
  trailFiles = [...trailFiles.slice(0, state.trail.length), { file: shownFile(), nested: shownNested() }];
  if (node.subgraph_file) showFile(node.subgraph_file);
  else if (!state.graphs.includes(node.subgraph as string)) showFile(shownFile(), { graph: state.graphName, node: node.name });
  switchGraph(state, node.subgraph as string, [...state.trail, state.graphName], [...state.path, node.name]);
  await reload();
  opened();
}

/** The canvas moved into or out of a subgraph (or to a graph picked directly, out of all of
 * them): the debugger follows into its namespace and a pending question is drawn where it
 * now shows. */
export function opened(): void {
  refreshAsk();
  void debug.followPath(state.path);
}

/** Go back to the ``index``-th graph of the breadcrumb. */
async function back(index: number): Promise<void> {
  const name = state.trail[index];
  if (name === undefined) return;
  const where = trailFiles[index];
  showFile(where?.file ?? null, where?.nested ?? null);
  trailFiles = trailFiles.slice(0, index);
  switchGraph(state, name, state.trail.slice(0, index), state.path.slice(0, index));
  await reload();
  opened();
}

/** Back out of the subgraphs until ``depth`` of them stay open (the debugger's crumbs). */
export async function leaveTo(depth: number): Promise<void> {
  if (depth < state.trail.length) await back(depth);
}

/** Open the subgraph node ``name`` of the graph shown (the debugger's nested states). */
export async function openNode(name: string): Promise<boolean> {
  const node = state.graph?.nodes.find((n) => n.name === name);
  if (!canOpen(node)) return false;
  await openSubgraph(node as NodeIR);
  return true;
}

/** The breadcrumb over the stage: the graphs opened on the way here, each a way back. */
export function renderCrumbs(): void {
  const bar = byId("crumbs");
  bar.hidden = !state.trail.length;
  if (bar.hidden) return bar.replaceChildren();
  const parts: (HTMLElement | string)[] = [];
  state.trail.forEach((name, i) => {
    parts.push(h("button", { className: "crumb", "data-graph": name, title: `back to ${name}`, onclick: () => void back(i) }, name), " › ");
  });
  const file = shownFile();
  const note = shownNested() ? "read-only: built by the library" : file;
  parts.push(h("b", { className: "crumb-here", title: file ? `defined in ${file}` : "" }, state.graphName ?? ""));
  if (note) parts.push(h("span", { className: "crumb-file" }, ` (${note})`));
  bar.replaceChildren(...parts);
}

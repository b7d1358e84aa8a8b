// From graph IR to a scene: boxes with sizes and positions, wires between them.
// Positions come from the sidecar where the user moved a node, else from dagre's layered layout.
import dagre from "@dagrejs/dagre";
import { END, START, type EdgeIR, type GraphIR, type NodeIR, type XY } from "./types";

export const FONT = "Virgil, 'Segoe Print', 'Comic Sans MS', cursive";
export const NAME_PX = 20;
export const PORT_PX = 15;
export const CODE_PX = 13;
export const ROW = 22;
export const HEADER = 38;

export type BoxKind = "node" | "start" | "end" | "custom" | "stub";

export interface Box {
  id: string;
  kind: BoxKind;
  x: number; // top-left
  y: number;
  w: number;
  h: number;
  node?: NodeIR;
  text?: string[]; // custom: source lines; stub: label
  moved?: boolean; // position from the sidecar
}

export interface Wire {
  id: string;
  edge: EdgeIR;
  index: number; // position in graph.edges
  from: string; // box id
  to: string; // box id
  label: string | null;
  loop: boolean; // a self-loop arc
  style: "solid" | "conditional" | "dynamic" | "custom";
}

export interface Scene {
  boxes: Map<string, Box>;
  wires: Wire[];
  width: number;
  height: number;
}

let ctx: CanvasRenderingContext2D | null = null;
export function textWidth(text: string, px: number, family = FONT): number {
  if (!ctx) ctx = document.createElement("canvas").getContext("2d");
  if (!ctx) return text.length * px * 0.6;
  ctx.font = `${px}px ${family}`;
  return ctx.measureText(text).width;
}

export function portText(name: string, type: string): string {
  return type ? `${name}: ${type}` : name;
}

export const MONO = "ui-monospace, 'DejaVu Sans Mono', monospace";

function nodeSize(node: NodeIR): { w: number; h: number } {
  const nameW = textWidth(node.name, NAME_PX) + (node.has_hole ? 30 : 30);
  const inW = Math.max(0, ...node.inputs.map((p) => textWidth(portText(p.name, p.type), PORT_PX)));
  const outW = Math.max(0, ...node.outputs.map((p) => textWidth(portText(p.name, p.type), PORT_PX)));
  const rows = Math.max(node.inputs.length, node.outputs.length, 1);
  const w = Math.max(150, nameW, inW + outW + 56);
  return { w: Math.ceil(w), h: HEADER + rows * ROW + 10 };
}

export function edgeLabel(edge: EdgeIR): string | null {
  if (edge.kind === "conditional") {
    if (edge.branch === "loop") return edge.label === "repeat" ? `repeat until ${edge.path ?? "?"}` : "exit";
    return `${edge.path ?? "?"}: ${edge.label ?? "?"}`;
  }
  return null;
}

export function displayName(id: string): string {
  return id === START ? "START" : id === END ? "END" : id;
}

export function buildScene(graph: GraphIR, saved: Record<string, XY>): Scene {
  const boxes = new Map<string, Box>();
  const wires: Wire[] = [];
  boxes.set(START, { id: START, kind: "start", x: 0, y: 0, w: 96, h: 40 });
  for (const node of graph.nodes) {
    const { w, h } = nodeSize(node);
    boxes.set(node.name, { id: node.name, kind: "node", x: 0, y: 0, w, h, node });
  }
  boxes.set(END, { id: END, kind: "end", x: 0, y: 0, w: 84, h: 40 });

  graph.edges.forEach((edge, index) => {
    const src = edge.source && boxes.has(edge.source) ? edge.source : null;
    if (edge.kind === "custom") {
      const lines = (edge.code ?? "").split("\n");
      const shown = lines.slice(0, 8).map((l) => (l.length > 64 ? `${l.slice(0, 63)}…` : l));
      if (lines.length > 8) shown.push(`… (${lines.length - 8} more lines)`);
      const w = Math.max(160, ...shown.map((l) => textWidth(l, CODE_PX, MONO))) + 24;
      const id = `custom:${index}`;
      boxes.set(id, { id, kind: "custom", x: 0, y: 0, w: Math.ceil(w), h: 30 + shown.length * 17 + 8, text: shown });
      if (src) wires.push({ id: `w${index}`, edge, index, from: src, to: id, label: null, loop: false, style: "custom" });
      return;
    }
    if (edge.kind === "dynamic" || edge.target === null) {
      if (!src) return;
      const id = `stub:${index}`;
      const label = `${edge.path ?? "route"} → ?`;
      boxes.set(id, { id, kind: "stub", x: 0, y: 0, w: Math.ceil(textWidth(label, PORT_PX) + 28), h: 32, text: [label] });
      wires.push({ id: `w${index}`, edge, index, from: src, to: id, label: null, loop: false, style: "dynamic" });
      return;
    }
    if (!src || !boxes.has(edge.target)) return;
    const loop = edge.source === edge.target;
    wires.push({
      id: `w${index}`,
      edge,
      index,
      from: src,
      to: edge.target,
      label: edgeLabel(edge),
      loop,
      style: edge.kind === "conditional" ? "conditional" : "solid",
    });
  });

  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 36, ranksep: 110, edgesep: 20, marginx: 40, marginy: 60 });
  g.setDefaultEdgeLabel(() => ({}));
  // A node the user placed and nothing is wired to stays out of the layered layout, so
  // dropping a fresh node does not shift everything else by a rank.
  const wired = new Set<string>();
  for (const wire of wires) {
    wired.add(wire.from);
    wired.add(wire.to);
  }
  const free = (box: Box) => box.kind === "node" && !!saved[box.id] && !wired.has(box.id);
  for (const box of boxes.values()) if (!free(box)) g.setNode(box.id, { width: box.w, height: box.h });
  for (const wire of wires) {
    if (wire.loop) continue;
    const labelW = wire.label ? textWidth(wire.label, PORT_PX) : 0;
    g.setEdge(wire.from, wire.to, { minlen: 1, weight: wire.style === "solid" ? 2 : 1, width: labelW, height: wire.label ? 20 : 0, labelpos: "c" });
  }
  // Keep END in the last rank and START in the first even when nothing links them.
  dagre.layout(g);
  let maxX = 0;
  let maxY = 0;
  for (const box of boxes.values()) {
    const pos = saved[box.id];
    if (pos && box.kind === "node") {
      box.x = pos.x;
      box.y = pos.y;
      box.moved = true;
    } else {
      const n = g.node(box.id) ?? { x: box.w / 2, y: box.h / 2 };
      box.x = Math.round(n.x - box.w / 2);
      box.y = Math.round(n.y - box.h / 2);
    }
    maxX = Math.max(maxX, box.x + box.w);
    maxY = Math.max(maxY, box.y + box.h);
  }
  return { boxes, wires, width: maxX + 40, height: maxY + 40 };
}

/** Cubic Bézier from the source's right edge to the target's left edge. */
export function wireCurve(a: Box, b: Box): [XY, XY, XY, XY] {
  const s = { x: a.x + a.w, y: a.y + a.h / 2 };
  const t = { x: b.x, y: b.y + b.h / 2 };
  if (b.kind === "custom" && a.kind !== "custom") {
    // custom boxes hang under/next to their source: enter from the nearest side
    t.x = b.x;
  }
  const dx = Math.max(50, Math.abs(t.x - s.x) / 2);
  if (t.x < s.x) {
    // a back edge: loop out to the right and come back into the left side from below
    const dy = Math.max(60, Math.abs(t.y - s.y) / 2);
    return [s, { x: s.x + 120, y: s.y + dy * 1.6 }, { x: t.x - 120, y: t.y + dy * 1.6 }, t];
  }
  return [s, { x: s.x + dx, y: s.y }, { x: t.x - dx, y: t.y }, t];
}

export function bezierAt(c: [XY, XY, XY, XY], t: number): XY {
  const u = 1 - t;
  const k = [u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t];
  return {
    x: k[0] * c[0].x + k[1] * c[1].x + k[2] * c[2].x + k[3] * c[3].x,
    y: k[0] * c[0].y + k[1] * c[1].y + k[2] * c[2].y + k[3] * c[3].y,
  };
}

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
/** How far a loop's arc and its label rise above its node. */
export const LOOP_ROOM = 84;

export type BoxKind = "node" | "start" | "end" | "custom" | "stub" | "group";

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
  members?: string[]; // group: the nodes collapsed into it
}

/** The box a collapsed group of nodes is drawn as. */
export function groupId(members: readonly string[]): string {
  return `group:${members.join("+")}`;
}

export interface Wire {
  id: string;
  edge: EdgeIR;
  index: number; // position in graph.edges
  from: string; // box id
  to: string; // box id
  label: string | null;
  loop: boolean; // a self-loop arc
  style: "solid" | "conditional" | "dynamic" | "join" | "map" | "command" | "custom";
  points?: XY[]; // dagre's route between the ranks (through the gaps, around the boxes)
  labelAt?: XY;
}

export interface Scene {
  boxes: Map<string, Box>;
  wires: Wire[];
  width: number;
  height: number;
  /** a wrapped layout's bands, top to bottom (their tops and bottoms): a wire from one band
   * to a later one runs back left through the gap above its target's band */
  bands?: { top: number; bottom: number }[];
  /** laid out top to bottom: the layout ran left to right on the boxes turned a quarter
   * (x ↔ y), so ``bands``, ``Wire.points`` and ``Wire.labelAt`` are in that turned frame, and
   * the wires are drawn there and turned back (``wireGeom``) */
  flip?: boolean;
}

/** Which way the ranks run: left to right (the default) or top to bottom. */
export type Direction = "LR" | "TB";

/** ``p`` with x and y swapped: the quarter turn between the two directions (its own inverse). */
export function turn(p: XY): XY {
  return { x: p.y, y: p.x };
}

const turned = new WeakMap<Scene, Scene>();

/** The scene as the left-to-right layout saw it: for a top-to-bottom scene, every box turned
 * (x ↔ y, w ↔ h); the scene itself otherwise. */
export function layoutFrame(scene: Scene): Scene {
  if (!scene.flip) return scene;
  let t = turned.get(scene);
  if (!t) {
    const boxes = new Map<string, Box>();
    for (const [id, b] of scene.boxes) boxes.set(id, { ...b, x: b.y, y: b.x, w: b.h, h: b.w });
    t = { ...scene, boxes, width: scene.height, height: scene.width, flip: false };
    turned.set(scene, t);
  }
  return t;
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

/** A dynamic route's wires: the routing function's name (a lambda is just "lambda"). */
export function routeLabel(edge: EdgeIR): string {
  const path = edge.path ?? "route";
  return /^[A-Za-z_][A-Za-z0-9_.]*$/.test(path) ? `${path}?` : "lambda?";
}

export function displayName(id: string): string {
  return id === START ? "START" : id === END ? "END" : id;
}

/** A ``map`` (one instance of its node per list element, then ``then`` once) or a
 * ``parallel`` (its nodes side by side, then a join into ``then``) as wires: the fan-out
 * names the list and the per-item port, the wires into ``then`` say they collect. */
function fanOut(edge: EdgeIR, index: number, boxes: Map<string, Box>, wires: Wire[]): void {
  const src = edge.source && boxes.has(edge.source) ? edge.source : null;
  const then = edge.then ?? END;
  const branches = edge.kind === "map" ? [edge.target ?? ""] : edge.sources ?? [];
  const out = edge.kind === "map" ? `map ${edge.path ?? "?"}[i] → ${edge.label ?? "?"}` : "parallel";
  branches.forEach((to, k) => {
    if (!boxes.has(to)) return;
    if (src) wires.push({ id: `w${index}.${k}`, edge, index, from: src, to, label: out, loop: src === to, style: "map" });
    if (boxes.has(then)) {
      const label = edge.kind === "map" ? "collect" : "join";
      wires.push({ id: `w${index}.t${k}`, edge, index, from: to, to: then, label, loop: to === then, style: "join" });
    }
  });
}

export function buildScene(graph: GraphIR, saved: Record<string, XY>, direction: Direction = "LR", groups: readonly (readonly string[])[] = []): Scene {
  const flip = direction === "TB";
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
    if (edge.kind === "map" || edge.kind === "parallel") {
      fanOut(edge, index, boxes, wires);
      return;
    }
    if (edge.kind === "dynamic" || edge.target === null) {
      if (!src) return;
      const routes = edge.kind === "dynamic" ? edge.routes ?? null : null;
      if (routes && routes.length && routes.every((to) => boxes.has(to))) {
        // the routing function's code names where it can go: one dotted wire to each
        const label = routeLabel(edge);
        routes.forEach((to, k) => {
          wires.push({ id: `w${index}.${k}`, edge, index, from: src, to, label, loop: src === to, style: "dynamic" });
        });
        return;
      }
      const id = `stub:${index}`;
      const label = `${edge.path ?? "route"} → ?`;
      boxes.set(id, { id, kind: "stub", x: 0, y: 0, w: Math.ceil(textWidth(label, PORT_PX) + 28), h: 32, text: [label] });
      wires.push({ id: `w${index}`, edge, index, from: src, to: id, label: null, loop: false, style: "dynamic" });
      return;
    }
    if (edge.kind === "join") {
      // one wire from each node the join waits for, all marked "join" (one edge: one index)
      const target = edge.target;
      (edge.sources ?? []).forEach((from, k) => {
        if (boxes.has(from) && boxes.has(target)) {
          wires.push({ id: `w${index}.${k}`, edge, index, from, to: target, label: "join", loop: from === target, style: "join" });
        }
      });
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

  // where a node's Command(goto=...) may go: read from its class, not part of the wiring
  (graph.commands ?? []).forEach((edge, k) => {
    const { source, target } = edge;
    if (source && target && boxes.has(source) && boxes.has(target)) {
      wires.push({ id: `c${k}`, edge, index: -1, from: source, to: target, label: "goto", loop: source === target, style: "command" });
    }
  });

  collapse(boxes, wires, groups);

  const g = new dagre.graphlib.Graph({ multigraph: true });
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
  // A node with a loop gets room above it for the arc and its label (drawn up to LOOP_ROOM
  // over the box): dagre centres the box in the taller slot, so nothing sits in the way.
  const looping = new Set(wires.filter((w) => w.loop).map((w) => w.from));
  for (const box of boxes.values()) {
    const [w, h] = flip ? [box.h, box.w] : [box.w, box.h];
    if (!free(box)) g.setNode(box.id, { width: w, height: h + (looping.has(box.id) ? 2 * LOOP_ROOM : 0) });
  }
  for (const wire of wires) {
    if (wire.loop) continue;
    const labelW = wire.label ? textWidth(wire.label, PORT_PX) : 0;
    const [lw, lh] = flip ? [wire.label ? 20 : 0, labelW] : [labelW, wire.label ? 20 : 0];
    g.setEdge(wire.from, wire.to, { minlen: 1, weight: wire.style === "solid" ? 2 : 1, width: lw, height: lh, labelpos: "c" }, wire.id);
  }
  // A node reached only through a `route → ?` stub has no wire in: left alone, dagre puts it
  // in the first rank, beside START. Rank it after the stubs' sources (layout only, no wire).
  const stubSources = [...new Set(wires.filter((w) => boxes.get(w.to)?.kind === "stub").map((w) => w.from))];
  if (stubSources.length) {
    const entered = new Set(wires.filter((w) => !w.loop).map((w) => w.to));
    for (const box of boxes.values()) {
      if (box.kind !== "node" || entered.has(box.id) || !g.hasNode(box.id) || stubSources.includes(box.id)) continue;
      for (const from of stubSources) g.setEdge(from, box.id, { minlen: 1, weight: 0, width: 0, height: 0 }, `after-stub:${from}:${box.id}`);
    }
  }
  // Keep END in the last rank and START in the first even when nothing links them.
  dagre.layout(g);
  const bands = wrapRanks(g, [...boxes.values()].filter((b) => g.hasNode(b.id)).map((b) => b.id));
  const wrapped = bands.length > 0;
  let maxX = 0;
  let maxY = 0;
  for (const box of boxes.values()) {
    const pos = saved[box.id];
    if (pos && box.kind === "node") {
      box.x = pos.x;
      box.y = pos.y;
      box.moved = true;
    } else {
      const at = g.node(box.id);
      const n = at ? (flip ? turn(at) : at) : { x: box.w / 2, y: box.h / 2 };
      box.x = Math.round(n.x - box.w / 2);
      box.y = Math.round(n.y - box.h / 2);
    }
    maxX = Math.max(maxX, box.x + box.w);
    maxY = Math.max(maxY, box.y + box.h);
  }
  for (const wire of wires) {
    // dagre's routes are for the unwrapped rows: a wrapped layout draws its own
    if (wrapped || wire.loop || boxes.get(wire.from)?.moved || boxes.get(wire.to)?.moved) continue;
    const e = g.edge(wire.from, wire.to, wire.id) as { points?: XY[]; x?: number; y?: number } | undefined;
    if (e?.points && e.points.length > 2) wire.points = e.points.slice(1, -1).map((p) => ({ x: p.x, y: p.y }));
    if (e && wire.label && e.x !== undefined && e.y !== undefined) wire.labelAt = { x: e.x, y: e.y };
  }
  return { boxes, wires, width: maxX + 40, height: maxY + 40, ...(wrapped ? { bands } : {}), ...(flip ? { flip } : {}) };
}

/**
 * Collapse each group of two or more nodes into one box (a view choice, never written): the
 * members' boxes go, one ``group`` box stands for them, wires in and out of the group end on
 * it, and the wires between its members are not drawn.
 */
function collapse(boxes: Map<string, Box>, wires: Wire[], groups: readonly (readonly string[])[]): void {
  const owner = new Map<string, string>();
  for (const group of groups) {
    const members = group.filter((n) => boxes.get(n)?.kind === "node" && !owner.has(n));
    if (members.length < 2) continue;
    const id = groupId(members);
    const label = `${members.length} nodes`;
    const list = members.length > 3 ? `${members.slice(0, 3).join(", ")}, …` : members.join(", ");
    const w = Math.ceil(Math.max(180, textWidth(label, NAME_PX) + 40, textWidth(list, PORT_PX) + 28));
    for (const n of members) {
      owner.set(n, id);
      boxes.delete(n);
    }
    boxes.set(id, { id, kind: "group", x: 0, y: 0, w, h: 74, members, text: [label, list] });
  }
  if (!owner.size) return;
  const kept: Wire[] = [];
  for (const wire of wires) {
    const from = owner.get(wire.from) ?? wire.from;
    const to = owner.get(wire.to) ?? wire.to;
    if (from === to && (owner.has(wire.from) || owner.has(wire.to))) continue; // inside a group
    kept.push({ ...wire, from, to });
  }
  // wires that now run side by side into (or out of) a group: one label says them all
  const byEnds = new Map<string, Wire[]>();
  for (const w of kept) {
    if (!owner.has(w.from) && !owner.has(w.to) && !w.from.startsWith("group:") && !w.to.startsWith("group:")) continue;
    const key = `${w.from}\u0000${w.to}`;
    byEnds.set(key, [...(byEnds.get(key) ?? []), w]);
  }
  for (const same of byEnds.values()) {
    const labels = [...new Set(same.map((w) => w.label).filter((l): l is string => !!l))];
    if (same.length < 2 || labels.length < 2) continue;
    const prefix = labels.every((l) => l.includes(": ") && l.split(": ")[0] === labels[0].split(": ")[0]) ? `${labels[0].split(": ")[0]}: ` : "";
    same[0].label = prefix + labels.map((l) => l.slice(prefix.length)).join(" | ");
    for (const w of same.slice(1)) w.label = null;
  }
  wires.splice(0, wires.length, ...kept);
}

/** The shape (width / height) a wrapped layout aims at: a laptop's window. */
export const WRAP_ASPECT = 1.6;
/** The space between two bands of a wrapped layout (the wires back to the left run there). */
const BAND_GAP = 110;

/**
 * Wrap a long left-to-right layout into bands stacked top to bottom, so the scene's shape is
 * near a window's and a fit can use both axes: a 117-node pipeline is otherwise one row some
 * 30 000 units long, drawn at a few percent when it fits. A layout no wider than
 * ``2.5 × WRAP_ASPECT`` its height is left as it is. Moves dagre's node positions in place;
 * returns the bands (none: not wrapped).
 */
function wrapRanks(g: InstanceType<typeof dagre.graphlib.Graph>, ids: string[]): { top: number; bottom: number }[] {
  const nodes = ids.map((id) => ({ id, n: g.node(id) as { x: number; y: number; width: number; height: number } }));
  if (nodes.length < 12) return [];
  let y0 = Infinity, y1 = -Infinity, x0 = Infinity, x1 = -Infinity;
  for (const { n } of nodes) {
    y0 = Math.min(y0, n.y - n.height / 2); y1 = Math.max(y1, n.y + n.height / 2);
    x0 = Math.min(x0, n.x - n.width / 2); x1 = Math.max(x1, n.x + n.width / 2);
  }
  const height = Math.max(1, y1 - y0);
  const width = x1 - x0;
  if (width / height <= WRAP_ASPECT * 2.5) return [];
  // a rank is a column: its nodes share dagre's x (their centre); a band starts at its first
  // rank's left edge, so every band's first column lines up with START's
  const ranks = [...new Set(nodes.map(({ n }) => Math.round(n.x)))].sort((a, b) => a - b);
  const left = new Map<number, number>();
  for (const { n } of nodes) left.set(Math.round(n.x), Math.min(left.get(Math.round(n.x)) ?? Infinity, n.x - n.width / 2));
  const bands = Math.min(ranks.length, Math.max(2, Math.round(Math.sqrt((width + BAND_GAP) / (height + BAND_GAP) / WRAP_ASPECT))));
  const per = Math.ceil(ranks.length / bands);
  const rankOf = new Map(ranks.map((x, i) => [x, i]));
  for (const { n } of nodes) {
    const i = rankOf.get(Math.round(n.x)) ?? 0;
    const band = Math.floor(i / per);
    n.x -= (left.get(ranks[band * per]) ?? 0) - (left.get(ranks[0]) ?? 0);
    n.y += band * (height + BAND_GAP);
  }
  return Array.from({ length: bands }, (_, b) => ({ top: y0 + b * (height + BAND_GAP), bottom: y1 + b * (height + BAND_GAP) }));
}

const CLEAR = 14; // how far a wire keeps off a box it passes

function hits(box: Box, p: XY, pad: number): boolean {
  return p.x > box.x - pad && p.x < box.x + box.w + pad && p.y > box.y - pad && p.y < box.y + box.h + pad;
}

/** The boxes (other than its ends) a path through `pts` would pass through. */
function blockers(scene: Scene, pts: XY[], skip: Set<string>): Box[] {
  const found = new Set<Box>();
  const path = smooth(pts);
  const xs = pts.map((p) => p.x);
  const ys = pts.map((p) => p.y);
  const [x0, x1, y0, y1] = [Math.min(...xs) - 60, Math.max(...xs) + 60, Math.min(...ys) - 60, Math.max(...ys) + 60];
  const near = [...scene.boxes.values()].filter((box) => !skip.has(box.id) && box.x < x1 && box.x + box.w > x0 && box.y < y1 && box.y + box.h > y0);
  if (!near.length) return [];
  for (let i = 1; i < 40; i++) {
    const p = path.at(i / 40);
    for (const box of near) if (hits(box, p, 2)) found.add(box); // grazing a corner is fine
  }
  return [...found];
}

/**
 * The points a wire runs through, from the source's right edge to the target's left edge: a
 * direct curve; where that would pass through other boxes, dagre's route between the ranks
 * (when the layout placed both ends), else a detour above or below the boxes in the way.
 */
export function wirePoints(scene: Scene, wire: Wire): XY[] {
  const a = scene.boxes.get(wire.from)!;
  const b = scene.boxes.get(wire.to)!;
  const s = { x: a.x + a.w, y: a.y + a.h / 2 };
  const t = { x: b.x, y: b.y + b.h / 2 };
  const skip = new Set([a.id, b.id]);
  const gap = bandGap(scene, a, b);
  if (gap !== null && t.x < s.x + 20) {
    // to a later band of a wrapped layout: down into the gap above the target's band, back
    // left along it, and down into the target
    // (the points a little inside each end of the run keep the curve from overshooting it)
    return [
      s,
      { x: s.x + 30, y: (s.y + gap) / 2 },
      { x: s.x, y: gap },
      { x: s.x - 20, y: gap },
      { x: t.x + 20, y: gap },
      { x: t.x, y: gap },
      { x: t.x - 30, y: (t.y + gap) / 2 },
      t,
    ];
  }
  if (t.x < s.x + 20) return backPoints(scene, a, b, s, t, skip);
  let pts = [s, t];
  let blocked = blockers(scene, pts, skip);
  if (blocked.length && wire.points) {
    const routed = [s, ...wire.points, t];
    if (!blockers(scene, routed, skip).length) return routed;
  }
  for (let round = 0; round < 3 && blocked.length; round++) {
    const top = Math.min(...blocked.map((box) => box.y)) - CLEAR * 2;
    const bottom = Math.max(...blocked.map((box) => box.y + box.h)) + CLEAR * 2;
    // along the boxes in the way, but never behind the wire's own ends
    const x1 = Math.max(Math.min(...blocked.map((box) => box.x)) - CLEAR, s.x + 60);
    const x2 = Math.min(Math.max(...blocked.map((box) => box.x + box.w)) + CLEAR, t.x - 60);
    const mid = (s.y + t.y) / 2;
    const y = Math.abs(top - mid) <= Math.abs(bottom - mid) ? top : bottom;
    pts = x1 < x2 ? [s, { x: x1, y }, { x: x2, y }, t] : [s, { x: (s.x + t.x) / 2, y }, t];
    const again = blockers(scene, pts, skip);
    if (again.every((box) => blocked.includes(box))) break;
    blocked = [...new Set([...blocked, ...again])];
  }
  return pts;
}

/** The y of the gap above ``b``'s band when ``b`` is in a later band than ``a`` (null: not
 * a wrapped layout, or the same band). */
function bandGap(scene: Scene, a: Box, b: Box): number | null {
  const bands = scene.bands;
  if (!bands) return null;
  const of = (box: Box) => bands.findIndex((band) => box.y + box.h / 2 >= band.top - 1 && box.y + box.h / 2 <= band.bottom + 1);
  const ia = of(a);
  const ib = of(b);
  if (ia < 0 || ib <= ia) return null;
  return bands[ib].top - BAND_GAP / 2;
}

/** A back edge (its target left of its source): out to the right, under both ends (and
 * anything else in the way), and into the target's left side from below. */
function backPoints(scene: Scene, a: Box, b: Box, s: XY, t: XY, skip: Set<string>): XY[] {
  let y = Math.max(a.y + a.h, b.y + b.h) + CLEAR * 2;
  let pts: XY[] = [];
  for (let round = 0; round < 4; round++) {
    pts = [s, { x: s.x + 36, y: (s.y + y) / 2 }, { x: s.x, y }, { x: t.x, y }, { x: t.x - 36, y: (t.y + y) / 2 }, t];
    const blocked = blockers(scene, pts.slice(1, -1), skip);
    if (!blocked.length) break;
    y = Math.max(...blocked.map((box) => box.y + box.h)) + CLEAR * 2;
  }
  return pts;
}

export interface Smooth {
  d: string;
  at(t: number): XY; // 0..1 along the segments
  end: { tip: XY; from: XY }; // the last point and the control point before it
}

/** A smooth path through `pts` (Catmull-Rom as cubic Béziers), horizontal at both ends;
 * ``map`` (the quarter turn of a top-to-bottom scene) is applied to everything it returns. */
export function smooth(pts: XY[], map: (p: XY) => XY = (p) => p): Smooth {
  const segs: [XY, XY, XY, XY][] = [];
  for (let i = 0; i + 1 < pts.length; i++) {
    const p0 = pts[i];
    const p1 = pts[i + 1];
    const dx = Math.max(30, Math.abs(p1.x - p0.x) / 2);
    const prev = pts[i - 1];
    const next = pts[i + 2];
    // a handle longer than half its segment overshoots (a long run beside a short one)
    const reach = Math.hypot(p1.x - p0.x, p1.y - p0.y) / 2;
    const c1 = prev ? along(p0, (p1.x - prev.x) / 6, (p1.y - prev.y) / 6, reach) : { x: p0.x + dx, y: p0.y };
    const c2 = next ? along(p1, -(next.x - p0.x) / 6, -(next.y - p0.y) / 6, reach) : { x: p1.x - dx, y: p1.y };
    segs.push([map(p0), map(c1), map(c2), map(p1)]);
  }
  const start = map(pts[0]);
  const d = `M ${start.x} ${start.y} ` + segs.map(([, c1, c2, p]) => `C ${c1.x} ${c1.y}, ${c2.x} ${c2.y}, ${p.x} ${p.y}`).join(" ");
  const at = (t: number): XY => {
    const f = Math.min(segs.length - 1e-9, Math.max(0, t * segs.length));
    const i = Math.floor(f);
    return bezierAt(segs[i], f - i);
  };
  const last = segs[segs.length - 1];
  return { d, at, end: { tip: last[3], from: bezierAt(last, 0.97) } };
}

/** ``p`` moved by (dx, dy), at most ``reach`` far. */
function along(p: XY, dx: number, dy: number, reach: number): XY {
  const len = Math.hypot(dx, dy);
  const f = len > reach && len > 0 ? reach / len : 1;
  return { x: p.x + dx * f, y: p.y + dy * f };
}

export function bezierAt(c: [XY, XY, XY, XY], t: number): XY {
  const u = 1 - t;
  const k = [u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t];
  return {
    x: k[0] * c[0].x + k[1] * c[1].x + k[2] * c[2].x + k[3] * c[3].x,
    y: k[0] * c[0].y + k[1] * c[1].y + k[2] * c[2].y + k[3] * c[3].y,
  };
}

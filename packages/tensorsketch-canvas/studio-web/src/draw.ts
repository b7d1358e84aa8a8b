// Drawing the scene as hand-drawn SVG with rough.js (the Excalidraw look).
import rough from "roughjs";
import type { RoughSVG } from "roughjs/bin/svg";
import {
  CODE_PX,
  textWidth,
  displayName,
  FONT,
  HEADER,
  MONO,
  NAME_PX,
  PORT_PX,
  portText,
  ROW,
  layoutFrame,
  smooth,
  turn,
  wirePoints,
  type Box,
  type Scene,
  type Wire,
} from "./layout";
import type { NodeTrace, XY } from "./types";

const NS = "http://www.w3.org/2000/svg";
export const COLORS = {
  ink: "#1e1e1e",
  in: "#2f9e44",
  out: "#7048e8",
  cond: "#1971c2",
  hole: "#e8590c",
  holeFill: "#fff4e6",
  nodeFill: "#f8f9fa",
  custom: "#868e96",
  customFill: "#e9ecef",
  ok: "#2f9e44",
  error: "#e03131",
  running: "#f08c00",
  waiting: "#1c7ed6",
  select: "#e64980",
  map: "#7048e8",
  command: "#0c8599",
};

export function el<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number> = {},
  parent?: Element,
): SVGElementTagNameMap[K] {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function text(parent: Element, x: number, y: number, s: string, px: number, attrs: Record<string, string | number> = {}): SVGTextElement {
  const t = el("text", { x, y, "font-size": px, "font-family": FONT, fill: COLORS.ink, ...attrs }, parent);
  t.textContent = s;
  return t;
}

export function seed(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (Math.abs(h) % 2147483646) + 1;
}

let rc: RoughSVG | null = null;
function r(svg: SVGSVGElement): RoughSVG {
  if (!rc) rc = rough.svg(svg);
  return rc;
}

export function drawBox(svg: SVGSVGElement, box: Box, readOnly: boolean, holeTag = "needs code"): SVGGElement {
  const g = el("g", { class: `box ${box.kind}`, "data-id": box.id, transform: `translate(${box.x},${box.y})` });
  const rs = r(svg);
  const sd = seed(box.id);
  if (box.kind === "start" || box.kind === "end") {
    g.setAttribute("data-node", box.id);
    g.appendChild(
      rs.path(pill(box.w, box.h), { seed: sd, roughness: 1, stroke: COLORS.ink, strokeWidth: 1.6, fill: box.kind === "start" ? "#d3f9d8" : "#ffe3e3", fillStyle: "solid" }),
    );
    text(g, box.w / 2, box.h / 2 + 6, displayName(box.id), 17, { "text-anchor": "middle", class: "name" });
    if (box.kind === "start" && !readOnly) el("rect", { class: "handle", x: box.w - 10, y: 0, width: 14, height: box.h }, g);
    if (box.kind === "end") el("rect", { class: "drop", x: 0, y: 0, width: box.w, height: box.h, fill: "transparent" }, g);
    return g;
  }
  if (box.kind === "stub") {
    g.appendChild(rs.rectangle(0, 0, box.w, box.h, { seed: sd, roughness: 1.2, stroke: COLORS.cond, strokeLineDash: [5, 5], strokeWidth: 1.3 }));
    text(g, 14, box.h / 2 + 5, box.text?.[0] ?? "?", PORT_PX, { fill: COLORS.cond, class: "stub-label" });
    return g;
  }
  if (box.kind === "group") {
    // nodes collapsed into one box: two sheets, how many, their names, and a way back
    el("rect", { class: "sheet", x: 7, y: 7, width: box.w, height: box.h, rx: 2, fill: COLORS.nodeFill, stroke: COLORS.ink, "stroke-width": 1.2 }, g);
    g.appendChild(rs.rectangle(0, 0, box.w, box.h, { seed: sd, roughness: 1.1, stroke: COLORS.ink, strokeWidth: 1.7, fill: COLORS.nodeFill, fillStyle: "solid" }));
    text(g, 14, 28, box.text?.[0] ?? "", NAME_PX, { class: "name" });
    text(g, 14, 54, box.text?.[1] ?? "", PORT_PX, { fill: "#495057" });
    const tg = el("g", { class: "group-expand", transform: `translate(${box.w - 80},-12)` }, g);
    tg.appendChild(rs.rectangle(0, 0, 74, 20, { seed: sd + 4, roughness: 0.7, stroke: COLORS.out, fill: "#ffffff", fillStyle: "solid" }));
    text(tg, 37, 15, "expand", 13, { "text-anchor": "middle", fill: COLORS.out });
    el("title", {}, tg).textContent = `show ${(box.members ?? []).join(", ")} again`;
    return g;
  }
  if (box.kind === "custom") {
    g.appendChild(rs.rectangle(0, 0, box.w, box.h, { seed: sd, roughness: 1, stroke: COLORS.custom, fill: COLORS.customFill, fillStyle: "solid", strokeWidth: 1.4 }));
    text(g, 10, 19, "custom wiring", 14, { fill: COLORS.custom, class: "custom-tag" });
    (box.text ?? []).forEach((line, i) => {
      const t = el("text", { x: 12, y: 40 + i * 17, "font-size": CODE_PX, "font-family": MONO, fill: "#343a40", class: "code" }, g);
      t.textContent = line;
      t.setAttribute("xml:space", "preserve");
    });
    return g;
  }
  const node = box.node!;
  g.setAttribute("data-node", node.name);
  if (node.has_hole) g.classList.add("hole");
  if (node.has_hole && holeTag !== "needs code") g.classList.add(holeTag);
  if (node.subgraph) {
    // a graph inside: a second sheet behind the box, and a tag that opens it
    g.classList.add("subgraph");
    // (a plain rect, not a group: the box's own shape stays its first group)
    el("rect", { class: "sheet", x: 6, y: 6, width: box.w, height: box.h, rx: 2, fill: COLORS.nodeFill, stroke: COLORS.ink, "stroke-width": 1.2 }, g);
  }
  g.appendChild(
    rs.rectangle(0, 0, box.w, box.h, {
      seed: sd,
      roughness: 1.1,
      bowing: 1,
      stroke: node.has_hole ? COLORS.hole : COLORS.ink,
      strokeWidth: 1.7,
      fill: node.has_hole ? COLORS.holeFill : COLORS.nodeFill,
      fillStyle: "solid",
      ...(node.has_hole ? { strokeLineDash: [8, 6] } : {}),
    }),
  );
  text(g, 14, 26, node.name, NAME_PX, { class: "name" });
  if (node.subgraph && node.subgraph_error) {
    // a subgraph the canvas could not read: an opaque box that says why
    const tg = el("g", { class: "subgraph-opaque", transform: `translate(${box.w - 72},-12)` }, g);
    tg.appendChild(rs.rectangle(0, 0, 64, 20, { seed: sd + 4, roughness: 0.7, stroke: COLORS.hole, fill: "#ffffff", fillStyle: "solid" }));
    text(tg, 32, 15, "opaque", 13, { "text-anchor": "middle", fill: COLORS.hole });
    el("title", {}, tg).textContent = `cannot open ${node.subgraph}: ${node.subgraph_error}`;
  } else if (node.subgraph) {
    const tg = el("g", { class: "subgraph-open", "data-graph": node.subgraph, transform: `translate(${box.w - 72},-12)` }, g);
    tg.appendChild(rs.rectangle(0, 0, 64, 20, { seed: sd + 4, roughness: 0.7, stroke: COLORS.out, fill: "#ffffff", fillStyle: "solid" }));
    text(tg, 32, 15, "open ›", 13, { "text-anchor": "middle", fill: COLORS.out });
    const where = node.subgraph_file ? ` (${node.subgraph_file})` : "";
    el("title", {}, tg).textContent = `open the graph ${node.subgraph}${where} this node runs`;
  }
  if (node.has_hole) {
    const tg = el("g", { class: "hole-tag", transform: `translate(${box.w - 92},-13)` }, g);
    tg.appendChild(rs.rectangle(0, 0, 88, 22, { seed: sd + 1, roughness: 0.8, stroke: COLORS.hole, fill: "#ffffff", fillStyle: "solid" }));
    text(tg, 44, 16, holeTag, 13, { "text-anchor": "middle", fill: COLORS.hole });
  }
  node.inputs.forEach((p, i) => {
    const y = HEADER + i * ROW + 12;
    const pg = el("g", { class: "port in", "data-port": p.name }, g);
    el("circle", { cx: 0, cy: y, r: 5, fill: COLORS.in, stroke: "#ffffff", "stroke-width": 1.5 }, pg);
    text(pg, 12, y + 5, portText(p.name, p.type), PORT_PX, { fill: COLORS.in });
  });
  node.outputs.forEach((p, i) => {
    const y = HEADER + i * ROW + 12;
    const pg = el("g", { class: "port out", "data-port": p.name }, g);
    el("circle", { cx: box.w, cy: y, r: 5, fill: COLORS.out, stroke: "#ffffff", "stroke-width": 1.5 }, pg);
    text(pg, box.w - 12, y + 5, portText(p.name, p.type), PORT_PX, { fill: COLORS.out, "text-anchor": "end" });
  });
  if (!readOnly) el("rect", { class: "handle", x: box.w - 8, y: 0, width: 16, height: box.h }, g);
  return g;
}

function pill(w: number, h: number): string {
  const rr = h / 2;
  return `M ${rr} 0 L ${w - rr} 0 A ${rr} ${rr} 0 0 1 ${w - rr} ${h} L ${rr} ${h} A ${rr} ${rr} 0 0 1 ${rr} 0 Z`;
}

export interface WireGeom {
  path: string;
  label: XY | null;
  tip: XY;
  dir: XY;
}

/** A wire's path, label place and arrow tip. A top-to-bottom scene's wires are routed in the
 * left-to-right frame its layout ran in (``layoutFrame``) and turned back: they leave a box at
 * its bottom and enter the next at its top, and a loop's arc is on its node's left. */
export function wireGeom(scene: Scene, wire: Wire): WireGeom {
  const frame = layoutFrame(scene);
  const T = scene.flip ? turn : (p: XY) => p;
  const a = frame.boxes.get(wire.from)!;
  if (wire.loop) {
    // an arc over the top of the node, leaving from the right and coming back in on the left
    const s = { x: a.x + a.w - 24, y: a.y };
    const t = { x: a.x + 24, y: a.y };
    const h = 70;
    const [p0, c1, c2, p1] = [s, { x: s.x + 30, y: s.y - h }, { x: t.x - 30, y: t.y - h }, t].map(T);
    const path = `M ${p0.x} ${p0.y} C ${c1.x} ${c1.y}, ${c2.x} ${c2.y}, ${p1.x} ${p1.y}`;
    return { path, label: T({ x: a.x + a.w / 2, y: a.y - h * 0.75 - 6 }), tip: p1, dir: norm(T({ x: 30, y: h })) };
  }
  const route = smooth(wirePoints(frame, wire), T);
  const { tip, from } = route.end;
  const label = wire.label ? (wire.labelAt ? labelOn(route, T(wire.labelAt)) : route.at(0.5)) : null;
  return { path: route.d, label, tip, dir: norm({ x: tip.x - from.x, y: tip.y - from.y }) };
}

/** dagre's label place, pulled onto the drawn path (the nearest sampled point). */
function labelOn(route: ReturnType<typeof smooth>, want: XY): XY {
  let best = route.at(0.5);
  let dist = Infinity;
  for (let i = 1; i < 60; i++) {
    const p = route.at(i / 60);
    const d = Math.hypot(p.x - want.x, p.y - want.y);
    if (d < dist) [best, dist] = [p, d];
  }
  return best;
}

function norm(v: XY): XY {
  const l = Math.hypot(v.x, v.y) || 1;
  return { x: v.x / l, y: v.y / l };
}

export function drawWire(svg: SVGSVGElement, scene: Scene, wire: Wire, selected: boolean): SVGGElement {
  const geom = wireGeom(scene, wire);
  const e = wire.edge;
  const command = e.kind === "command"; // read from the class: drawn, never selected or deleted
  const g = el("g", {
    class: command ? "goto-wire" : `wire ${wire.style}${selected ? " selected" : ""}`,
    "data-source": e.kind === "join" ? wire.from : e.source ?? "",
    // a dynamic route's wires each end at a node its code names (a stub: no target)
    "data-target": e.kind === "dynamic" && !wire.to.startsWith("stub:") ? wire.to : e.target ?? "",
    "data-kind": e.kind,
    ...(command ? { "pointer-events": "none" } : { "data-index": wire.index }),
  });
  const solid = wire.style === "solid" || wire.style === "join" || wire.style === "map"; // a join: solid, heavier, labelled "join"
  const color = selected ? COLORS.select : wire.style === "map" ? COLORS.map : command ? COLORS.command : solid ? COLORS.ink : wire.style === "custom" ? COLORS.custom : COLORS.cond;
  const dash = solid ? undefined : wire.style === "custom" ? [2, 5] : wire.style === "dynamic" ? [3, 6] : command ? [10, 4, 2, 4] : [8, 6];
  const weight = (selected ? 2.6 : 1.6) + (wire.style === "join" ? 0.9 : 0);
  const rs = r(svg);
  const sd = seed(wire.id + (e.target ?? ""));
  if (!command) el("path", { d: geom.path, class: "hit", fill: "none", stroke: "transparent", "stroke-width": 14 }, g);
  g.appendChild(rs.path(geom.path, { seed: sd, roughness: 0.9, bowing: 0.6, stroke: color, strokeWidth: weight, ...(dash ? { strokeLineDash: dash } : {}) }));
  if (wire.style === "map") {
    // a map's fan-out is drawn as a bundle: one instance of the node per element
    g.appendChild(rs.path(geom.path, { seed: sd + 5, roughness: 1.6, bowing: 1.4, stroke: color, strokeWidth: 1 }));
  }
  const { tip, dir } = geom;
  const px = -dir.y;
  const py = dir.x;
  const L = 12;
  const W = 5.5;
  const p1 = { x: tip.x - dir.x * L + px * W, y: tip.y - dir.y * L + py * W };
  const p2 = { x: tip.x - dir.x * L - px * W, y: tip.y - dir.y * L - py * W };
  g.appendChild(rs.linearPath([[p1.x, p1.y], [tip.x, tip.y], [p2.x, p2.y]], { seed: sd + 2, roughness: 0.6, stroke: color, strokeWidth: weight }));
  if (wire.label && geom.label) {
    const lg = el("g", { class: command ? "goto-label" : "wire-label" }, g);
    const t = text(lg, geom.label.x, geom.label.y + 5, wire.label, PORT_PX, { "text-anchor": "middle", fill: color, class: "edge-label" });
    // a paper-coloured backing so labels stay legible where wires cross
    const w = textWidth(wire.label, PORT_PX) + 12;
    const bg = el("rect", { x: geom.label.x - w / 2, y: geom.label.y - 10, width: w, height: 20, rx: 4, fill: "#ffffffe6" });
    lg.insertBefore(bg, t);
  }
  return g;
}

export function formatCost(cost: number | null | undefined): string {
  if (cost === null || cost === undefined) return "$0";
  if (cost === 0) return "$0";
  if (cost < 0.01) return `$${cost.toFixed(4)}`;
  return `$${cost.toFixed(2)}`;
}

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "–";
  if (ms < 0.01) return "<0.01 ms";
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(2)} s`;
}

export function drawTrace(svg: SVGSVGElement, box: Box, t: NodeTrace): SVGGElement {
  const color = { error: COLORS.error, running: COLORS.running, suspended: COLORS.waiting }[t.status as string] ?? COLORS.ok;
  const g = el("g", { class: `trace-ring ${t.status}`, "data-node": box.id, transform: `translate(${box.x},${box.y})` });
  g.appendChild(r(svg).rectangle(-7, -7, box.w + 14, box.h + 14, { seed: seed(box.id) + 7, roughness: 1.4, stroke: color, strokeWidth: 3 }));
  const badge = `${t.status === "suspended" ? "waiting · " : ""}${formatMs(t.latency_ms)} · ${formatCost(t.cost)} · ${t.calls} call${t.calls === 1 ? "" : "s"}`;
  const w = textWidth(badge, 13, "system-ui, sans-serif") + 18;
  const bg = el("g", { class: "trace-badge", transform: `translate(${box.w / 2 - w / 2},${box.h + 10})` }, g);
  el("rect", { x: 0, y: 0, width: w, height: 22, rx: 11, fill: color }, bg);
  const tx = el("text", { x: w / 2, y: 15, "text-anchor": "middle", "font-size": 13, "font-family": "system-ui, sans-serif", fill: "#ffffff" }, bg);
  tx.textContent = badge;
  return g;
}

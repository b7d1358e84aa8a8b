// The selected checkpoint on the canvas: a ring and a tag on every node that ran in its
// superstep, a dashed ring on the nodes that run next, the pending Sends and the errors, and
// the wires the run took from one to the other.
import rough from "roughjs";
import type { RoughSVG } from "roughjs/bin/svg";
import { nodeBadges } from "../badges";
import { el, seed, wireGeom } from "../draw";
import { textWidth, type Box, type Scene, type Wire } from "../layout";
import type { CheckpointDetail } from "./types";

export const MARK = { ran: "#6741d9", next: "#f08c00", error: "#e03131", send: "#1971c2" };
const UI = "system-ui, sans-serif";

let rc: RoughSVG | null = null;

interface Tag {
  text: string;
  color: string;
  filled: boolean;
  title?: string;
}

function short(value: unknown, max = 60): string {
  let s: string;
  try {
    s = typeof value === "string" ? value : JSON.stringify(value);
  } catch {
    s = String(value);
  }
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** Draw ``cp``'s marks into ``layer`` (cleared first); ``null`` just clears it. */
export function drawMarks(svg: SVGSVGElement, layer: SVGGElement, scene: Scene | null, cp: CheckpointDetail | null): void {
  layer.replaceChildren();
  if (!scene || !cp) return;
  if (!rc) rc = rough.svg(svg);
  const errors = new Map<string, string>();
  for (const e of cp.errors) if (e.node) errors.set(e.node, e.error);
  const sends = new Map<string, unknown[]>();
  for (const s of cp.sends) (sends.get(s.node) ?? sends.set(s.node, []).get(s.node)!).push(s.arg);
  drawTaken(layer, scene, cp, sends);
  const names = new Set<string>([...cp.ran, ...cp.next, ...sends.keys(), ...errors.keys()]);
  for (const name of names) {
    const box = scene.boxes.get(name);
    if (!box) continue;
    const ran = cp.ran.includes(name);
    const failed = errors.has(name);
    const next = cp.next.includes(name) || sends.has(name);
    const tags: Tag[] = [];
    if (ran) tags.push({ text: `ran · step ${cp.step}`, color: MARK.ran, filled: true });
    if (failed) tags.push({ text: "error", color: MARK.error, filled: true, title: errors.get(name) });
    if (sends.has(name)) {
      const args = sends.get(name)!;
      tags.push({ text: `Send ×${args.length}`, color: MARK.send, filled: false, title: args.map((a) => short(a, 200)).join("\n") });
    } else if (next) {
      tags.push({ text: "next", color: MARK.next, filled: false });
    }
    const kind = failed ? "error" : ran ? "ran" : "next";
    layer.append(mark(box, kind, tags));
  }
}

/** Over each wire from a node that ran to one that runs next, the route this run took:
 * which of a router's targets it picked, drawn in the colour of "next". */
function drawTaken(layer: SVGGElement, scene: Scene, cp: CheckpointDetail, sends: Map<string, unknown[]>): void {
  const seen = new Set<string>();
  for (const wire of scene.wires) {
    const key = `${wire.from}\u0000${wire.to}`;
    if (seen.has(key) || !cp.ran.includes(wire.from) || !(cp.next.includes(wire.to) || sends.has(wire.to))) continue;
    seen.add(key);
    const g = el("g", { class: "dbg-route", "data-from": wire.from, "data-to": wire.to, "pointer-events": "none" }, layer);
    g.appendChild(rc!.path(wireGeom(scene, wire).path, { seed: seed(key) + 5, roughness: 0.8, bowing: 0.5, stroke: MARK.next, strokeWidth: 3.2 }));
  }
  // A route the code computes (a `route → ?` stub): the checkpoint records where it went, so
  // that route is drawn from the node that ran to the node that runs next, labelled.
  for (const stub of scene.wires) {
    if (scene.boxes.get(stub.to)?.kind !== "stub" || !cp.ran.includes(stub.from)) continue;
    for (const to of [...cp.next, ...sends.keys()]) {
      const key = `${stub.from}\u0000${to}`;
      if (seen.has(key) || scene.boxes.get(to)?.kind !== "node") continue;
      seen.add(key);
      const text = `${stub.edge.path ?? "route"} → ${to}`;
      const taken: Wire = { ...stub, id: `${stub.id}:ran:${to}`, to, label: text, loop: stub.from === to, points: undefined, labelAt: undefined };
      const geom = wireGeom(scene, taken);
      const g = el("g", { class: "dbg-route computed", "data-from": stub.from, "data-to": to, "pointer-events": "none" }, layer);
      g.appendChild(rc!.path(geom.path, { seed: seed(key) + 5, roughness: 0.8, bowing: 0.5, stroke: MARK.next, strokeWidth: 3.2, strokeLineDash: [10, 6] }));
      const at = geom.label ?? geom.tip;
      const w = textWidth(text, 12.5, UI) + 14;
      el("rect", { x: at.x - w / 2, y: at.y - 11, width: w, height: 21, rx: 10.5, fill: "#fff", stroke: MARK.next, "stroke-width": 1.5 }, g);
      const label = el("text", { x: at.x, y: at.y + 4, "text-anchor": "middle", "font-size": 12.5, "font-family": UI, fill: MARK.next }, g);
      label.textContent = text;
    }
  }
}

function mark(box: Box, kind: "ran" | "next" | "error", tags: Tag[]): SVGGElement {
  const g = el("g", { class: `dbg-mark ${kind}`, "data-node": box.id, transform: `translate(${box.x},${box.y})` });
  const color = kind === "error" ? MARK.error : kind === "ran" ? MARK.ran : MARK.next;
  const pad = 8;
  g.appendChild(
    rc!.rectangle(-pad, -pad, box.w + 2 * pad, box.h + 2 * pad, {
      seed: seed(box.id) + 11,
      roughness: 1.3,
      stroke: color,
      strokeWidth: kind === "next" ? 2.2 : 3,
      ...(kind === "next" ? { strokeLineDash: [7, 6] } : {}),
    }),
  );
  // on the ring's top edge, from the left; on its bottom edge when the node's own badges
  // (retry, timeout) hold the top
  const y = box.node && nodeBadges(box.node).length ? box.h + pad - 10.5 : -pad - 10.5;
  let x = 6 - pad;
  for (const t of tags) {
    const w = textWidth(t.text, 12.5, UI) + 16;
    const tg = el("g", { class: "dbg-tag", transform: `translate(${x},${y})` }, g);
    el("rect", { x: 0, y: 0, width: w, height: 21, rx: 10.5, fill: t.filled ? t.color : "#ffffff", stroke: t.color, "stroke-width": 1.5 }, tg);
    const tx = el("text", { x: w / 2, y: 14.5, "text-anchor": "middle", "font-size": 12.5, "font-family": UI, fill: t.filled ? "#ffffff" : t.color }, tg);
    tx.textContent = t.text;
    if (t.title) el("title", {}, tg).textContent = t.title;
    x += w + 6;
  }
  return g;
}

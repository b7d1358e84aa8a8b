// Agents and their handoffs: when the file builds agents and no graph, the canvas draws each
// agent as a box and each handoffs=[...] entry as a dashed arrow. Dragging from one agent onto
// another adds a handoff; the × on an arrow removes it (POST /api/handoff edits the file).
import * as api from "./api";
import { el } from "./draw";
import { toast } from "./notices";
import { stage } from "./stage";
import { state } from "./store";
import { reload } from "./sync";
import type { HandoffIR, TeamIR } from "./types";

const W = 170;
const H = 58;
const GAP = 110;
const TOP = 150;
const LEFT = 80;
const COLOR = "#c2255c";

interface Spot {
  x: number;
  y: number;
}

/** Where each agent sits: one row, in the order the file builds them. */
export function teamPlaces(team: TeamIR): Map<string, Spot> {
  const places = new Map<string, Spot>();
  team.agents.forEach((agent, i) => places.set(agent.name, { x: LEFT + i * (W + GAP), y: TOP }));
  return places;
}

/** Draw the team into the stage's layers (which the caller has emptied). */
export function paintTeam(team: TeamIR): void {
  const { layers } = stage();
  const places = teamPlaces(team);
  for (const [name, at] of places) {
    const g = el("g", { class: "box agent", "data-agent": name, transform: `translate(${at.x},${at.y})` }, layers.boxes);
    el("rect", { width: W, height: H, rx: 12, fill: "#fff0f6", stroke: COLOR, "stroke-width": 2 }, g);
    const title = el("text", { x: W / 2, y: 26, "text-anchor": "middle", "font-size": 18, "font-family": "Virgil, cursive" }, g);
    title.textContent = name;
    const agent = team.agents.find((a) => a.name === name);
    const sub = el("text", { x: W / 2, y: 45, "text-anchor": "middle", "font-size": 11, fill: "#868e96" }, g);
    sub.textContent = agent ? `${agent.factory}(...) · line ${agent.line}` : "";
    if (!state.readOnly) g.addEventListener("pointerdown", (ev) => startDrag(ev, name));
  }
  const unknown = team.handoffs.filter((h) => !places.has(h.target));
  unknown.forEach((h, i) => places.set(h.target, { x: LEFT + (team.agents.length + i) * (W + GAP), y: TOP }));
  team.handoffs.forEach((h, i) => drawHandoff(h, i, places));
}

function drawHandoff(h: HandoffIR, index: number, places: Map<string, Spot>): void {
  const { layers } = stage();
  const from = places.get(h.source);
  const to = places.get(h.target);
  if (!from || !to) return;
  const forward = to.x >= from.x;
  // forward arrows bend above the row, backward ones below, so a pair never overlaps
  const y0 = forward ? from.y : from.y + H;
  const y1 = forward ? to.y : to.y + H;
  const x0 = from.x + W / 2 + (forward ? 20 : -20);
  const x1 = to.x + W / 2 + (forward ? -20 : 20);
  const lift = (forward ? -1 : 1) * (50 + Math.abs(x1 - x0) * 0.18);
  const d = `M${x0},${y0} C${x0},${y0 + lift} ${x1},${y1 + lift} ${x1},${y1}`;
  const g = el("g", { class: "wire handoff", "data-source": h.source, "data-target": h.target }, layers.wires);
  el("path", { d, fill: "none", stroke: COLOR, "stroke-width": 2, "stroke-dasharray": "7 5" }, g);
  const tip = forward ? -1 : 1; // the arrowhead points into the box
  el("path", { d: `M${x1 - 6},${y1 + tip * 10} L${x1},${y1} L${x1 + 6},${y1 + tip * 10}`, fill: "none", stroke: COLOR, "stroke-width": 2 }, g);
  const mx = (x0 + x1) / 2;
  const my = (y0 + y1) / 2 + lift * 0.75;
  const label = el("g", { class: "wire-label handoff-label", transform: `translate(${mx},${my})` }, layers.labels);
  const words = [h.tool_name ?? "handoff", h.input_filter ? `| ${h.input_filter}` : "", h.requires_approval ? "| approve" : ""];
  const text = words.filter(Boolean).join(" ");
  const width = 36 + text.length * 6.6;
  el("rect", { x: -width / 2, y: -11, width, height: 22, rx: 11, fill: "#fff", stroke: COLOR, "stroke-width": 1.2 }, label);
  const t = el("text", { x: -9, y: 4, "text-anchor": "middle", "font-size": 11.5, fill: COLOR }, label);
  t.textContent = text;
  if (!state.readOnly) {
    const x = el("g", { class: "handoff-remove", "data-index": index, transform: `translate(${width / 2 - 9},0)`, cursor: "pointer" }, label);
    el("circle", { r: 8, fill: COLOR }, x);
    const cross = el("text", { y: 4, "text-anchor": "middle", "font-size": 12, fill: "#fff" }, x);
    cross.textContent = "×";
    x.addEventListener("pointerdown", (ev) => ev.stopPropagation());
    x.addEventListener("click", (ev) => {
      ev.stopPropagation();
      void change("remove", h.source, h.target);
    });
  }
}

/** Drag from an agent: a rubber line follows; released over another agent, a handoff. */
function startDrag(ev: PointerEvent, source: string): void {
  ev.stopPropagation();
  ev.preventDefault();
  const { layers, viewport } = stage();
  const toLocal = (e: PointerEvent): Spot => {
    const m = viewport.getScreenCTM();
    if (!m) return { x: e.clientX, y: e.clientY };
    const p = new DOMPoint(e.clientX, e.clientY).matrixTransform(m.inverse());
    return { x: p.x, y: p.y };
  };
  const start = toLocal(ev);
  const line = el("line", { x1: start.x, y1: start.y, x2: start.x, y2: start.y, class: "rubber" }, layers.ghost);
  const move = (e: PointerEvent) => {
    const at = toLocal(e);
    line.setAttribute("x2", String(at.x));
    line.setAttribute("y2", String(at.y));
  };
  const up = (e: PointerEvent) => {
    window.removeEventListener("pointermove", move);
    window.removeEventListener("pointerup", up);
    line.remove();
    const over = document.elementFromPoint(e.clientX, e.clientY)?.closest("g.agent");
    const target = over?.getAttribute("data-agent");
    if (target && target !== source) void change("add", source, target);
  };
  window.addEventListener("pointermove", move);
  window.addEventListener("pointerup", up);
}

async function change(op: "add" | "remove", source: string, target: string): Promise<void> {
  try {
    await api.handoff(state.version, op, source, target);
  } catch (err) {
    toast((err as Error).message, "error");
  }
  await reload({ quiet: true });
}

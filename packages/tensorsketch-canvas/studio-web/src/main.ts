// TensorSketch Studio: the canvas. The file is the truth; every gesture is an edit the server
// writes into it, and the canvas repaints from the re-extracted graph it sends back.
import * as api from "./api";
import { ApiError } from "./api";
import { drawBox, drawTrace, drawWire, el, formatCost, formatMs } from "./draw";
import { buildScene, displayName, type Box, type Scene } from "./layout";
import { exportPng, exportSvg } from "./export";
import { drawMinimap, minimapToScene } from "./minimap";
import { drawBadges, markBreakpoints } from "./badges";
import * as debug from "./debug/index";
import {
  END,
  START,
  type EdgeIR,
  type EditOp,
  type GraphIR,
  type GraphResponse,
  type HoleRef,
  type NodeIR,
  type RunSummary,
  type RunTrace,
  type XY,
} from "./types";

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const svg = document.getElementById("canvas") as unknown as SVGSVGElement;
const viewport = document.getElementById("viewport") as unknown as SVGGElement;
const layers = {
  wires: document.getElementById("wires") as unknown as SVGGElement,
  boxes: document.getElementById("boxes") as unknown as SVGGElement,
  labels: document.getElementById("labels") as unknown as SVGGElement,
  overlay: document.getElementById("overlay") as unknown as SVGGElement,
  ghost: document.getElementById("ghost") as unknown as SVGGElement,
};

// -- state -------------------------------------------------------------------------------------

type Entry =
  | { kind: "edit"; redo: EditOp; undo: EditOp; label: string }
  | { kind: "move"; node: string; before: XY; after: XY; label: string };

const state = {
  file: "",
  graph: null as GraphIR | null, // the last good graph
  graphName: null as string | null,
  graphs: [] as string[],
  version: "",
  layout: {} as Record<string, XY>,
  holes: [] as HoleRef[],
  readOnly: false,
  scene: null as Scene | null,
  view: { x: 0, y: 0, k: 1 },
  selectedWire: null as number | null,
  selectedNode: null as string | null,
  undo: [] as Entry[],
  redo: [] as Entry[],
  live: false,
  runs: [] as RunSummary[],
  run: null as string | null,
  followLatest: true,
  trace: null as RunTrace | null,
  busy: false,
  paints: 0,
  lastPaint: 0,
  fitted: false,
  framed: 0,
  timings: { layout: 0, draw: 0, edit: 0 } as Record<string, number>,
  userView: false, // the user panned or zoomed: stop fitting the graph after each change
  connected: false,
  message: null as string | null, // why there is no graph, as the server says it
  fileHoles: null as HoleRef[] | null, // the opened file's holes when it last parsed
};

// For tests and benchmarks: read-only peeks at the state, and the paint counter.
(window as unknown as Record<string, unknown>).__studio = {
  state,
  get paints() {
    return state.paints;
  },
  exportSvg: () => exportSvg(svg, viewport),
  debug: debug.dbg,
  layoutTree: debug.layoutTree,
};

// -- messages ----------------------------------------------------------------------------------

let toastTimer = 0;
function toast(msg: string, kind: "info" | "error" | "conflict" = "info", ms = 6000): void {
  const t = $("toast");
  t.textContent = msg;
  t.className = kind;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => (t.hidden = true), ms);
}
$("toast").addEventListener("click", () => ($("toast").hidden = true));

function setBanner(resp: GraphResponse): void {
  const b = $("banner");
  const pe = resp.parse_error;
  if (pe) {
    const where = pe.line ? `line ${pe.line}${pe.column ? `, column ${pe.column}` : ""}` : "somewhere";
    b.innerHTML = "";
    const strong = document.createElement("strong");
    strong.textContent = `${resp.file || "The file"} does not parse (${where}): `;
    // the strong part already names the file and the place: drop the message's own
    // "cannot parse NAME (line N: ...); " lead-in down to what went wrong and what to do
    const lead = /^cannot parse \S+ \(line \d+: (.*?)\); /.exec(pe.message);
    const text = lead ? `${lead[1]}; ${pe.message.slice(lead[0].length)}` : pe.message;
    b.append(strong, document.createTextNode(text));
    const tail = document.createElement("span");
    tail.className = "tail";
    tail.textContent = state.graph
      ? " — showing the last good graph, read-only, until the file parses again."
      : " — nothing to show until the file parses.";
    b.append(tail);
    b.hidden = false;
  } else {
    b.hidden = true;
  }
  syncBars();
}

/** ``--bar`` and ``--banner``: the toolbar's height (two rows in a narrow window) and the
 * banner's (0 while hidden), which place the stage and the side panels below them. */
let bars = "";
function syncBars(): void {
  const bar = $("toolbar").offsetHeight || 46;
  const banner = $("banner");
  const ban = banner.hidden ? 0 : banner.offsetHeight;
  const key = `${bar}:${ban}`;
  if (key === bars) return;
  const stageMoved = !bars.startsWith(`${bar}:`);
  bars = key;
  document.documentElement.style.setProperty("--bar", `${bar}px`);
  document.documentElement.style.setProperty("--banner", `${ban}px`);
  if (stageMoved) relayout();
}
new ResizeObserver(() => syncBars()).observe($("toolbar"));
new ResizeObserver(() => syncBars()).observe($("banner"));

/** The stage changed size: fit again unless the user has moved the view. */
function relayout(): void {
  if (!state.userView && state.scene) fit(true);
  else applyView();
}

// -- loading -----------------------------------------------------------------------------------

async function reload(opts: { quiet?: boolean } = {}): Promise<void> {
  let resp: GraphResponse;
  try {
    resp = await api.getGraph(state.graphName);
  } catch (err) {
    if (!opts.quiet) toast(`Could not load the graph: ${(err as Error).message}`, "error");
    return;
  }
  apply(resp);
}

function apply(resp: GraphResponse): void {
  state.file = resp.file;
  state.graphs = resp.graphs ?? [];
  state.graphName = resp.selected ?? state.graphName;
  state.message = resp.message ?? null;
  const holes = resp.holes ?? [];
  const mine = (h: HoleRef) => h.file === resp.file;
  if (!resp.parse_error) state.fileHoles = holes.filter(mine);
  // a file that does not parse shows no holes: count the ones it had when it last parsed
  state.holes = resp.parse_error ? [...holes.filter((h) => !mine(h)), ...(state.fileHoles ?? [])] : holes;
  const oldGraph = state.graph;
  const oldLayout = JSON.stringify(state.layout);
  state.layout = resp.layout ?? {};
  state.version = resp.version;
  if (resp.graph) markBreakpoints(resp.graph);
  if (resp.graph && !resp.parse_error) state.graph = resp.graph;
  else if (resp.graph && !state.graph) state.graph = resp.graph;
  state.readOnly = !!resp.parse_error || !!resp.stale;
  setBanner(resp);
  renderToolbar();
  if (JSON.stringify(oldGraph) !== JSON.stringify(state.graph) || oldLayout !== JSON.stringify(state.layout) || !state.scene) {
    paint();
  } else {
    document.body.classList.toggle("read-only", state.readOnly);
  }
}

function renderToolbar(): void {
  $("file").textContent = state.file.split(/[\\/]/).pop() ?? state.file;
  $("file").title = state.file;
  const picker = $<HTMLSelectElement>("graph-picker");
  picker.hidden = state.graphs.length < 2;
  if (picker.options.length !== state.graphs.length || [...picker.options].some((o, i) => o.value !== state.graphs[i])) {
    picker.innerHTML = "";
    for (const name of state.graphs) picker.add(new Option(name, name));
  }
  if (state.graphName) picker.value = state.graphName;
  const unknown = state.readOnly && state.fileHoles === null; // never parsed: its holes are unknown
  const badge = $("holes-badge");
  $("holes-count").textContent = unknown ? "?" : String(state.holes.length);
  badge.classList.toggle("has-holes", state.holes.length > 0);
  badge.title = state.readOnly
    ? `nodes that still need code, across the project (${state.file.split(/[\\/]/).pop()} does not parse: ${unknown ? "its holes are not counted" : "its holes as of when it last parsed"})`
    : "nodes that still need code, across the project";
  $<HTMLButtonElement>("undo").disabled = state.undo.length === 0 || state.readOnly;
  $<HTMLButtonElement>("redo").disabled = state.redo.length === 0 || state.readOnly;
  $<HTMLButtonElement>("add-node").disabled = state.readOnly || !state.graph;
  $<HTMLButtonElement>("undo").title = state.undo.length ? `undo: ${state.undo[state.undo.length - 1].label} (Ctrl+Z)` : "nothing to undo";
  $<HTMLButtonElement>("redo").title = state.redo.length ? `redo: ${state.redo[state.redo.length - 1].label} (Ctrl+Shift+Z)` : "nothing to redo";
  if (!$("holes-list").hidden) renderHoles();
}

// -- painting ----------------------------------------------------------------------------------

function paint(): void {
  document.body.classList.toggle("read-only", state.readOnly);
  for (const layer of Object.values(layers)) layer.replaceChildren();
  const empty = $("empty");
  if (!state.graph) {
    state.scene = null;
    empty.hidden = false;
    empty.textContent = state.message || (state.readOnly ? "Nothing to show until the file parses." : "No graph to show yet.");
    return;
  }
  empty.hidden = true;
  const t0 = performance.now();
  const scene = buildScene(state.graph, state.layout);
  const t1 = performance.now();
  state.scene = scene;
  if (state.selectedNode && !scene.boxes.has(state.selectedNode)) state.selectedNode = null;
  if (state.selectedWire !== null && !scene.wires.some((w) => w.index === state.selectedWire)) state.selectedWire = null;
  const wireFrag = document.createDocumentFragment();
  const labelFrag = document.createDocumentFragment();
  for (const wire of scene.wires) {
    const g = drawWire(svg, scene, wire, wire.index === state.selectedWire);
    const label = g.querySelector(".wire-label");
    if (label) {
      label.setAttribute("data-index", String(wire.index));
      labelFrag.appendChild(label);
    }
    wireFrag.appendChild(g);
  }
  const boxFrag = document.createDocumentFragment();
  for (const box of scene.boxes.values()) {
    const g = drawBox(svg, box, state.readOnly);
    drawBadges(box, g);
    if (box.id === state.selectedNode) g.classList.add("selected");
    boxFrag.appendChild(g);
  }
  layers.wires.appendChild(wireFrag);
  layers.boxes.appendChild(boxFrag);
  layers.labels.appendChild(labelFrag);
  paintTrace();
  debug.repaintMarks();
  if (!state.fitted || !state.userView) {
    state.fitted = true;
    fit(true);
  }
  applyView();
  renderInspector();
  state.paints++;
  state.lastPaint = performance.now();
  state.timings.layout = t1 - t0;
  state.timings.draw = state.lastPaint - t1;
  const n = state.paints;
  // when the browser has put this paint on screen (benchmarks read it)
  requestAnimationFrame(() => setTimeout(() => n === state.paints && (state.framed = performance.now())));
}

function paintTrace(): void {
  layers.overlay.replaceChildren();
  if (!state.live || !state.trace || !state.scene) return;
  for (const [name, t] of Object.entries(state.trace.nodes)) {
    const box = state.scene.boxes.get(name);
    if (box) layers.overlay.appendChild(drawTrace(svg, box, t));
  }
}

// -- view: pan, zoom, fit, minimap ------------------------------------------------------------

function applyView(): void {
  const { x, y, k } = state.view;
  viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
  const mm = $<HTMLCanvasElement>("minimap");
  const n = state.scene?.boxes.size ?? 0;
  mm.hidden = n < 24;
  if (!mm.hidden && state.scene) drawMinimap(mm, state.scene, state.view, svg.clientWidth, svg.clientHeight);
}

/** Fit the whole graph on screen. ``auto`` (after loads and edits, until the user pans or
 * zooms) never goes below a legible zoom: a graph too big for that shows its START end and
 * the minimap, and the fit button shows all of it. */
function fit(auto = false): void {
  if (!state.scene) return;
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const b of state.scene.boxes.values()) {
    x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y - 80);
    x1 = Math.max(x1, b.x + b.w); y1 = Math.max(y1, b.y + b.h + 40);
  }
  const W = svg.clientWidth || 1200;
  const H = svg.clientHeight || 700;
  const k = Math.min(1.25, Math.max(auto ? 0.45 : 0.02, Math.min((W - 60) / (x1 - x0), (H - 60) / (y1 - y0))));
  const x = (x1 - x0) * k > W - 60 ? 30 - x0 * k : (W - (x1 - x0) * k) / 2 - x0 * k;
  let y = (H - (y1 - y0) * k) / 2 - y0 * k;
  if ((y1 - y0) * k > H - 60) {
    // too tall: centre on START's row
    const start = state.scene.boxes.get(START);
    y = start ? H / 2 - (start.y + start.h / 2) * k : 30 - y0 * k;
  }
  state.view = { k, x, y };
  state.userView = false;
  // too big to show whole: keep the open checkpoint's nodes (ran, next) in sight
  if (auto && ((x1 - x0) * k > W - 60 || (y1 - y0) * k > H - 60)) centreOn(debug.focusNodes());
  applyView();
}

/** The screen-space bounds of ``names``' boxes at the current view (null: none on the canvas). */
function boundsOf(names: string[]): { x0: number; y0: number; x1: number; y1: number } | null {
  const { x, y, k } = state.view;
  let b: { x0: number; y0: number; x1: number; y1: number } | null = null;
  for (const name of names) {
    const box = state.scene?.boxes.get(name);
    if (!box) continue;
    // the marks' ring and tags reach a little past the box
    const r = { x0: x + (box.x - 12) * k, y0: y + (box.y - 34) * k, x1: x + (box.x + box.w + 12) * k, y1: y + (box.y + box.h + 12) * k };
    b = b ? { x0: Math.min(b.x0, r.x0), y0: Math.min(b.y0, r.y0), x1: Math.max(b.x1, r.x1), y1: Math.max(b.y1, r.y1) } : r;
  }
  return b;
}

/** Pan (never zoom) so the boxes of ``names`` are centred; the first of them leads when
 * they do not fit together. */
function centreOn(names: string[]): void {
  let b = boundsOf(names);
  const W = svg.clientWidth || 1200;
  const H = svg.clientHeight || 700;
  if (b && (b.x1 - b.x0 > W || b.y1 - b.y0 > H)) b = boundsOf(names.slice(0, 1));
  if (!b) return;
  state.view.x += W / 2 - (b.x0 + b.x1) / 2;
  state.view.y += H / 2 - (b.y0 + b.y1) / 2;
}

/** Bring ``names`` into view when any of them is off-screen (the debugger opened a
 * checkpoint): a pan, the zoom stays. */
function reveal(names: string[]): void {
  const b = boundsOf(names);
  if (!b) return;
  const W = svg.clientWidth;
  const H = svg.clientHeight;
  if (b.x0 >= 0 && b.y0 >= 0 && b.x1 <= W && b.y1 <= H) return;
  centreOn(names);
  applyView();
}

function zoomAt(factor: number, cx: number, cy: number): void {
  const v = state.view;
  const k = Math.min(4, Math.max(0.02, v.k * factor));
  const f = k / v.k;
  state.view = { k, x: cx - (cx - v.x) * f, y: cy - (cy - v.y) * f };
  state.userView = true;
  applyView();
}

function toScene(clientX: number, clientY: number): XY {
  const r = svg.getBoundingClientRect();
  return { x: (clientX - r.left - state.view.x) / state.view.k, y: (clientY - r.top - state.view.y) / state.view.k };
}

svg.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const r = svg.getBoundingClientRect();
  if (ev.ctrlKey || Math.abs(ev.deltaY) > 0 && !ev.shiftKey) zoomAt(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
  else {
    state.view.x -= ev.deltaX || ev.deltaY;
    state.userView = true;
    applyView();
  }
}, { passive: false });

$("fit").addEventListener("click", () => fit());
$("reset").addEventListener("click", () => {
  state.view = { x: 40, y: 80, k: 1 };
  state.userView = true;
  applyView();
});
$("zoom-in").addEventListener("click", () => zoomAt(1.25, svg.clientWidth / 2, svg.clientHeight / 2));
$("zoom-out").addEventListener("click", () => zoomAt(0.8, svg.clientWidth / 2, svg.clientHeight / 2));
window.addEventListener("resize", () => applyView());

const minimap = $<HTMLCanvasElement>("minimap");
function minimapJump(ev: PointerEvent): void {
  if (!state.scene) return;
  const p = minimapToScene(minimap, state.scene, ev.offsetX, ev.offsetY);
  state.view.x = svg.clientWidth / 2 - p.x * state.view.k;
  state.view.y = svg.clientHeight / 2 - p.y * state.view.k;
  state.userView = true;
  applyView();
}
minimap.addEventListener("pointerdown", (ev) => {
  minimap.setPointerCapture(ev.pointerId);
  minimapJump(ev);
});
minimap.addEventListener("pointermove", (ev) => {
  if (ev.buttons) minimapJump(ev);
});

// -- gestures ----------------------------------------------------------------------------------

type Drag =
  | { kind: "pan"; x: number; y: number; vx: number; vy: number; moved: boolean }
  | { kind: "move"; node: string; start: XY; orig: XY; moved: boolean; g: SVGGElement }
  | { kind: "wire"; from: string; start: XY; line: SVGPathElement };

let drag: Drag | null = null;

function boxAt(target: EventTarget | null): Box | null {
  const g = (target as Element | null)?.closest?.("g.box");
  const id = g?.getAttribute("data-id");
  return id && state.scene ? state.scene.boxes.get(id) ?? null : null;
}

svg.addEventListener("pointerdown", (ev) => {
  if (ev.button !== 0) return;
  const target = ev.target as Element;
  hideTooltip();
  const box = boxAt(target);
  if (box && target.classList.contains("handle") && !state.readOnly) {
    const s = { x: box.x + box.w, y: box.y + box.h / 2 };
    const line = el("path", { class: "rubber", d: `M ${s.x} ${s.y} L ${s.x} ${s.y}` }, layers.ghost);
    drag = { kind: "wire", from: box.id, start: s, line };
  } else if (box && box.kind === "node") {
    const g = target.closest("g.box") as SVGGElement;
    drag = { kind: "move", node: box.id, start: toScene(ev.clientX, ev.clientY), orig: { x: box.x, y: box.y }, moved: false, g };
  } else if (target.closest("g.wire, g.wire-label")) {
    const idx = Number(target.closest("[data-index]")?.getAttribute("data-index"));
    selectWire(idx);
    return;
  } else if (box && box.kind === "stub") {
    // a `route → ?` stub stands for its dynamic route: selecting it selects the route
    selectWire(Number(box.id.slice("stub:".length)));
    return;
  } else if (box) {
    selectNode(null);
    return;
  } else {
    drag = { kind: "pan", x: ev.clientX, y: ev.clientY, vx: state.view.x, vy: state.view.y, moved: false };
  }
  svg.setPointerCapture(ev.pointerId);
});

svg.addEventListener("pointermove", (ev) => {
  if (!drag) {
    maybeTooltip(ev);
    return;
  }
  if (drag.kind === "pan") {
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    if (drag.moved) state.userView = true;
    state.view.x = drag.vx + dx;
    state.view.y = drag.vy + dy;
    applyView();
  } else if (drag.kind === "move") {
    const p = toScene(ev.clientX, ev.clientY);
    const dx = p.x - drag.start.x;
    const dy = p.y - drag.start.y;
    if (Math.abs(dx) + Math.abs(dy) > 3 && !state.readOnly) drag.moved = true;
    if (drag.moved) {
      drag.g.setAttribute("transform", `translate(${drag.orig.x + dx},${drag.orig.y + dy})`);
      layers.overlay.replaceChildren();
    }
  } else if (drag.kind === "wire") {
    const p = toScene(ev.clientX, ev.clientY);
    const s = drag.start;
    const dx = Math.max(40, Math.abs(p.x - s.x) / 2);
    drag.line.setAttribute("d", `M ${s.x} ${s.y} C ${s.x + dx} ${s.y}, ${p.x - dx} ${p.y}, ${p.x} ${p.y}`);
    document.querySelectorAll("g.box.drop-target").forEach((e) => e.classList.remove("drop-target"));
    const over = boxAt(document.elementFromPoint(ev.clientX, ev.clientY));
    if (over && over.id !== drag.from) document.querySelector(`g.box[data-id="${CSS.escape(over.id)}"]`)?.classList.add("drop-target");
  }
});

svg.addEventListener("pointerup", (ev) => {
  const d = drag;
  drag = null;
  if (!d) return;
  if (d.kind === "pan") {
    if (!d.moved) {
      selectNode(null);
      selectWire(null);
    }
  } else if (d.kind === "move") {
    if (!d.moved) {
      if (!debug.onNodeClick(d.node)) selectNode(d.node);
      return;
    }
    const p = toScene(ev.clientX, ev.clientY);
    const after = { x: Math.round(d.orig.x + p.x - d.start.x), y: Math.round(d.orig.y + p.y - d.start.y) };
    state.userView = true; // the user is arranging: the view stays where it is
    void moveNode(d.node, d.orig, after, true);
  } else if (d.kind === "wire") {
    d.line.remove();
    document.querySelectorAll("g.box.drop-target").forEach((e) => e.classList.remove("drop-target"));
    const over = boxAt(document.elementFromPoint(ev.clientX, ev.clientY));
    if (over) void wire(d.from, over.id);
  }
});

svg.addEventListener("dblclick", (ev) => {
  const box = boxAt(ev.target);
  if (box?.kind === "node" && !state.readOnly) {
    selectNode(box.id);
    const input = document.getElementById("rename-input") as HTMLInputElement | null;
    input?.focus();
    input?.select();
  }
});

function selectNode(name: string | null): void {
  state.selectedNode = name;
  if (name) state.selectedWire = null;
  document.querySelectorAll("g.box.selected").forEach((e) => e.classList.remove("selected"));
  document.querySelectorAll("g.wire.selected").forEach((e) => e.classList.remove("selected"));
  if (name) document.querySelector(`g.box[data-id="${CSS.escape(name)}"]`)?.classList.add("selected");
  renderInspector();
}

function selectWire(index: number | null): void {
  const changed = state.selectedWire !== index;
  state.selectedWire = index;
  if (index !== null) state.selectedNode = null;
  renderInspector();
  if (changed) paint();
}

// -- tooltip: a hole's message on hover -------------------------------------------------------

function maybeTooltip(ev: PointerEvent): void {
  const g = (ev.target as Element).closest?.("g.box.hole");
  const tip = $("tooltip");
  if (!g) {
    tip.hidden = true;
    return;
  }
  const node = state.graph?.nodes.find((n) => n.name === g.getAttribute("data-id"));
  if (!node) return;
  tip.innerHTML = "";
  const b = document.createElement("b");
  b.textContent = "needs code";
  tip.append(b, document.createTextNode(`: ${node.hole ?? "(no description)"}`));
  if (node.line) {
    const s = document.createElement("div");
    s.className = "hint";
    s.textContent = `${state.file.split(/[\\/]/).pop()}:${node.line}`;
    tip.append(s);
  }
  // under the box, so it never hides the node's own ports
  const r = (g.firstElementChild ?? g).getBoundingClientRect();
  tip.style.left = `${Math.max(4, Math.min(r.left, innerWidth - 370))}px`;
  tip.style.top = `${r.bottom + 8 > innerHeight - 60 ? r.top - 60 : r.bottom + 8}px`;
  tip.hidden = false;
}
function hideTooltip(): void {
  $("tooltip").hidden = true;
}
svg.addEventListener("pointerleave", hideTooltip);

// -- edits -------------------------------------------------------------------------------------

function describe(op: EditOp): string {
  const a = op.args as Record<string, string>;
  switch (op.op) {
    case "add_node": return `create ${a.name}`;
    case "add_edge": return `wire ${displayName(a.source)} → ${displayName(a.target)}`;
    case "remove_edge": return (op.args as { join?: boolean }).join ? `delete the join into ${displayName(a.target)}` : `delete ${displayName(a.source)} → ${displayName(a.target)}`;
    case "add_join": return `join into ${displayName(a.target)}`;
    case "rename_node": return `rename ${a.old} → ${a.new}`;
    case "add_port": return `add port ${a.node}.${a.name}`;
    case "remove_port": return `remove port ${a.node}.${a.name}`;
    case "remove_node": return `delete ${a.name}`;
    case "restore": return "restore what was deleted";
    default: return op.op;
  }
}

/** Send one edit; on success repaint from the re-extracted graph. Returns the inverse. */
async function send(op: EditOp): Promise<{ ok: true; inverse: EditOp | null } | { ok: false }> {
  if (state.readOnly) {
    toast("The file does not parse: the canvas is read-only until it does.", "error");
    return { ok: false };
  }
  state.busy = true;
  document.body.classList.add("busy");
  try {
    const sent = performance.now();
    const res = await api.edit(state.version, state.graphName, op);
    state.timings.edit = performance.now() - sent;
    state.version = res.version;
    if (res.graph) state.graph = res.graph;
    if (res.layout) state.layout = res.layout;
    paint();
    renderToolbar();
    void reload({ quiet: true }); // holes and layout elsewhere in the project may have changed
    return { ok: true, inverse: res.inverse };
  } catch (err) {
    if (err instanceof ApiError && err.status === 409) {
      toast(`Conflict: ${err.message} The file changed on disk; the canvas reloaded it — nothing was written.`, "conflict", 9000);
      await reload();
    } else if (err instanceof ApiError && err.status === 422) {
      toast(err.message, "error", 12000);
    } else {
      toast(`Edit refused: ${(err as Error).message}`, "error");
    }
    return { ok: false };
  } finally {
    state.busy = false;
    document.body.classList.remove("busy");
  }
}

async function perform(op: EditOp): Promise<boolean> {
  const r = await send(op);
  if (!r.ok) return false;
  if (r.inverse) {
    state.undo.push({ kind: "edit", redo: op, undo: r.inverse, label: describe(op) });
    state.redo = [];
  } else {
    // no inverse (e.g. a node's class stays in the code): earlier undos would not line up
    state.undo = [];
    state.redo = [];
    toast(`${describe(op)}: done — this edit cannot be undone from the canvas.`, "info", 4000);
  }
  renderToolbar();
  return true;
}

async function undo(): Promise<void> {
  const e = state.undo.pop();
  if (!e) return;
  if (e.kind === "move") {
    await moveNode(e.node, e.after, e.before, false);
    state.redo.push(e);
  } else {
    const r = await send(e.undo);
    if (!r.ok) {
      state.undo.push(e);
    } else {
      state.redo.push({ ...e, redo: r.inverse ?? e.redo });
    }
  }
  renderToolbar();
}

async function redo(): Promise<void> {
  const e = state.redo.pop();
  if (!e) return;
  if (e.kind === "move") {
    await moveNode(e.node, e.before, e.after, false);
    state.undo.push(e);
  } else {
    const r = await send(e.redo);
    if (!r.ok) state.redo.push(e);
    else state.undo.push({ ...e, undo: r.inverse ?? e.undo });
  }
  renderToolbar();
}

$("undo").addEventListener("click", () => void undo());
$("redo").addEventListener("click", () => void redo());

/** What the side panel says of a dynamic route: where its code can send the run, if known. */
function dynamicHint(e: EdgeIR): string {
  const path = e.path ?? "the routing function";
  const routes = (e.routes ?? []).map(displayName);
  if (!routes.length) return `dynamic: ${path} picks the next node when it runs`;
  const list = routes.length === 1 ? routes[0] : `${routes.slice(0, -1).join(", ")} or ${routes[routes.length - 1]}`;
  return `dynamic: ${path} can route to ${list} (read from its code; no mapping to edit)`;
}

function removeEdgeOp(e: EdgeIR): EditOp {
  if (e.kind === "join") return { op: "remove_edge", args: { source: (e.sources ?? [])[0], target: e.target, join: true } };
  const args: Record<string, unknown> = { source: e.source, target: e.target };
  if (e.kind === "conditional" && e.label !== null) args.label = e.label;
  return { op: "remove_edge", args };
}

/** Client-side checks that need no compiler: refused before anything is sent. */
function wiringProblem(source: string, target: string): string | null {
  if (source === target) return `${displayName(source)} cannot be wired to itself with a plain edge; a loop is written with g.loop(...) in the code.`;
  if (target === START) return "START has no inputs: nothing can be wired into it. Wire START → a node instead.";
  if (source === END) return "END has no outputs: a run stops there. Wire a node → END instead.";
  if (target.startsWith("custom:") || target.startsWith("stub:")) return "That box is wiring the canvas cannot edit; change it in the code.";
  const dup = state.graph?.edges.some((e) => e.kind === "sequential" && e.source === source && e.target === target);
  if (dup) return `${displayName(source)} → ${displayName(target)} is already wired.`;
  return null;
}

async function wire(source: string, target: string): Promise<void> {
  const problem = wiringProblem(source, target);
  if (problem) {
    toast(problem, "error");
    return;
  }
  await perform({ op: "add_edge", args: { source, target } });
}

async function moveNode(node: string, before: XY, after: XY, record: boolean): Promise<void> {
  const positions: Record<string, XY> = { ...state.layout, [node]: after };
  try {
    const res = await api.saveLayout(positions);
    state.layout = res.layout ?? positions;
  } catch (err) {
    toast(`Could not save the position: ${(err as Error).message}`, "error");
    state.layout = { ...state.layout };
  }
  if (record) {
    state.undo.push({ kind: "move", node, before, after, label: `move ${node}` });
    state.redo = [];
  }
  paint();
  renderToolbar();
}

document.addEventListener("keydown", (ev) => {
  const t = ev.target as HTMLElement;
  if (t.closest("input, textarea, select, dialog")) return;
  const mod = ev.ctrlKey || ev.metaKey;
  if (mod && ev.key.toLowerCase() === "z") {
    ev.preventDefault();
    void (ev.shiftKey ? redo() : undo());
  } else if (mod && ev.key.toLowerCase() === "y") {
    ev.preventDefault();
    void redo();
  } else if ((ev.key === "Delete" || ev.key === "Backspace") && state.selectedWire !== null) {
    ev.preventDefault();
    const e = state.graph?.edges[state.selectedWire];
    if (e && (e.source || e.kind === "join") && e.kind !== "custom" && !state.readOnly) {
      state.selectedWire = null;
      void perform(removeEdgeOp(e));
    }
  } else if (ev.key === "Escape") {
    if (!$("holes-list").hidden) return showHoles(false);
    selectNode(null);
    selectWire(null);
  } else if (ev.key === "f") {
    fit();
  }
});

// -- + node ------------------------------------------------------------------------------------

function parsePorts(text: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const raw of text.split(/[\n,;]/)) {
    const line = raw.trim();
    if (!line) continue;
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(.+))?$/.exec(line);
    if (!m) return `"${line}" is not a port: write name: type, e.g. query: str`;
    out[m[1]] = (m[2] ?? "str").trim();
  }
  return out;
}

const dialog = $<HTMLDialogElement>("node-dialog");
$("add-node").addEventListener("click", () => {
  ($("node-form") as HTMLFormElement).reset();
  dialog.showModal();
  $("new-name").focus();
});
dialog.addEventListener("close", async () => {
  if (dialog.returnValue !== "ok") return;
  const name = $<HTMLInputElement>("new-name").value.trim();
  const inputs = parsePorts($<HTMLTextAreaElement>("new-inputs").value);
  const outputs = parsePorts($<HTMLTextAreaElement>("new-outputs").value);
  if (typeof inputs === "string" || typeof outputs === "string") {
    toast((typeof inputs === "string" ? inputs : outputs) as string, "error");
    return;
  }
  if (state.graph?.nodes.some((n) => n.name === name)) {
    toast(`There is already a node called ${name}; pick another name.`, "error");
    return;
  }
  // drop it where the user is looking, unwired
  const W = svg.clientWidth;
  const H = svg.clientHeight;
  const at = freeSpot({ x: (W / 2 - state.view.x) / state.view.k - 90, y: (H * 0.7 - state.view.y) / state.view.k });
  // the position first, so the node appears where it is dropped (the sidecar is presentation
  // only: an entry for a node that never came to be is ignored)
  try {
    state.layout = (await api.saveLayout({ [name]: at })).layout ?? state.layout;
  } catch {
    /* the automatic layout places it */
  }
  await perform({ op: "add_node", args: { name, inputs, outputs } });
});

/** The first place at or below ``p`` where a new node's box overlaps nothing. */
function freeSpot(p: XY, w = 200, h = 90): XY {
  const boxes = [...(state.scene?.boxes.values() ?? [])];
  const hits = (q: XY) => boxes.some((b) => q.x < b.x + b.w + 30 && q.x + w + 30 > b.x && q.y < b.y + b.h + 40 && q.y + h + 40 > b.y);
  const q = { x: Math.round(p.x), y: Math.round(p.y) };
  for (let i = 0; i < 200 && hits(q); i++) q.y += 20;
  return q;
}

// -- inspector ---------------------------------------------------------------------------------

function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<HTMLElementTagNameMap[K]> & Record<string, unknown> = {}, ...kids: (Node | string)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k.startsWith("data-") || k.startsWith("aria-") || k === "for") e.setAttribute(k, String(v));
    else (e as unknown as Record<string, unknown>)[k] = v;
  }
  e.append(...kids);
  return e;
}

function renderInspector(): void {
  renderInspectorBody();
  const open = !$("inspector").hidden;
  if (document.body.classList.contains("inspecting") !== open) {
    document.body.classList.toggle("inspecting", open);
    if (!state.userView && state.scene) fit(true);
    else applyView();
  }
}

function renderInspectorBody(): void {
  const box = $("inspector");
  const g = state.graph;
  box.replaceChildren();
  if (state.selectedWire !== null && g) {
    const e = g.edges[state.selectedWire];
    if (!e) return void (box.hidden = true);
    box.hidden = false;
    box.append(
      h("h3", {}, `${e.kind === "join" ? `[${(e.sources ?? []).map(displayName).join(", ")}]` : displayName(e.source ?? "?")} → ${e.target === null && e.routes?.length ? e.routes.map(displayName).join(" | ") : displayName(e.target ?? "?")}`),
      h("p", { className: "hint" }, e.kind === "conditional" ? `conditional: ${e.path ?? ""} → ${e.label ?? ""}` : e.kind === "join" ? `join: ${displayName(e.target ?? "?")} runs once after all of these have run` : e.kind === "dynamic" ? dynamicHint(e) : e.kind),
      h("button", { className: "danger", id: "delete-edge", disabled: state.readOnly, onclick: () => void perform(removeEdgeOp(e)) }, e.kind === "sequential" ? "delete edge (Del)" : e.kind === "join" ? "delete join (Del)" : "delete route (Del)"),
    );
    return;
  }
  const node = g?.nodes.find((n) => n.name === state.selectedNode);
  if (!node) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  const rename = h("input", { id: "rename-input", value: node.name, disabled: state.readOnly, autocomplete: "off", "aria-label": `new name for ${node.name}` });
  const doRename = () => {
    const next = rename.value.trim();
    if (!next || next === node.name) return;
    void perform({ op: "rename_node", args: { old: node.name, new: next } }).then((ok) => {
      if (ok) return selectNode(next);
      // refused: the field shows the node's real name again (the note says why)
      const input = document.getElementById("rename-input") as HTMLInputElement | null;
      if (input && state.selectedNode === node.name) input.value = node.name;
    });
  };
  rename.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") doRename();
    if (ev.key === "Escape") rename.value = node.name;
  });
  box.append(
    h("h3", {}, node.name),
    h("p", { className: "hint" }, `class ${node.cls}${node.line ? ` · line ${node.line}` : ""}`),
  );
  if (node.has_hole) box.append(h("p", { className: "hole-msg" }, h("b", {}, "needs code: "), node.hole ?? "(no description)"));
  box.append(h("div", { className: "row" }, rename, h("button", { id: "rename-ok", disabled: state.readOnly, onclick: doRename }, "rename")));
  const portList = (side: "in" | "out", ports: NodeIR["inputs"]) => {
    const ul = h("ul", { className: `ports ${side}` });
    for (const p of ports) {
      const li = h("li", {}, `${p.name}: ${p.type}`);
      if (node.has_hole && !state.readOnly) {
        li.append(h("button", { className: "x", title: `remove port ${p.name}`, "aria-label": `remove port ${p.name}`, "data-remove-port": `${side}:${p.name}`, onclick: () => void perform({ op: "remove_port", args: { node: node.name, side, name: p.name } }) }, "×"));
      }
      ul.append(li);
    }
    return ul;
  };
  box.append(h("h4", { className: "in" }, "In"), portList("in", node.inputs), h("h4", { className: "out" }, "Out"), portList("out", node.outputs));
  if (node.has_hole && !state.readOnly) {
    const side = h("select", { id: "port-side", "aria-label": "side of the new port" }, h("option", { value: "in" }, "In"), h("option", { value: "out" }, "Out"));
    const pname = h("input", { id: "port-name", placeholder: "name", size: 8, "aria-label": "name of the new port" });
    const ptype = h("input", { id: "port-type", placeholder: "type", size: 8, value: "str", "aria-label": "type of the new port" });
    const add = h("button", {
      id: "port-add",
      onclick: () => {
        const n = pname.value.trim();
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(n)) return toast("A port name is a Python identifier, e.g. summary.", "error");
        void perform({ op: "add_port", args: { node: node.name, side: side.value, name: n, type: ptype.value.trim() || "str" } });
      },
    }, "+ port");
    box.append(h("div", { className: "row add-port" }, side, pname, ptype, add));
  } else if (!node.has_hole) {
    box.append(h("p", { className: "hint" }, "Ports of a node with code change in the code (its In/Out classes)."));
  }
  box.append(h("button", { className: "danger", id: "delete-node", disabled: state.readOnly, onclick: () => void perform({ op: "remove_node", args: { name: node.name } }) }, "delete node and its wiring"));
  const t = state.live ? state.trace?.nodes[node.name] : undefined;
  if (t) {
    box.append(h("h4", {}, `last spans · ${t.status}`));
    const table = h("table", { className: "spans" }, h("tr", {}, h("th", {}, "span"), h("th", {}, "duration"), h("th", {}, "tokens"), h("th", {}, "cost")));
    for (const s of t.last) {
      table.append(h("tr", { className: s.error ? "err" : "" }, h("td", {}, `${s.name}${s.kind ? ` (${s.kind})` : ""}`), h("td", {}, formatMs(s.duration_ms)), h("td", {}, String(s.tokens ?? 0)), h("td", {}, formatCost(s.cost))));
      if (s.error) table.append(h("tr", { className: "err" }, h("td", { colSpan: 4 }, `error: ${s.error}`)));
    }
    box.append(table);
  }
}

// -- holes -------------------------------------------------------------------------------------

function renderHoles(): void {
  const list = $("holes-list");
  list.replaceChildren(h("h3", {}, `${state.holes.length} node${state.holes.length === 1 ? "" : "s"} need${state.holes.length === 1 ? "s" : ""} code`));
  if (!state.holes.length) list.append(h("p", { className: "hint" }, "Every node has code."));
  const table = h("table", {}, h("tr", {}, h("th", {}, "file"), h("th", {}, "node"), h("th", {}, "message"), h("th", {}, "line")));
  for (const hole of state.holes) {
    const names = nodesOf(hole);
    const node = names.length && names.join() !== hole.node ? h("td", { title: `class ${hole.node}` }, names.join(", "), h("span", { className: "hint" }, ` (class ${hole.node})`)) : h("td", {}, hole.node);
    table.append(h("tr", { className: "hole-row" }, h("td", {}, hole.file), node, h("td", {}, hole.message ?? ""), h("td", {}, hole.line === null ? "" : String(hole.line))));
  }
  list.append(table);
}
/** The canvas's names for a hole of the opened file: the nodes of the graph whose class it is
 * (``add(Draft, name="Reply")`` is the node Reply); none for a class of another file. */
function nodesOf(hole: HoleRef): string[] {
  if (hole.file !== state.file || !state.graph) return [];
  const key = (cls: string) => cls.split("(", 1)[0].trim().split(".").pop();
  return state.graph.nodes.filter((n) => n.has_hole && key(n.cls) === hole.node).map((n) => n.name);
}
function showHoles(open: boolean): void {
  const list = $("holes-list");
  list.hidden = !open;
  $("holes-badge").setAttribute("aria-expanded", String(open));
  if (open) renderHoles();
}
$("holes-badge").addEventListener("click", () => showHoles($("holes-list").hidden));

$<HTMLSelectElement>("graph-picker").addEventListener("change", (ev) => {
  state.graphName = (ev.target as HTMLSelectElement).value;
  state.undo = [];
  state.redo = [];
  state.fitted = false;
  state.graph = null;
  void reload();
});

// -- live trace overlay ------------------------------------------------------------------------

async function refreshRuns(): Promise<void> {
  try {
    // oldest first, whatever order the server lists them in: "run 1" stays run 1
    const num = (r: RunSummary) => (typeof r.started === "number" ? r.started : Date.parse(String(r.started)) || 0);
    state.runs = [...((await api.traceRuns()).runs ?? [])].sort((a, b) => num(a) - num(b));
  } catch (err) {
    toast(`No trace: ${(err as Error).message}`, "error");
    return;
  }
  const picker = $<HTMLSelectElement>("run-picker");
  picker.hidden = !state.live;
  picker.innerHTML = "";
  if (!state.runs.length) picker.add(new Option("no runs yet", ""));
  state.runs.forEach((r, i) => {
    const when = typeof r.started === "number" ? new Date(r.started * (r.started > 1e12 ? 1 : 1000)).toLocaleTimeString([], { hour12: false }) : r.started ?? "";
    const opt = new Option(`run ${i + 1} · ${r.status} · ${when}`, r.run);
    opt.title = `${r.run} · ${r.spans} spans`;
    picker.add(opt);
  });
  const latest = state.runs[state.runs.length - 1]?.run ?? null;
  if (state.followLatest || !state.runs.some((r) => r.run === state.run)) state.run = latest;
  if (state.run) picker.value = state.run;
  await refreshTrace();
}

async function refreshTrace(): Promise<void> {
  if (!state.run) {
    state.trace = null;
  } else {
    try {
      state.trace = await api.traceRun(state.run);
    } catch {
      state.trace = null;
    }
  }
  paintTrace();
  renderInspector();
}

$("live").addEventListener("click", () => {
  state.live = !state.live;
  $("live").classList.toggle("on", state.live);
  $("live").textContent = state.live ? "■ live" : "▶ live";
  $("run-picker").hidden = !state.live;
  debug.setLive(state.live);
  if (state.live) void refreshRuns();
  else {
    paintTrace();
    renderInspector();
  }
});
$<HTMLSelectElement>("run-picker").addEventListener("change", (ev) => {
  const v = (ev.target as HTMLSelectElement).value;
  state.run = v || null;
  state.followLatest = v === state.runs[state.runs.length - 1]?.run;
  void refreshTrace();
});

// -- export ------------------------------------------------------------------------------------

function download(name: string, blob: Blob): void {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 5000);
}
const base = () => (state.graphName || "graph").replace(/[^A-Za-z0-9_.-]/g, "_");
$("export-mermaid").addEventListener("click", async () => {
  try {
    const text = await api.exportText("mermaid");
    $<HTMLTextAreaElement>("export-text").value = text;
    const a = $<HTMLAnchorElement>("export-download");
    a.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
    a.download = `${base()}.mmd`;
    const area = $<HTMLTextAreaElement>("export-text");
    $<HTMLDialogElement>("export-dialog").showModal();
    // from its first line: the caret (at the end after setting the value) would scroll it down
    area.setSelectionRange(0, 0);
    area.scrollTop = 0;
  } catch (err) {
    toast(`Export failed: ${(err as Error).message}`, "error");
  }
});
$("export-svg").addEventListener("click", async () => {
  download(`${base()}.svg`, new Blob([await exportSvg(svg, viewport)], { type: "image/svg+xml" }));
});
$("export-png").addEventListener("click", async () => {
  download(`${base()}.png`, await exportPng(svg, viewport));
});

// -- live updates ------------------------------------------------------------------------------

function connect(): void {
  const es = api.events();
  es.addEventListener("open", () => {
    // whatever changed before the stream was watching is picked up now
    state.connected = true;
    if (state.version) void reload({ quiet: true });
  });
  es.addEventListener("file", (ev) => {
    let version = "";
    try {
      version = JSON.parse((ev as MessageEvent).data).version ?? "";
    } catch {
      /* reload anyway */
    }
    if (version !== state.version && !state.busy) void reload({ quiet: true });
  });
  es.addEventListener("trace", () => {
    if (state.live) void refreshRuns();
    debug.onServerEvent("trace", null);
  });
  es.addEventListener("debug", (ev) => {
    let data: unknown = null;
    try {
      data = JSON.parse((ev as MessageEvent).data);
    } catch {
      /* refresh anyway */
    }
    debug.onServerEvent("debug", data);
  });
  es.onerror = () => {
    // EventSource reconnects by itself; fetch once so a missed event is not missed for long
    setTimeout(() => void reload({ quiet: true }), 1000);
  };
}

// -- start -------------------------------------------------------------------------------------

async function start(): Promise<void> {
  if (!api.token) {
    $("banner").textContent = "No token in the URL: open the address `python -m tensorsketch.canvas FILE` printed (it ends in ?token=…).";
    $("banner").hidden = false;
  }
  try {
    await Promise.race([document.fonts.load("20px Virgil"), new Promise((r) => setTimeout(r, 1500))]);
  } catch {
    /* the fallback font is fine */
  }
  connect();
  await reload();
  await debug.initDebug({
    svg,
    layer: document.getElementById("debug-marks") as unknown as SVGGElement,
    scene: () => state.scene,
    toast,
    relayout,
    reveal,
    liveThread: () => state.runs.find((r) => r.run === state.run)?.thread_id ?? null,
    followThread: (thread) => {
      // the overlay shows the newest traced run of the thread the debugger opened
      const run = [...state.runs].reverse().find((r) => r.thread_id === thread);
      if (!state.live || !run || run.run === state.run) return;
      state.run = run.run;
      state.followLatest = run === state.runs[state.runs.length - 1];
      $<HTMLSelectElement>("run-picker").value = run.run;
      void refreshTrace();
    },
  });
}
void start();

// Painting the scene: the graph laid out (layout.ts) and drawn hand-drawn (draw.ts) into the
// stage's layers, the live trace over it, the debugger's marks on top.
import { drawBadges } from "./badges";
import * as debug from "./debug/index";
import { byId } from "./dom";
import { drawBox, drawTrace, drawWire } from "./draw";
import { holeTag } from "./hole-status";
import { renderInspector } from "./inspector";
import { buildScene } from "./layout";
import { traceAt } from "./nested";
import { applyView, fit, stage } from "./stage";
import { countPaint, fitsOnPaint, markFitted, markFramed, showScene, state } from "./store";
import { paintTeam } from "./team";

/** How a paint treats the view. ``keepView``: the paint follows a write the page itself made
 * (its quiet reload), so the view stays where it is — a re-fit there made the canvas jump a
 * moment after the edit; only a graph shown for the first time is still fitted. */
export interface PaintOptions {
  readonly keepView?: boolean;
}

/** Lay out and draw the graph again from the state, keeping the selection where it still
 * exists; the view fits the graph until the user has moved it (see ``PaintOptions``). */
export function paint(opts: PaintOptions = {}): void {
  const { svg, layers } = stage();
  document.body.classList.toggle("read-only", state.readOnly);
  for (const layer of Object.values(layers)) layer.replaceChildren();
  const empty = byId("empty");
  if (!state.graph && state.team && state.team.agents.length) {
    showScene(state, null);
    empty.hidden = true;
    const start = performance.now();
    paintTeam(state.team);
    applyView();
    const n = countPaint(state, 0, performance.now(), start);
    requestAnimationFrame(() => setTimeout(() => markFramed(state, n, performance.now())));
    return;
  }
  if (!state.graph) {
    showScene(state, null);
    empty.hidden = false;
    empty.textContent = state.message || (state.readOnly ? "Nothing to show until the file parses." : "No graph to show yet.");
    return;
  }
  empty.hidden = true;
  const t0 = performance.now();
  const scene = buildScene(state.graph, state.layout, state.direction, state.collapsed);
  const t1 = performance.now();
  showScene(state, scene);
  const wireFrag = document.createDocumentFragment();
  const labelFrag = document.createDocumentFragment();
  for (const wire of scene.wires) {
    const g = drawWire(svg, scene, wire, wire.index === state.selectedWire);
    const label = g.querySelector(".wire-label");
    if (label) {
      if (wire.index >= 0) label.setAttribute("data-index", String(wire.index));
      labelFrag.appendChild(label);
    }
    wireFrag.appendChild(g);
  }
  const boxFrag = document.createDocumentFragment();
  for (const box of scene.boxes.values()) {
    const g = drawBox(svg, box, state.readOnly, box.node ? holeTag(box.node, state.holes, state.file) : undefined);
    drawBadges(box, g);
    if (box.id === state.selectedNode || state.group.includes(box.id)) g.classList.add("selected");
    boxFrag.appendChild(g);
  }
  layers.wires.appendChild(wireFrag);
  layers.boxes.appendChild(boxFrag);
  layers.labels.appendChild(labelFrag);
  paintTrace();
  debug.repaintMarks();
  if (fitsOnPaint(state, opts.keepView ?? false)) {
    markFitted(state);
    fit(true);
  }
  applyView();
  renderInspector();
  const n = countPaint(state, t1 - t0, performance.now(), t1);
  // when the browser has put this paint on screen (benchmarks read it)
  requestAnimationFrame(() => setTimeout(() => markFramed(state, n, performance.now())));
}

/** Draw the live trace's rings and badges over the nodes (nothing while live is off): the
 * graph's own nodes, or — in an opened subgraph — that subgraph's nodes of the run. */
export function paintTrace(): void {
  const { svg, layers } = stage();
  layers.overlay.replaceChildren();
  if (!state.live || !state.trace || !state.scene) return;
  for (const [name, t] of Object.entries(traceAt(state.trace, state.path))) {
    const box = state.scene.boxes.get(name);
    if (box) layers.overlay.appendChild(drawTrace(svg, box, t));
  }
}

// The stage: the SVG canvas with its layers, placed below the toolbar and the banner, and the
// view put on it (fit, zoom, reveal, the minimap). The maths is in view.ts; this module reads
// the stage's size and writes the transform.
import * as debug from "./debug/index";
import { byId } from "./dom";
import { drawMinLabels } from "./min-labels";
import { drawMinimap } from "./minimap";
import { setUserView, setView, state, type View } from "./store";
import type { XY } from "./types";
import { centredOn, fitView, onStage, sceneAt, screenBounds, zoomedAt, type Size } from "./view";

export interface Stage {
  svg: SVGSVGElement;
  /** the group the view's transform moves */
  viewport: SVGGElement;
  layers: { wires: SVGGElement; boxes: SVGGElement; labels: SVGGElement; overlay: SVGGElement; ghost: SVGGElement };
}

let found: Stage | null = null;

/** The stage's elements (looked up once, on first use). */
export function stage(): Stage {
  if (!found) {
    const g = (id: string) => document.getElementById(id) as unknown as SVGGElement;
    found = {
      svg: document.getElementById("canvas") as unknown as SVGSVGElement,
      viewport: g("viewport"),
      layers: { wires: g("wires"), boxes: g("boxes"), labels: g("labels"), overlay: g("overlay"), ghost: g("ghost") },
    };
  }
  return found;
}

/** The stage's size; ``fallback`` stands in for a stage not laid out yet (0 × 0). */
function stageSize(fallback = false): Size {
  const { svg } = stage();
  return fallback ? { w: svg.clientWidth || 1200, h: svg.clientHeight || 700 } : { w: svg.clientWidth, h: svg.clientHeight };
}

/** The minimap's corner (its size and margins, style.css): a fit keeps the graph out of it. */
const MINIMAP_ROOM: Size = { w: 220 + 28, h: 150 + 28 };

/** A big graph (24 boxes or more) has a minimap. */
function minimapShown(): boolean {
  return (state.scene?.boxes.size ?? 0) >= 24;
}

/** Put the view's transform on the stage, and the minimap beside it for a big graph. */
export function applyView(): void {
  const { svg, viewport } = stage();
  const { x, y, k } = state.view;
  viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
  drawMinLabels(document.getElementById("min-labels") as unknown as SVGGElement, state.scene, state.view);
  const mm = byId<HTMLCanvasElement>("minimap");
  mm.hidden = !minimapShown();
  if (!mm.hidden && state.scene) drawMinimap(mm, state.scene, state.view, svg.clientWidth, svg.clientHeight);
}

/** Fit the whole graph on screen. ``auto`` (after loads and edits, until the user pans or
 * zooms) never goes below a legible zoom: a graph too big for that shows its START end and
 * the minimap, and keeps the debugger's open checkpoint in sight; the fit button shows all. */
export function fit(auto = false): void {
  if (!state.scene) return;
  const size = stageSize(true);
  const { view, overflows } = fitView(state.scene.boxes, size, auto, minimapShown() ? MINIMAP_ROOM : null);
  corner = stageCorner();
  setView(state, view);
  setUserView(state, false);
  if (auto && overflows) setView(state, centredOn(state.view, state.scene.boxes, debug.focusNodes(), size));
  applyView();
}

/** Where the stage's top-left corner was on the page when the view was last put on it. */
let corner: { left: number; top: number } | null = null;

function stageCorner(): { left: number; top: number } {
  const r = stage().svg.getBoundingClientRect();
  return { left: r.left, top: r.top };
}

/** The stage changed size or place (a side panel opened or closed, the toolbar wrapped): the
 * graph stays exactly where it was on the screen. A panel that opens over the left of the
 * stage moves the stage's corner, so the view moves the other way by as much; nothing is
 * re-fitted, so the second click of a double-click lands on what the first one did. With
 * ``refit`` (the page's first layout) and a view the user has not moved, fit instead. */
export function relayout(refit = false): void {
  const now = stageCorner();
  if (refit && !state.userView && state.scene) {
    corner = now;
    fit(true);
    return;
  }
  if (corner && (corner.left !== now.left || corner.top !== now.top)) {
    const { x, y, k } = state.view;
    setView(state, { x: x - (now.left - corner.left), y: y - (now.top - corner.top), k });
  }
  corner = now;
  applyView();
}

/** Bring ``names`` into view when any of them is off-screen (the debugger opened a
 * checkpoint): a pan, the zoom stays. */
export function reveal(names: string[]): void {
  const boxes = state.scene?.boxes;
  if (!boxes) return;
  const b = screenBounds(state.view, boxes, names);
  if (!b || onStage(b, stageSize())) return;
  setView(state, centredOn(state.view, boxes, names, stageSize(true)));
  applyView();
}

/** Centre the view on node ``name`` at a zoom where it reads (node search); the user now
 * owns the view. Returns false when the scene has no such box. */
export function jumpTo(name: string): boolean {
  const boxes = state.scene?.boxes;
  if (!boxes?.has(name)) return false;
  const k = Math.max(state.view.k, 0.8);
  setView(state, centredOn({ ...state.view, k }, boxes, [name], stageSize(true)));
  setUserView(state, true);
  applyView();
  return true;
}

/** Zoom by ``factor`` about the stage point (cx, cy); the user now owns the view. */
export function zoomAt(factor: number, cx: number, cy: number): void {
  setView(state, zoomedAt(state.view, factor, cx, cy));
  setUserView(state, true);
  applyView();
}

/** Zoom about the stage's centre (the toolbar's + and − buttons). */
export function zoomCentre(factor: number): void {
  const { svg } = stage();
  zoomAt(factor, svg.clientWidth / 2, svg.clientHeight / 2);
}

/** Show ``view``, chosen by the user (a pan, the reset button, the minimap). */
export function moveView(view: View): void {
  setView(state, view);
  setUserView(state, true);
  applyView();
}

/** The scene point under the pointer at client (x, y). */
export function toScene(clientX: number, clientY: number): XY {
  const r = stage().svg.getBoundingClientRect();
  return sceneAt(state.view, clientX - r.left, clientY - r.top);
}

/** The stage's current size (0 × 0 before layout). */
export function currentSize(): Size {
  return stageSize();
}

let bars = "";

/** Set ``--bar`` and ``--banner``: the toolbar's height (two rows in a narrow window) and the
 * banner's (0 while hidden), which place the stage and the side panels below them. The stage
 * is laid out again when its top moved. */
export function syncBars(): void {
  const bar = byId("toolbar").offsetHeight || 46;
  const banner = byId("banner");
  const ban = banner.hidden ? 0 : banner.offsetHeight;
  const key = `${bar}:${ban}`;
  if (key === bars) return;
  const stageMoved = !bars.startsWith(`${bar}:`);
  bars = key;
  document.documentElement.style.setProperty("--bar", `${bar}px`);
  document.documentElement.style.setProperty("--banner", `${ban}px`);
  if (stageMoved) relayout();
}

/** Follow the toolbar's and the banner's heights as they change. */
export function mountStage(): void {
  new ResizeObserver(() => syncBars()).observe(byId("toolbar"));
  new ResizeObserver(() => syncBars()).observe(byId("banner"));
}

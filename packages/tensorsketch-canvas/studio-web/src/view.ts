// The view maths: fitting a scene into the stage, zooming about a point, centring boxes, and
// the scene geometry gestures need (screen → scene points, where a new node fits, the rubber
// band of a wire being drawn). Pure: the stage (stage.ts) puts the results on screen.
import type { Box } from "./layout";
import type { View } from "./store";
import { START, type XY } from "./types";

export interface Bounds {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** The stage's size in screen pixels. */
export interface Size {
  w: number;
  h: number;
}

export const MIN_ZOOM = 0.02;
export const MAX_ZOOM = 4;
/** An automatic fit never zooms out further than this, so names stay legible. */
export const LEGIBLE_ZOOM = 0.45;
/** The room a fit leaves left and right of the boxes for the wires that curl out there. */
export const SIDE = 90;
/** Nor does a fit zoom in further than this on a small graph. */
export const FIT_MAX_ZOOM = 1.25;

/** The view that shows all of ``boxes`` on a stage of ``size``, with room above each box for
 * its tags and below for its trace badge. ``auto`` (after loads and edits) stops at a legible
 * zoom: a graph too big for that is centred on START's row. ``overflows`` says the graph does
 * not fit whole at that zoom. */
export function fitView(boxes: Map<string, Box>, size: Size, auto: boolean, avoid: Size | null = null): { view: View; overflows: boolean } {
  if (avoid) {
    // keep clear of a corner panel (the minimap, bottom right): fit beside it or above it,
    // whichever shows the graph larger
    const beside = fitView(boxes, { w: size.w - avoid.w, h: size.h }, auto);
    const above = fitView(boxes, { w: size.w, h: size.h - avoid.h }, auto);
    return beside.view.k >= above.view.k ? beside : above;
  }
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const b of boxes.values()) {
    // room for the wires that leave a box sideways (a back edge, a wrapped layout's return
    // to the next band, curls out up to ~SIDE units)
    x0 = Math.min(x0, b.x - SIDE); y0 = Math.min(y0, b.y - 80);
    x1 = Math.max(x1, b.x + b.w + SIDE); y1 = Math.max(y1, b.y + b.h + 40);
  }
  const { w: W, h: H } = size;
  const k = Math.min(FIT_MAX_ZOOM, Math.max(auto ? LEGIBLE_ZOOM : MIN_ZOOM, Math.min((W - 60) / (x1 - x0), (H - 60) / (y1 - y0))));
  // (half a pixel of slack: at the zoom that fits one axis exactly, rounding must not make
  // that axis look too big)
  const wide = (x1 - x0) * k > W - 60 + 0.5;
  const tall = (y1 - y0) * k > H - 60 + 0.5;
  const x = wide ? 30 - x0 * k : (W - (x1 - x0) * k) / 2 - x0 * k;
  let y = (H - (y1 - y0) * k) / 2 - y0 * k;
  if (tall) {
    // too tall: centre on START's row
    const start = boxes.get(START);
    y = start ? H / 2 - (start.y + start.h / 2) * k : 30 - y0 * k;
  }
  return { view: { k, x, y }, overflows: wide || tall };
}

/** The screen-space bounds of ``names``' boxes at ``view`` (null: none is in ``boxes``). The
 * debugger's ring and tags reach a little past each box, and are counted in. */
export function screenBounds(view: View, boxes: Map<string, Box>, names: readonly string[]): Bounds | null {
  const { x, y, k } = view;
  let b: Bounds | null = null;
  for (const name of names) {
    const box = boxes.get(name);
    if (!box) continue;
    const r = { x0: x + (box.x - 12) * k, y0: y + (box.y - 34) * k, x1: x + (box.x + box.w + 12) * k, y1: y + (box.y + box.h + 12) * k };
    b = b ? { x0: Math.min(b.x0, r.x0), y0: Math.min(b.y0, r.y0), x1: Math.max(b.x1, r.x1), y1: Math.max(b.y1, r.y1) } : r;
  }
  return b;
}

/** ``view`` panned (never zoomed) so the boxes of ``names`` are centred on the stage; the
 * first of them leads when they do not fit together. Unchanged when none is in ``boxes``. */
export function centredOn(view: View, boxes: Map<string, Box>, names: readonly string[], size: Size): View {
  let b = screenBounds(view, boxes, names);
  if (b && (b.x1 - b.x0 > size.w || b.y1 - b.y0 > size.h)) b = screenBounds(view, boxes, names.slice(0, 1));
  if (!b) return view;
  return { k: view.k, x: view.x + (size.w / 2 - (b.x0 + b.x1) / 2), y: view.y + (size.h / 2 - (b.y0 + b.y1) / 2) };
}

/** Whether ``b`` lies wholly on a stage of ``size``. */
export function onStage(b: Bounds, size: Size): boolean {
  return b.x0 >= 0 && b.y0 >= 0 && b.x1 <= size.w && b.y1 <= size.h;
}

/** ``view`` zoomed by ``factor`` about the screen point (cx, cy), which stays put. */
export function zoomedAt(view: View, factor: number, cx: number, cy: number): View {
  const k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, view.k * factor));
  const f = k / view.k;
  return { k, x: cx - (cx - view.x) * f, y: cy - (cy - view.y) * f };
}

/** ``view`` panned so the scene point ``p`` is at the stage's centre (the minimap's jump). */
export function centredAt(view: View, p: XY, size: Size): View {
  return { k: view.k, x: size.w / 2 - p.x * view.k, y: size.h / 2 - p.y * view.k };
}

/** The scene point under a screen point ``(sx, sy)`` measured from the stage's top left. */
export function sceneAt(view: View, sx: number, sy: number): XY {
  return { x: (sx - view.x) / view.k, y: (sy - view.y) / view.k };
}

/** Where the "+ node" dialog drops a new node: a little left of the stage's middle and down
 * towards its bottom, where the user is looking. */
export function dropPoint(view: View, size: Size): XY {
  return { x: (size.w / 2 - view.x) / view.k - 90, y: (size.h * 0.7 - view.y) / view.k };
}

/** The first place at or below ``p`` (in steps of 20) where a ``w`` × ``h`` box keeps clear
 * of every box (30 across, 40 down). */
export function freeSpot(boxes: Iterable<Box>, p: XY, w = 200, h = 90): XY {
  const all = [...boxes];
  const hits = (q: XY) => all.some((b) => q.x < b.x + b.w + 30 && q.x + w + 30 > b.x && q.y < b.y + b.h + 40 && q.y + h + 40 > b.y);
  const q = { x: Math.round(p.x), y: Math.round(p.y) };
  for (let i = 0; i < 200 && hits(q); i++) q.y += 20;
  return q;
}

/** The path of a wire being drawn from ``s`` to the pointer at ``p``: a curve that leaves and
 * arrives horizontally. */
export function rubberBand(s: XY, p: XY): string {
  const dx = Math.max(40, Math.abs(p.x - s.x) / 2);
  return `M ${s.x} ${s.y} C ${s.x + dx} ${s.y}, ${p.x - dx} ${p.y}, ${p.x} ${p.y}`;
}

/** Where a node dragged from ``orig`` lands: moved as far as the pointer went from ``start``
 * to ``p``, in whole units. */
export function dropAt(orig: XY, start: XY, p: XY): XY {
  return { x: Math.round(orig.x + p.x - start.x), y: Math.round(orig.y + p.y - start.y) };
}

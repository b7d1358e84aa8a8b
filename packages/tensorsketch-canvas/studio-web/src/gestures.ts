// Pointer and keyboard gestures on the canvas: pan and zoom, drag a node, draw a wire from a
// node's handle, select, rename on double-click, delete a wire, undo and redo, the minimap.
import * as debug from "./debug/index";
import { byId } from "./dom";
import { el } from "./draw";
import { canDeleteEdge, removeEdgeOp } from "./edit-ops";
import { moveNode, moveNodes, perform, redo, undo, wire } from "./edits";
import { holesOpen, showHoles } from "./holes-list";
import type { Box } from "./layout";
import { minimapToScene } from "./minimap";
import { selectNode, selectWire, toggleInGroup } from "./selection";
import { paint } from "./paint";
import { openSubgraph } from "./subgraphs";
import { applyView, currentSize, fit, moveView, stage, toScene, zoomAt } from "./stage";
import * as store from "./store";
import { setUserView, setView, state } from "./store";
import { hideTooltip, hoverHole } from "./tooltip";
import type { EdgeIR, XY } from "./types";
import { centredAt, dropAt, rubberBand } from "./view";

type Drag =
  | { kind: "pan"; x: number; y: number; vx: number; vy: number; moved: boolean }
  | { kind: "move"; node: string; start: XY; orig: XY; moved: boolean; g: SVGGElement; others: Member[] }
  | { kind: "wire"; from: string; start: XY; line: SVGPathElement };

/** Another node of the group a dragged node belongs to: it moves along. */
interface Member {
  node: string;
  orig: XY;
  g: SVGGElement;
}

let drag: Drag | null = null;

/** The other nodes that move with ``node``: the rest of its group (two or more nodes). */
function groupOf(node: string): Member[] {
  if (state.group.length < 2 || !state.group.includes(node)) return [];
  const out: Member[] = [];
  for (const name of state.group) {
    const box = state.scene?.boxes.get(name);
    const g = document.querySelector(`#boxes g.box[data-id="${CSS.escape(name)}"]`) as SVGGElement | null;
    if (name !== node && box && g) out.push({ node: name, orig: { x: box.x, y: box.y }, g });
  }
  return out;
}

/** The box an event target belongs to (null: the background, a wire, a panel). */
function boxAt(target: EventTarget | null): Box | null {
  const g = (target as Element | null)?.closest?.("g.box");
  const id = g?.getAttribute("data-id");
  return id && state.scene ? state.scene.boxes.get(id) ?? null : null;
}

function clearDropTargets(): void {
  document.querySelectorAll("g.box.drop-target, g.wire.splice-target").forEach((e) => e.classList.remove("drop-target", "splice-target"));
}

/** The plain wire under the pointer that ``node`` would be spliced into if dropped here, or
 * null. Only a node with no wiring at all splices (a fresh one): moving a wired node around
 * never rewires it. */
function spliceWire(node: string, x: number, y: number): { edge: EdgeIR; g: Element } | null {
  const edges = state.graph?.edges ?? [];
  if (state.readOnly || edges.some((e) => e.source === node || e.target === node || (e.sources ?? []).includes(node))) return null;
  for (const hit of document.elementsFromPoint(x, y)) {
    const g = hit.closest("g.wire");
    if (!g) continue;
    const edge = edges[Number(g.getAttribute("data-index"))];
    if (edge?.kind === "sequential" && edge.source && edge.target) return { edge, g };
  }
  return null;
}

function onPointerDown(ev: PointerEvent): void {
  if (ev.button !== 0) return;
  const { svg, layers } = stage();
  const target = ev.target as Element;
  hideTooltip();
  const box = boxAt(target);
  if (box?.node && target.closest(".subgraph-open")) {
    void openSubgraph(box.node);
    return;
  }
  if (box?.kind === "group" && target.closest(".group-expand")) {
    store.setCollapsed(state, box.members ?? [], true);
    paint();
    return;
  }
  if (box && target.classList.contains("handle") && !state.readOnly) {
    const s = { x: box.x + box.w, y: box.y + box.h / 2 };
    const line = el("path", { class: "rubber", d: `M ${s.x} ${s.y} L ${s.x} ${s.y}` }, layers.ghost);
    drag = { kind: "wire", from: box.id, start: s, line };
  } else if (box && box.kind === "node") {
    const g = target.closest("g.box") as SVGGElement;
    drag = { kind: "move", node: box.id, start: toScene(ev.clientX, ev.clientY), orig: { x: box.x, y: box.y }, moved: false, g, others: groupOf(box.id) };
  } else if (target.closest("g.wire, g.wire-label")) {
    const idx = Number(target.closest("[data-index]")?.getAttribute("data-index"));
    selectWire(idx, true); // a double-click disarms it again (onDoubleClick)
    return;
  } else if (box && box.kind === "stub") {
    // a `route → ?` stub stands for its dynamic route: selecting it selects the route
    selectWire(Number(box.id.slice("stub:".length)), true);
    return;
  } else if (box) {
    selectNode(null);
    return;
  } else {
    drag = { kind: "pan", x: ev.clientX, y: ev.clientY, vx: state.view.x, vy: state.view.y, moved: false };
  }
  svg.setPointerCapture(ev.pointerId);
}

function onPointerMove(ev: PointerEvent): void {
  if (!drag) {
    hoverHole(ev);
    return;
  }
  if (drag.kind === "pan") {
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    if (drag.moved) setUserView(state, true);
    setView(state, { k: state.view.k, x: drag.vx + dx, y: drag.vy + dy });
    applyView();
  } else if (drag.kind === "move") {
    const p = toScene(ev.clientX, ev.clientY);
    const dx = p.x - drag.start.x;
    const dy = p.y - drag.start.y;
    if (Math.abs(dx) + Math.abs(dy) > 3 && !state.readOnly) drag.moved = true;
    if (drag.moved) {
      drag.g.setAttribute("transform", `translate(${drag.orig.x + dx},${drag.orig.y + dy})`);
      for (const m of drag.others) m.g.setAttribute("transform", `translate(${m.orig.x + dx},${m.orig.y + dy})`);
      stage().layers.overlay.replaceChildren();
      clearDropTargets();
      if (!drag.others.length) spliceWire(drag.node, ev.clientX, ev.clientY)?.g.classList.add("splice-target");
    }
  } else if (drag.kind === "wire") {
    drag.line.setAttribute("d", rubberBand(drag.start, toScene(ev.clientX, ev.clientY)));
    clearDropTargets();
    const over = boxAt(document.elementFromPoint(ev.clientX, ev.clientY));
    if (over && over.id !== drag.from) document.querySelector(`g.box[data-id="${CSS.escape(over.id)}"]`)?.classList.add("drop-target");
  }
}

function onPointerUp(ev: PointerEvent): void {
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
      if (ev.shiftKey) toggleInGroup(d.node); // gather nodes to move together
      else if (!debug.onNodeClick(d.node)) selectNode(d.node);
      return;
    }
    const end = toScene(ev.clientX, ev.clientY);
    const after = dropAt(d.orig, d.start, end);
    setUserView(state, true); // the user is arranging: the view stays where it is
    if (d.others.length) {
      const pinned = (n: string) => Object.prototype.hasOwnProperty.call(state.layout, n);
      const moves = [{ node: d.node, orig: d.orig }, ...d.others].map((m) => ({ node: m.node, before: pinned(m.node) ? m.orig : null, after: dropAt(m.orig, d.start, end) }));
      void moveNodes(moves);
      return;
    }
    const onto = spliceWire(d.node, ev.clientX, ev.clientY);
    clearDropTargets();
    if (onto) {
      // dropped on a wire: the node goes on that edge, placed where it was dropped
      const { source, target } = onto.edge;
      void perform({ op: "splice_node", args: { node: d.node, source, target }, layout: { [d.node]: after } });
      return;
    }
    void moveNode(d.node, d.orig, after, true);
  } else if (d.kind === "wire") {
    d.line.remove();
    clearDropTargets();
    const over = boxAt(document.elementFromPoint(ev.clientX, ev.clientY));
    if (over) void wire(d.from, over.id);
  }
}

/** Double-click a node to rename it: the inspector opens with its name selected. */
function onDoubleClick(ev: MouseEvent): void {
  // the pointer was captured by the stage during the clicks, so the event's target is the
  // stage itself: what was double-clicked is what lies under the pointer
  const box = boxAt(ev.target) ?? boxAt(document.elementFromPoint(ev.clientX, ev.clientY));
  if (box?.kind === "node" && !state.readOnly) {
    selectNode(box.id);
    const input = document.getElementById("rename-input") as HTMLInputElement | null;
    input?.focus();
    input?.select();
  }
}

/** The wheel zooms (or pans sideways with Shift, or on a sideways-only scroll). */
function onWheel(ev: WheelEvent): void {
  ev.preventDefault();
  const r = stage().svg.getBoundingClientRect();
  if (ev.ctrlKey || Math.abs(ev.deltaY) > 0 && !ev.shiftKey) zoomAt(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
  else moveView({ ...state.view, x: state.view.x - (ev.deltaX || ev.deltaY) });
}

function onKeyDown(ev: KeyboardEvent): void {
  const t = ev.target as HTMLElement;
  if (t.closest("input, textarea, select, dialog")) return;
  const mod = ev.ctrlKey || ev.metaKey;
  // typing with no field focused: the user thinks a field has the focus, so a Backspace that
  // follows must not delete the selected wire (the keys below still do what they do)
  if (ev.key.length === 1 && !mod && !ev.altKey) store.disarmWire(state);
  if (mod && ev.key.toLowerCase() === "z") {
    ev.preventDefault();
    void (ev.shiftKey ? redo() : undo());
  } else if (mod && ev.key.toLowerCase() === "y") {
    ev.preventDefault();
    void redo();
  } else if ((ev.key === "Delete" || ev.key === "Backspace") && state.selectedWire !== null) {
    ev.preventDefault();
    const e = state.graph?.edges[state.selectedWire];
    if (e && canDeleteEdge(e) && !state.readOnly && store.wireDeletable(state)) {
      store.selectWire(state, null);
      void perform(removeEdgeOp(e));
    }

  } else if (ev.key === "Escape") {
    if (holesOpen()) return showHoles(false);
    selectNode(null);
    selectWire(null);
  } else if (ev.key === "f") {
    fit();
  } else if (ev.key === "/") {
    ev.preventDefault();
    byId<HTMLInputElement>("node-search").focus();
  }
}

/** Click or drag on the minimap: centre the view there. */
function minimapJump(ev: PointerEvent): void {
  if (!state.scene) return;
  const p = minimapToScene(byId<HTMLCanvasElement>("minimap"), state.scene, ev.offsetX, ev.offsetY);
  moveView(centredAt(state.view, p, currentSize()));
}

export function mountGestures(): void {
  const { svg } = stage();
  svg.addEventListener("wheel", onWheel, { passive: false });
  svg.addEventListener("pointerdown", onPointerDown);
  svg.addEventListener("pointermove", onPointerMove);
  svg.addEventListener("pointerup", onPointerUp);
  svg.addEventListener("dblclick", onDoubleClick);
  // a wire selected by the first click of a double-click (anywhere: the second click may land
  // on the panel that the first one opened) was not aimed at: Delete leaves it be
  document.addEventListener("dblclick", () => store.disarmWire(state), true);
  svg.addEventListener("pointerleave", hideTooltip);
  const minimap = byId<HTMLCanvasElement>("minimap");
  minimap.addEventListener("pointerdown", (ev) => {
    minimap.setPointerCapture(ev.pointerId);
    minimapJump(ev);
  });
  minimap.addEventListener("pointermove", (ev) => {
    if (ev.buttons) minimapJump(ev);
  });
  document.addEventListener("keydown", onKeyDown);
  window.addEventListener("resize", () => applyView());
}

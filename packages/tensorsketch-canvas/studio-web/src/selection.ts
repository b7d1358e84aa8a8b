// Selecting a node or a wire: the state, the highlight on the canvas, the inspector.
import { renderInspector } from "./inspector";
import { paint } from "./paint";
import * as store from "./store";
import { state } from "./store";

/** Select a node (null: none). Only the highlight changes; nothing is drawn again. */
export function selectNode(name: string | null): void {
  store.clearGroup(state);
  store.selectNode(state, name);
  document.querySelectorAll("g.box.selected").forEach((e) => e.classList.remove("selected"));
  document.querySelectorAll("g.wire.selected").forEach((e) => e.classList.remove("selected"));
  if (name) document.querySelector(`g.box[data-id="${CSS.escape(name)}"]`)?.classList.add("selected");
  renderInspector();
}

/** Shift+click on a node: it joins the group (or leaves it); the group moves together. */
export function toggleInGroup(name: string): void {
  store.toggleGroup(state, name);
  markSelection();
  renderInspector();
}

/** Draw the selection's highlight on the boxes: the selected node and every node of the group. */
export function markSelection(): void {
  const chosen = new Set([...state.group, ...(state.selectedNode ? [state.selectedNode] : [])]);
  document.querySelectorAll("g.box.selected").forEach((e) => e.classList.remove("selected"));
  for (const name of chosen) document.querySelector(`g.box[data-id="${CSS.escape(name)}"]`)?.classList.add("selected");
}

/** Select the wire of ``graph.edges[index]`` (null: none); a change repaints, since a selected
 * wire is drawn heavier. ``explicit``: picked by a single click (Delete may delete it). */
export function selectWire(index: number | null, explicit = false): void {
  const changed = store.selectWire(state, index, explicit);
  renderInspector();
  if (changed) paint();
}

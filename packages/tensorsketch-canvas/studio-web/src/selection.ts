// Selecting a node or a wire: the state, the highlight on the canvas, the inspector.
import { renderInspector } from "./inspector";
import { paint } from "./paint";
import * as store from "./store";
import { state } from "./store";

/** Select a node (null: none). Only the highlight changes; nothing is drawn again. */
export function selectNode(name: string | null): void {
  store.selectNode(state, name);
  document.querySelectorAll("g.box.selected").forEach((e) => e.classList.remove("selected"));
  document.querySelectorAll("g.wire.selected").forEach((e) => e.classList.remove("selected"));
  if (name) document.querySelector(`g.box[data-id="${CSS.escape(name)}"]`)?.classList.add("selected");
  renderInspector();
}

/** Select the wire of ``graph.edges[index]`` (null: none); a change repaints, since a selected
 * wire is drawn heavier. ``explicit``: picked by a single click (Delete may delete it). */
export function selectWire(index: number | null, explicit = false): void {
  const changed = store.selectWire(state, index, explicit);
  renderInspector();
  if (changed) paint();
}

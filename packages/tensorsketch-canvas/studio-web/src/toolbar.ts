// The toolbar: the file's name, the graph picker, the holes badge, undo and redo, the view
// buttons. Rendered from the state after every load and edit.
import { baseName, holesBadgeTitle } from "./captions";
import { byId } from "./dom";
import { redo, undo } from "./edits";
import { holesOpen, renderHoles } from "./holes-list";
import { toast } from "./notices";
import { paint } from "./paint";
import { findNode } from "./search";
import { selectNode } from "./selection";
import { fit, jumpTo, moveView, zoomCentre } from "./stage";
import { setDirection, state, switchGraph } from "./store";
import { opened, renderCrumbs } from "./subgraphs";
import { reload } from "./sync";

export function renderToolbar(): void {
  byId("file").textContent = baseName(state.file);
  byId("file").title = state.file;
  const picker = byId<HTMLSelectElement>("graph-picker");
  picker.hidden = state.graphs.length < 2;
  if (picker.options.length !== state.graphs.length || [...picker.options].some((o, i) => o.value !== state.graphs[i])) {
    picker.innerHTML = "";
    for (const name of state.graphs) picker.add(new Option(name, name));
  }
  if (state.graphName) picker.value = state.graphName;
  renderCrumbs();
  const unknown = state.readOnly && state.fileHoles === null; // never parsed: its holes are unknown
  const badge = byId("holes-badge");
  byId("holes-count").textContent = unknown ? "?" : String(state.holes.length);
  badge.classList.toggle("has-holes", state.holes.length > 0);
  badge.title = holesBadgeTitle(state.file, state.readOnly, unknown);
  const undoButton = byId<HTMLButtonElement>("undo");
  const redoButton = byId<HTMLButtonElement>("redo");
  undoButton.disabled = state.undo.length === 0 || state.readOnly;
  redoButton.disabled = state.redo.length === 0 || state.readOnly;
  byId<HTMLButtonElement>("add-node").disabled = state.readOnly || !state.graph;
  undoButton.title = state.undo.length ? `undo: ${state.undo[state.undo.length - 1].label} (Ctrl+Z)` : "nothing to undo";
  redoButton.title = state.redo.length ? `redo: ${state.redo[state.redo.length - 1].label} (Ctrl+Shift+Z)` : "nothing to redo";
  if (holesOpen()) renderHoles();
  const names = state.graph?.nodes.map((n) => n.name) ?? [];
  const list = byId("node-names");
  if (list.childElementCount !== names.length || names.some((n, i) => (list.children[i] as HTMLOptionElement).value !== n)) {
    list.replaceChildren(...names.map((n) => new Option(n, n)));
  }
}

function searchNode(input: HTMLInputElement): void {
  const names = state.graph?.nodes.map((n) => n.name) ?? [];
  const name = findNode(names, input.value);
  if (!name) {
    toast(input.value.trim() ? `No single node matches “${input.value.trim()}”: type more of its name.` : "Type a node's name.", "error");
    return;
  }
  if (jumpTo(name)) selectNode(name);
}

/** Where the page keeps the layout direction the user picked (per browser, for every file). */
const DIRECTION_KEY = "tensorsketch.studio.direction";

function showDirection(): void {
  const b = byId("direction");
  const down = state.direction === "TB";
  b.textContent = down ? "→" : "↧";
  b.title = down ? "lay the graph out left to right" : "lay the graph out top to bottom";
  b.setAttribute("aria-label", b.title);
  b.setAttribute("aria-pressed", String(down));
}

/** Lay the graph out the other way, and show all of it. */
function toggleDirection(): void {
  setDirection(state, state.direction === "TB" ? "LR" : "TB");
  try {
    localStorage.setItem(DIRECTION_KEY, state.direction);
  } catch {
    /* storage off: the choice lasts for this page */
  }
  showDirection();
  paint();
  fit();
}

export function mountToolbar(): void {
  try {
    if (localStorage.getItem(DIRECTION_KEY) === "TB") setDirection(state, "TB");
  } catch {
    /* storage off */
  }
  showDirection();
  byId("direction").addEventListener("click", toggleDirection);
  byId("fit").addEventListener("click", () => fit());
  byId("reset").addEventListener("click", () => moveView({ x: 40, y: 80, k: 1 }));
  byId("zoom-in").addEventListener("click", () => zoomCentre(1.25));
  byId("zoom-out").addEventListener("click", () => zoomCentre(0.8));
  const search = byId<HTMLInputElement>("node-search");
  search.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") searchNode(search);
    if (ev.key === "Escape") search.blur();
  });
  search.addEventListener("change", () => {
    // picking a suggestion from the list: go there at once
    if (findNode(state.graph?.nodes.map((n) => n.name) ?? [], search.value)) searchNode(search);
  });
  byId("undo").addEventListener("click", () => void undo());
  byId("redo").addEventListener("click", () => void redo());
  byId<HTMLSelectElement>("graph-picker").addEventListener("change", (ev) => {
    switchGraph(state, (ev.target as HTMLSelectElement).value); // picked directly: no breadcrumb
    void reload().then(() => opened());
  });
}

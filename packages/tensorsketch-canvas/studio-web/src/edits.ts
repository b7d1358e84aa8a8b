// The edit round trips. Every gesture is an edit the server writes into the file; the canvas
// repaints from the re-extracted graph it sends back, and keeps the inverse for undo.
import * as api from "./api";
import { ApiError } from "./api";
import { markBreakpoints } from "./badges";
import { describeEdit, mappedRoute, suggestLabel, wiringProblem } from "./edit-ops";
import { toast } from "./notices";
import { paint } from "./paint";
import * as store from "./store";
import { state } from "./store";
import { reload } from "./sync";
import { renderToolbar } from "./toolbar";
import type { EditOp, XY } from "./types";

/** Send one edit; on success repaint from the re-extracted graph. Returns the inverse. */
async function send(op: EditOp): Promise<{ ok: true; inverse: EditOp | null; exact: unknown } | { ok: false }> {
  if (state.readOnly) {
    toast("The file does not parse: the canvas is read-only until it does.", "error");
    return { ok: false };
  }
  store.setBusy(state, true);
  document.body.classList.add("busy");
  try {
    const sent = performance.now();
    const res = await api.edit(state.version, state.graphName, op);
    // marked as a load marks it: else the quiet reload below finds the "same" graph changed
    if (res.graph) markBreakpoints(res.graph);
    store.acceptEdit(state, res, performance.now() - sent);
    paint();
    renderToolbar();
    void reload({ quiet: true, keepView: true }); // holes and layout elsewhere may have changed
    return { ok: true, inverse: res.inverse, exact: res.exact };
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
    store.setBusy(state, false);
    document.body.classList.remove("busy");
  }
}

/** Send ``op`` and record it for undo. Returns whether the server accepted it. */
export async function perform(op: EditOp): Promise<boolean> {
  const r = await send(op);
  if (!r.ok) return false;
  if (!store.recordEdit(state, op, r.inverse, r.exact)) {
    toast(`${describeEdit(op)}: done — this edit cannot be undone from the canvas.`, "info", 4000);
  }
  renderToolbar();
  return true;
}

export async function undo(): Promise<void> {
  const e = store.takeUndo(state);
  if (!e) return;
  if (e.kind === "move") {
    await moveNode(e.node, e.after, e.before, false);
    store.undone(state, e, null);
  } else if (e.kind === "moves") {
    await placeNodes(Object.fromEntries(e.moves.map((m) => [m.node, m.before])));
    store.undone(state, e, null);
  } else {
    const r = await send(e.undo);
    if (!r.ok) store.restoreUndo(state, e);
    else store.undone(state, e, r.inverse, r.exact);
  }
  renderToolbar();
}

export async function redo(): Promise<void> {
  const e = store.takeRedo(state);
  if (!e) return;
  if (e.kind === "move") {
    await moveNode(e.node, e.before, e.after, false);
    store.redone(state, e, null);
  } else if (e.kind === "moves") {
    await placeNodes(Object.fromEntries(e.moves.map((m) => [m.node, m.after])));
    store.redone(state, e, null);
  } else {
    const r = await send(e.redo);
    if (!r.ok) store.restoreRedo(state, e);
    else store.redone(state, e, r.inverse, r.exact);
  }
  renderToolbar();
}

/** Wire ``source → target``, unless a client-side check refuses it (the toast says why). */
export async function wire(source: string, target: string): Promise<void> {
  const problem = wiringProblem(state.graph, source, target);
  if (problem) {
    toast(problem, "error");
    return;
  }
  const route = mappedRoute(state.graph, source);
  if (route) {
    // the node routes through a mapping: the wire is a new key of it, named by the user
    const label = await askRouteLabel(source, target, route.path ?? "?", suggestLabel(state.graph, source, target));
    if (label) await perform({ op: "add_route", args: { source, target, label } });
    return;
  }
  await perform({ op: "add_edge", args: { source, target } });
}

/** The route dialog: the label of a new route ``source → target`` (null: cancelled). */
function askRouteLabel(source: string, target: string, path: string, suggested: string): Promise<string | null> {
  const dialog = document.getElementById("route-dialog") as HTMLDialogElement;
  const input = document.getElementById("route-label") as HTMLInputElement;
  const show = (n: string) => (n === "__end__" ? "END" : n === "__start__" ? "START" : n);
  (document.getElementById("route-hint") as HTMLElement).textContent =
    `${show(source)} routes through ${path}: this wire goes to ${show(target)} when ${path} returns the label. The canvas adds the key to the mapping; it does not change ${path}.`;
  input.value = suggested;
  dialog.returnValue = "";
  dialog.showModal();
  input.focus();
  input.select();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" && input.value.trim() ? input.value.trim() : null), { once: true });
  });
}

/** Save ``node``'s position in the layout sidecar (``record``: as a step to undo). ``after``
 * null unpins it: the undo of a node's first move gives it back to the automatic layout. */
export async function moveNode(node: string, before: XY | null, after: XY | null, record: boolean): Promise<void> {
  const pinned = Object.prototype.hasOwnProperty.call(state.layout, node);
  try {
    const res = await api.saveLayout({ [node]: after });
    const mine: Record<string, XY> = { ...state.layout };
    if (after) mine[node] = after;
    else delete mine[node];
    store.setLayout(state, res.layout ?? mine);
  } catch (err) {
    toast(`Could not save the position: ${(err as Error).message}`, "error");
    store.setLayout(state, { ...state.layout });
  }
  if (record && after) store.recordMove(state, node, pinned ? before : null, after);
  paint();
  renderToolbar();
}

/** Save several nodes' positions in one request (null unpins a node). */
async function placeNodes(positions: Record<string, XY | null>): Promise<boolean> {
  try {
    const res = await api.saveLayout(positions);
    store.setLayout(state, res.layout);
    return true;
  } catch (err) {
    toast(`Could not save the positions: ${(err as Error).message}`, "error");
    return false;
  } finally {
    paint();
    renderToolbar();
  }
}

/** Move the nodes of a group together (one step to undo). */
export async function moveNodes(moves: store.Move[]): Promise<void> {
  if (await placeNodes(Object.fromEntries(moves.map((m) => [m.node, m.after])))) store.recordMoves(state, moves);
  renderToolbar();
}

/** Create the node ``name`` at ``at``: the position is saved with the edit (the sidecar keeps
 * only nodes the file has), so the node appears where it was dropped. */
export async function addNode(name: string, inputs: Record<string, string>, outputs: Record<string, string>, at: XY): Promise<void> {
  await perform({ op: "add_node", args: { name, inputs, outputs }, layout: { [name]: at } });
}

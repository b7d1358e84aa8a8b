// Opening a subgraph node: a node that runs another graph of the file (``add(compiled)``,
// ``NodeIR.subgraph``) opens into that graph's own canvas, with a breadcrumb back. Edits in
// it are edits of that graph, written into the same file.
import * as debug from "./debug/index";
import { byId, h } from "./dom";
import { refreshAsk } from "./run-panel";
import { state, switchGraph } from "./store";
import { reload } from "./sync";
import type { NodeIR } from "./types";

/** Whether ``node`` runs a graph this file defines (so it can be opened here). */
export function canOpen(node: NodeIR | undefined): boolean {
  return !!node?.subgraph && state.graphs.includes(node.subgraph);
}

/** Open the graph ``node`` runs; the breadcrumb gains the graph shown now. */
export async function openSubgraph(node: NodeIR): Promise<void> {
  if (!canOpen(node) || !state.graphName) return;
  switchGraph(state, node.subgraph as string, [...state.trail, state.graphName], [...state.path, node.name]);
  await reload();
  opened();
}

/** The canvas moved into or out of a subgraph (or to a graph picked directly, out of all of
 * them): the debugger follows into its namespace and a pending question is drawn where it
 * now shows. */
export function opened(): void {
  refreshAsk();
  void debug.followPath(state.path);
}

/** Go back to the ``index``-th graph of the breadcrumb. */
async function back(index: number): Promise<void> {
  const name = state.trail[index];
  if (name === undefined) return;
  switchGraph(state, name, state.trail.slice(0, index), state.path.slice(0, index));
  await reload();
  opened();
}

/** Back out of the subgraphs until ``depth`` of them stay open (the debugger's crumbs). */
export async function leaveTo(depth: number): Promise<void> {
  if (depth < state.trail.length) await back(depth);
}

/** Open the subgraph node ``name`` of the graph shown (the debugger's nested states). */
export async function openNode(name: string): Promise<boolean> {
  const node = state.graph?.nodes.find((n) => n.name === name);
  if (!canOpen(node)) return false;
  await openSubgraph(node as NodeIR);
  return true;
}

/** The breadcrumb over the stage: the graphs opened on the way here, each a way back. */
export function renderCrumbs(): void {
  const bar = byId("crumbs");
  bar.hidden = !state.trail.length;
  if (bar.hidden) return bar.replaceChildren();
  const parts: (HTMLElement | string)[] = [];
  state.trail.forEach((name, i) => {
    parts.push(h("button", { className: "crumb", "data-graph": name, title: `back to ${name}`, onclick: () => void back(i) }, name), " › ");
  });
  parts.push(h("b", { className: "crumb-here" }, state.graphName ?? ""));
  bar.replaceChildren(...parts);
}

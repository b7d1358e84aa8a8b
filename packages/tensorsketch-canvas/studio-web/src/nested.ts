// Where things that happen inside a subgraph show on the canvas. The canvas is opened at a
// path of subgraph nodes (``state.path``: ["Review"] once Review's box was opened); a run's
// trace and its pending interrupts say which subgraph nodes they sit in. Pure: data in, data
// out.
import type { NodeTrace, RunTrace, TraceLevel } from "./types";

/** The trace of the graph shown at ``path``: the top level's nodes, or those of the
 * subgraph node opened (empty when nothing ran in there yet). */
export function traceAt(trace: RunTrace | null, path: readonly string[]): Record<string, NodeTrace> {
  if (!trace) return {};
  let level: TraceLevel = { nodes: trace.nodes, subgraphs: trace.subgraphs ?? {} };
  for (const task of path) {
    const inner: TraceLevel | undefined = level.subgraphs[bare(task)];
    if (!inner) return {};
    level = inner;
  }
  return level.nodes;
}

/** The node on the canvas opened at ``view`` where something at ``node`` inside the
 * subgraph tasks ``where`` shows: the node itself when the canvas shows its graph, the
 * subgraph node that holds it when the canvas shows a graph above it, else ``null`` (it is
 * in another subgraph, or below one not opened from here). */
export function anchorAt(node: string | null | undefined, where: readonly string[] | undefined, view: readonly string[]): string | null {
  const inside = (where ?? []).map(bare);
  if (view.length > inside.length || view.some((task, i) => bare(task) !== inside[i])) return null;
  if (view.length === inside.length) return node ?? null;
  return inside[view.length];
}

/** A task without its ``Send`` instance (``Research#1`` is node ``Research``). */
export function bare(task: string): string {
  return task.split("#")[0];
}

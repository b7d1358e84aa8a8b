// What the panels say, worked out from data: the parse-error banner, a selected wire's
// heading and hint, the holes list's heading and badge title, a hole's node names, a traced
// run's line in the run picker. Kept apart from the DOM so each wording has a test.
import { displayName } from "./layout";
import { END, type EdgeIR, type GraphIR, type HoleRef, type ParseError, type RunSummary } from "./types";

/** A path's last component (the file name the toolbar shows). */
export function baseName(path: string): string {
  return path.split(/[\\/]/).pop() ?? path;
}

export interface ParseErrorNotice {
  /** the strong part: which file and where */
  lead: string;
  /** what went wrong and what to do */
  text: string;
  /** what the canvas shows meanwhile */
  tail: string;
}

/** The banner over a file that does not parse. The lead names the file and the place, so the
 * server message's own "cannot parse NAME (line N: ...); " opening is cut down to its cause. */
export function parseErrorNotice(file: string, pe: ParseError, hasGraph: boolean): ParseErrorNotice {
  const where = pe.line ? `line ${pe.line}${pe.column ? `, column ${pe.column}` : ""}` : "somewhere";
  const opening = /^cannot parse \S+ \(line \d+: (.*?)\); /.exec(pe.message);
  return {
    lead: `${file || "The file"} does not parse (${where}): `,
    text: opening ? `${opening[1]}; ${pe.message.slice(opening[0].length)}` : pe.message,
    tail: hasGraph ? " — showing the last good graph, read-only, until the file parses again." : " — nothing to show until the file parses.",
  };
}

/** A dynamic route's hint: where its code can send the run, if known. */
export function dynamicHint(e: EdgeIR): string {
  const path = e.path ?? "the routing function";
  const routes = (e.routes ?? []).map(displayName);
  if (!routes.length) return `dynamic: ${path} picks the next node when it runs`;
  const list = routes.length === 1 ? routes[0] : `${routes.slice(0, -1).join(", ")} or ${routes[routes.length - 1]}`;
  return `dynamic: ${path} can route to ${list} (read from its code; no mapping to edit)`;
}

/** A selected wire's heading in the inspector: ``source → target``, a join's sources in
 * brackets, a dynamic route's known targets joined by ``|``. */
export function edgeTitle(e: EdgeIR): string {
  const from = e.kind === "join" ? `[${(e.sources ?? []).map(displayName).join(", ")}]` : displayName(e.source ?? "?");
  const to = e.target === null && e.routes?.length ? e.routes.map(displayName).join(" | ") : displayName(e.target ?? "?");
  return `${from} → ${to}`;
}

/** The line under a selected wire's heading: what kind of wire it is. */
export function edgeHint(e: EdgeIR): string {
  if (e.kind === "conditional") return `conditional: ${e.path ?? ""} → ${e.label ?? ""}`;
  if (e.kind === "join") return `join: ${displayName(e.target ?? "?")} runs once after all of these have run`;
  if (e.kind === "dynamic") return dynamicHint(e);
  const then = displayName(e.then ?? END);
  if (e.kind === "map") return `map: ${displayName(e.target ?? "?")} runs once per element of ${e.path ?? "?"} (port ${e.label ?? "?"}), then ${then}`;
  if (e.kind === "parallel") return `parallel: ${(e.sources ?? []).map(displayName).join(", ")} side by side, then ${then}`;
  return e.kind;
}

/** The inspector's delete button for a selected wire. */
export function deleteEdgeLabel(e: EdgeIR): string {
  return e.kind === "sequential" ? "delete edge (Del)" : e.kind === "join" ? "delete join (Del)" : "delete route (Del)";
}

/** The holes list's heading: "1 node needs code", "3 nodes need code". */
export function holesHeading(count: number): string {
  return `${count} node${count === 1 ? "" : "s"} need${count === 1 ? "s" : ""} code`;
}

/** The holes badge's title; a file that does not parse says which holes it counts. */
export function holesBadgeTitle(file: string, readOnly: boolean, unknown: boolean): string {
  return readOnly
    ? `nodes that still need code, across the project (${baseName(file)} does not parse: ${unknown ? "its holes are not counted" : "its holes as of when it last parsed"})`
    : "nodes that still need code, across the project";
}

/** The canvas's names for a hole of the opened file: the nodes of the graph whose class it is
 * (``add(Draft, name="Reply")`` is the node Reply); none for a class of another file. */
export function holeNodes(hole: HoleRef, file: string, graph: GraphIR | null): string[] {
  if (hole.file !== file || !graph) return [];
  const key = (cls: string) => cls.split("(", 1)[0].trim().split(".").pop();
  return graph.nodes.filter((n) => n.has_hole && key(n.cls) === hole.node).map((n) => n.name);
}

/** A run's start as the run picker shows it: a clock time for a timestamp (seconds or
 * milliseconds), the server's text otherwise. */
export function runStarted(started: RunSummary["started"]): string {
  return typeof started === "number" ? new Date(started * (started > 1e12 ? 1 : 1000)).toLocaleTimeString([], { hour12: false }) : started ?? "";
}

/** The run picker's line for the ``i``-th run (oldest first, counted from 1). */
export function runLabel(run: RunSummary, i: number): string {
  return `run ${i + 1} · ${run.status} · ${runStarted(run.started)}`;
}

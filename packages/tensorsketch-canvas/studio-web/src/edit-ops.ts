// The edits the canvas sends, as data: how each is named in the undo history, the op that
// deletes a wire, the checks that refuse a wire before anything is sent, and the port lists
// the "+ node" dialog reads.
import { displayName } from "./layout";
import { END, START, type EdgeIR, type EditOp, type GraphIR } from "./types";

/** The words the undo and redo buttons use for ``op``. */
export function describeEdit(op: EditOp): string {
  const a = op.args as Record<string, string>;
  switch (op.op) {
    case "add_node": return `create ${a.name}`;
    case "add_edge": return `wire ${displayName(a.source)} → ${displayName(a.target)}`;
    case "remove_edge": return (op.args as { join?: boolean }).join ? `delete the join into ${displayName(a.target)}` : `delete ${displayName(a.source)} → ${displayName(a.target)}`;
    case "add_join": return `join into ${displayName(a.target)}`;
    case "add_route": return `route ${displayName(a.source)} → ${displayName(a.target)} (${a.label})`;
    case "relabel_route": return `relabel ${displayName(a.source)}'s route ${a.label} → ${a.new}`;
    case "add_loop": return `loop ${a.node} until ${a.until}`;
    case "add_fanout": return `fan out from ${displayName(a.source)} via ${a.path}`;
    case "place_node": return `place ${a.name} (${a.cls})`;
    case "splice_node": return `put ${a.node} on ${displayName(a.source)} → ${displayName(a.target)}`;
    case "unsplice_node": return `take ${a.node} off ${displayName(a.source)} → ${displayName(a.target)}`;
    case "rename_node": return `rename ${a.old} → ${a.new}`;
    case "set_destinations": return `destinations of ${a.node}`;
    case "set_defer": return `${(op.args as { defer?: boolean }).defer ? "defer" : "undefer"} ${a.node}`;
    case "add_port": return `add port ${a.node}.${a.name}`;
    case "remove_port": return `remove port ${a.node}.${a.name}`;
    case "remove_node": return `delete ${a.name}`;
    case "restore": return "restore what was deleted";
    default: return op.op;
  }
}

/** The edit that deletes ``e`` (a join is deleted whole, named by its first source). */
export function removeEdgeOp(e: EdgeIR): EditOp {
  if (e.kind === "join") return { op: "remove_edge", args: { source: (e.sources ?? [])[0], target: e.target, join: true } };
  const args: Record<string, unknown> = { source: e.source, target: e.target };
  if (e.kind === "conditional" && e.label !== null) args.label = e.label;
  return { op: "remove_edge", args };
}

/** Whether the Delete key may delete ``e``: custom wiring lives in the code, and an edge
 * without a source (other than a join's) names nothing to delete. */
export function canDeleteEdge(e: EdgeIR): boolean {
  return !!(e.source || e.kind === "join") && !["custom", "parallel", "command"].includes(e.kind);
}

/** The node's routing call with a mapping (a conditional or a router, not a loop): the first
 * of its edges, or null when ``source`` has none. A wire drawn from such a node is a new
 * route of that call. */
export function mappedRoute(graph: GraphIR | null, source: string): EdgeIR | null {
  return graph?.edges.find((e) => e.source === source && e.kind === "conditional" && e.branch !== "loop") ?? null;
}

/** A label for a new route to ``target``: its name in lower case, unless the mapping has it. */
export function suggestLabel(graph: GraphIR | null, source: string, target: string): string {
  const taken = new Set((graph?.edges ?? []).filter((e) => e.source === source && e.kind === "conditional").map((e) => e.label));
  const base = target === END ? "done" : displayName(target).toLowerCase().replace(/[^a-z0-9_]/g, "_");
  let label = base || "route";
  for (let n = 2; taken.has(label); n++) label = `${base}_${n}`;
  return label;
}

/** Client-side checks that need no compiler: why ``source → target`` is refused before
 * anything is sent, or null when it may be sent. */
export function wiringProblem(graph: GraphIR | null, source: string, target: string): string | null {
  if (source === target) return `${displayName(source)} cannot be wired to itself with a plain edge; make it a loop from its panel (wiring → loop until …).`;
  if (target === START) return "START has no inputs: nothing can be wired into it. Wire START → a node instead.";
  if (source === END) return "END has no outputs: a run stops there. Wire a node → END instead.";
  if (target.startsWith("custom:") || target.startsWith("stub:")) return "That box is wiring the canvas cannot edit; change it in the code.";
  if (mappedRoute(graph, source)) return null; // a new route of its routing call (edits.ts asks its label)
  const dup = graph?.edges.some((e) => e.kind === "sequential" && e.source === source && e.target === target);
  if (dup) return `${displayName(source)} → ${displayName(target)} is already wired.`;
  return null;
}

/** ``name: type`` entries separated by newlines, commas or semicolons (the type defaults to
 * str) as a port map, or the message that says which entry is not a port. */
export function parsePorts(text: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const raw of text.split(/[\n,;]/)) {
    const line = raw.trim();
    if (!line) continue;
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(.+))?$/.exec(line);
    if (!m) return `"${line}" is not a port: write name: type, e.g. query: str`;
    out[m[1]] = (m[2] ?? "str").trim();
  }
  return out;
}

/** A port's name is a Python identifier. */
export function isPortName(name: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name);
}

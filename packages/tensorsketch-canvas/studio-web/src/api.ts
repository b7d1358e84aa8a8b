// The one place that talks to the Studio server. The token comes from the page URL
// (`?token=`) and goes back on every call: as a header, or in the query for EventSource.
import type { EditOp, EditResponse, GraphResponse, RunSummary, RunTrace, TeamIR, XY } from "./types";

const params = new URLSearchParams(location.search);
export const token = params.get("token") ?? "";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }
}

/** One JSON call with the token; a non-2xx answer throws an :class:`ApiError` with the body. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { "X-Studio-Token": token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await res.text();
  let data: Record<string, unknown> = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { error: text };
  }
  if (!res.ok) {
    const msg = typeof data.error === "string" ? data.error : `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, msg, data);
  }
  return data as T;
}

/** The file the canvas shows when it is not the opened one: a module that defines a subgraph
 * the opened graph runs (``NodeIR.subgraph_file``). Graph reads and edits address it. */
let subFile: string | null = null;

/** A subgraph with no file to edit (the decomposed agent loop, built by the library): the
 * canvas shows the node's nested ``child`` graph, read-only. */
export interface Nested {
  readonly graph: string; // the graph the node is in
  readonly node: string;
}
let nested: Nested | null = null;

/** Address ``file`` (null: the opened one), and ``inside`` a node's nested graph or not. */
export function showFile(file: string | null, inside: Nested | null = null): void {
  subFile = file;
  nested = inside;
}

export function shownFile(): string | null {
  return subFile;
}

export function shownNested(): Nested | null {
  return nested;
}

function fileQuery(): string {
  return subFile ? `file=${encodeURIComponent(subFile)}` : "";
}

export async function getGraph(graph?: string | null): Promise<GraphResponse> {
  const inside = nested;
  const name = inside ? inside.graph : graph;
  const q = [name ? `graph=${encodeURIComponent(name)}` : "", fileQuery()].filter(Boolean).join("&");
  const resp: GraphResponse = await call("GET", `/api/graph${q ? `?${q}` : ""}`);
  if (!inside) return resp;
  const child = resp.graph?.nodes.find((n) => n.name === inside.node)?.child;
  if (!child) throw new ApiError(404, `the node ${inside.node} no longer runs a graph`, {});
  return { ...resp, graph: child, graphs: [child.name], selected: child.name, layout: {}, stale: true };
}

export function edit(version: string, graph: string | null, op: EditOp): Promise<EditResponse> {
  const body: Record<string, unknown> = { version, op: op.op, args: op.args };
  if (subFile) body.file = subFile;
  if (graph) body.graph = graph;
  if (op.exact !== undefined) body.exact = op.exact;
  if (op.layout) body.layout = op.layout;
  return call("POST", "/api/edit", body);
}

/** Save positions in the sidecar; ``null`` unpins a node (the automatic layout places it). */
export function saveLayout(positions: Record<string, XY | null>): Promise<{ layout: Record<string, XY> }> {
  return call("POST", "/api/layout", { positions, ...(subFile ? { file: subFile } : {}) });
}

/** Open node ``node``'s class in the editor the server is configured with ($VISUAL/$EDITOR). */
export function openNode(node: string, graph: string | null): Promise<{ opened: boolean; line: number }> {
  return call("POST", "/api/open", { node, ...(graph ? { graph } : {}), ...(subFile ? { file: subFile } : {}) });
}

export function traceRuns(): Promise<{ runs: RunSummary[] }> {
  return call("GET", "/api/trace");
}

export function traceRun(run: string): Promise<RunTrace> {
  return call("GET", `/api/trace?run=${encodeURIComponent(run)}`);
}

export async function exportText(format: "mermaid" | "svg"): Promise<string> {
  const q = fileQuery();
  const res = await fetch(`/api/export?format=${format}${q ? `&${q}` : ""}`, {
    headers: { "X-Studio-Token": token },
    cache: "no-store",
  });
  if (!res.ok) throw new ApiError(res.status, await res.text(), {});
  return res.text();
}

export function events(): EventSource {
  return new EventSource(`/api/events?token=${encodeURIComponent(token)}`);
}

/** Add or remove the handoff ``source`` -> ``target`` (agent names) in the file. */
export function handoff(
  version: string,
  op: "add" | "remove",
  source: string,
  target: string,
): Promise<{ version: string; team: TeamIR | null }> {
  return call("POST", "/api/handoff", { version, op, source, target });
}

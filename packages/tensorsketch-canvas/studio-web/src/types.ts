// The JSON shapes of the Studio API (see docs/studio.md, "API") and of the graph IR
// (tensorsketch/canvas/ir.py, GraphIR.to_dict()).

export const START = "__start__";
export const END = "__end__";

export interface Port {
  name: string;
  type: string;
}

export interface NodeIR {
  name: string;
  cls: string;
  inputs: Port[];
  outputs: Port[];
  has_hole: boolean;
  hole: string | null;
  line: number | null;
  retry?: string | null;
  timeout?: string | null;
  // the graph a subgraph node runs (`add(compiled_graph)`), by its name in the file
  subgraph?: string | null;
  // a subgraph defined in another module: its file, relative to the project (edits go there)
  subgraph_file?: string | null;
  // why the subgraph cannot be read (an opaque box)
  subgraph_error?: string | null;
  // the subgraph's own graph, nested
  child?: GraphIR | null;
  // `add(..., cache=...)` as written (read-only) and `add(..., defer=True)`
  cache?: string | null;
  defer?: boolean;
  // `add(child, destinations=(...))`: where the subgraph's Command(graph=PARENT) may go
  destinations?: string[] | null;
  interrupt_before?: boolean | null;
  interrupt_after?: boolean | null;
}

export type EdgeKind = "sequential" | "conditional" | "dynamic" | "join" | "map" | "parallel" | "command" | "custom";

export interface EdgeIR {
  source: string | null;
  target: string | null;
  kind: EdgeKind;
  path: string | null;
  label: string | null;
  branch: "conditional" | "router" | "loop" | null;
  code: string | null;
  sources?: string[] | null; // a join's nodes to wait for (source is null)
  routes?: string[] | null; // dynamic: where its routing function's code says it can go
  then?: string | null; // map / parallel: where the run continues after every branch
}

export interface GraphIR {
  name: string;
  state: string | null;
  style: string;
  nodes: NodeIR[];
  edges: EdgeIR[];
  added: string[];
  // The compile call's static breakpoints (null: none the canvas can read).
  interrupt_before?: string[] | null;
  interrupt_after?: string[] | null;
  // `command` edges: where each node's `Command(goto=...)` may go, read from its class
  commands?: EdgeIR[];
}

export interface XY {
  x: number;
  y: number;
}

export interface HoleRef {
  file: string;
  node: string;
  message: string | null;
  line: number | null;
  /** "unverified" while a fill's draft that failed its checks sits beside the file */
  status?: string;
  /** that draft: its code and the failures of its checks */
  draft?: { failures?: string[] } | null;
}

export interface ParseError {
  line: number | null;
  column: number | null;
  message: string;
}

export interface GraphResponse {
  file: string;
  graph: GraphIR | null;
  graphs: string[];
  selected: string | null;
  version: string;
  layout: Record<string, XY>;
  holes: HoleRef[];
  parse_error: ParseError | null;
  stale?: boolean;
  style?: string;
  /** why there is no graph (a file without a graph builder) */
  message?: string;
  /** the functions the file defines at the top level: what a route, a loop or a fan-out
   * drawn on the canvas may name */
  functions?: string[];
  /** the Node classes the file defines: the palette of "+ node" */
  classes?: NodeClassInfo[];
  /** the agents the file builds and the handoffs between them (null: none) */
  team?: TeamIR | null;
}

/** An agent the file builds at module level (``x = Agent(...)`` / ``x = create_agent(...)``). */
export interface AgentIR {
  name: string;
  variable: string;
  factory: string;
  line: number;
}

/** One entry of an agent's ``handoffs=[...]``: the documented handoff edge form. */
export interface HandoffIR {
  kind: "handoff";
  source: string;
  target: string;
  tool_name: string | null;
  input_filter: string | null;
  requires_approval: boolean;
  by_name: boolean;
}

export interface TeamIR {
  agents: AgentIR[];
  handoffs: HandoffIR[];
}

export interface NodeClassInfo {
  name: string;
  line: number | null;
  has_hole: boolean;
  inputs: Port[];
  outputs: Port[];
}

export interface EditOp {
  op: string;
  args: Record<string, unknown>;
  /** an earlier answer's ``exact``: while the file is what that edit wrote, the server gives
   * it back its text from before, byte for byte (the op applies otherwise) */
  exact?: unknown;
  /** positions to save with the edit (a created node lands where it was dropped) */
  layout?: Record<string, XY>;
}

export interface EditResponse {
  graph: GraphIR;
  version: string;
  inverse: EditOp | null;
  /** takes this edit back exactly (send it with the inverse) */
  exact?: unknown;
  layout?: Record<string, XY>;
}

export interface RunSummary {
  run: string;
  started: number | string | null;
  spans: number;
  status: string;
  graph?: string | null;
  thread_id?: string | null;
}

export interface SpanSummary {
  name: string;
  kind: string;
  duration_ms: number | null;
  tokens: number | null;
  cost: number | null;
  error: string | null;
}

export interface NodeTrace {
  status: "ok" | "error" | "running" | "suspended";
  latency_ms: number | null;
  cost: number | null;
  calls: number;
  tokens: number | null;
  last: SpanSummary[];
}

export interface RunTrace {
  run: string;
  nodes: Record<string, NodeTrace>;
  /** each subgraph node's own nodes (and its subgraphs), by the subgraph node's name */
  subgraphs?: Record<string, TraceLevel>;
}

export interface TraceLevel {
  nodes: Record<string, NodeTrace>;
  subgraphs: Record<string, TraceLevel>;
}

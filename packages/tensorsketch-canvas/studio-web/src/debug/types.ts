// The JSON shapes of the Studio's debugger API (/api/debug/..., docs/studio.md "API").

export type ThreadStatus = "completed" | "running" | "suspended" | "failed" | "queued" | string | null;

export interface DebugStatus {
  enabled: boolean;
  backend?: string | null;
  backend_label?: string | null;
  graph?: string | null;
  graph_error?: string | null;
  tasks?: boolean;
  error?: string;
}

export interface ThreadRow {
  thread_id: string;
  status: ThreadStatus;
  label: string | null;
  run_id?: string | null;
  checkpoints: number;
  updated_at: string | null;
}

export interface ThreadPage {
  threads: ThreadRow[];
  next_cursor: string | null;
}

export interface CheckpointRow {
  id: string;
  parent_id: string | null;
  step: number;
  ran: string[];
  next: string[];
  created_at: string | null;
  on_head_branch?: boolean;
  source?: string | null;
  fork?: boolean;
  interrupted?: boolean;
  error: string | null;
  /** threads forked from this checkpoint (each with its first checkpoint) */
  forks?: ForkRef[];
}

export interface ForkRef {
  thread_id: string;
  checkpoint_id: string;
}

/** where a forked thread came from; ``step`` is ``null`` once that checkpoint is gone */
export interface ForkedFrom extends ForkRef {
  step: number | null;
}

export interface Waiting {
  kind: "approval" | "question" | "timer" | "breakpoint" | string;
  node?: string | null;
  tool?: string | null;
  args?: unknown;
  question?: string | null;
  wake_at?: string | number | null;
  interrupt_id?: string | null;
  /** the subgraph tasks it sits in, outermost first ([] at the top level) */
  path?: string[];
  all?: Waiting[];
  [key: string]: unknown;
}

/** ``run.assistant`` of a thread: the assistant version its latest run ran with. */
export interface RunAssistant {
  id: string | null;
  name: string;
  version: number | null;
}

export interface ThreadDetail {
  thread_id: string;
  status: ThreadStatus;
  run: Record<string, unknown> | null;
  head: string | null;
  checkpoints: CheckpointRow[];
  forked_from?: ForkedFrom | null;
  waiting: Waiting | null;
  /** the root thread of a subgraph's namespace (the thread itself at the top level) */
  root_thread?: string;
  /** the subgraph tasks from the root thread down to this one ([] at the top level) */
  namespace?: NamespaceLevel[];
  /** the subgraph namespaces directly inside this thread, one per task that checkpointed */
  subgraphs?: ChildThread[];
}

export interface NamespaceLevel {
  task: string;
  node: string;
  graph: string | null;
}

export interface ChildThread {
  task: string;
  node: string;
  step: number;
  thread_id: string;
  graph: string;
  checkpoints: number;
}

/** a subgraph task's state nested under it in a checkpoint: the child that ran in the
 * superstep that wrote it ("ran") or one it plans that has started ("next") */
export interface NestedChild {
  task: string;
  node: string;
  relation: "ran" | "next";
  thread_id: string;
  graph: string;
  head: string;
  step: number;
  status: ThreadStatus;
  next: string[];
  waiting: Waiting | null;
  state: Record<string, { value: unknown; truncated: boolean }>;
  subgraphs: NestedChild[];
}

export interface ChannelView {
  value: unknown;
  truncated: boolean;
  changed: boolean;
  previous: unknown;
  present?: boolean;
}

export interface EffectRow {
  key: string;
  /** "effect", "decision", "writes", or "in_doubt" (an intent with no result) */
  kind?: string;
  node: string | null;
  preview: unknown;
  truncated: boolean;
}

export interface CheckpointDetail {
  id: string;
  parent_id: string | null;
  step: number;
  source?: string | null;
  created_at?: string | null;
  ran: string[];
  next: string[];
  sends: { node: string; arg: unknown }[];
  /** ``null`` when the backend cannot list its journal */
  effects: EffectRow[] | null;
  state: Record<string, ChannelView>;
  errors: { node: string | null; error: string }[];
  /** each subgraph task's state, nested under it */
  subgraphs?: NestedChild[];
}

export interface ReplayResult {
  node: string;
  checkpoint_id?: string;
  output: unknown;
  effects: { replayed: number; live: number } | null;
  error: string | null;
  duration_ms: number | null;
}

export interface WriteResult {
  thread_id?: string;
  checkpoint_id?: string | null;
  status?: ThreadStatus;
  ran?: string[];
  next?: string[];
  error?: string | null;
  via?: string;
}

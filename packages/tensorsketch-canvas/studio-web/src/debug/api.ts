// The debugger's calls (/api/debug/...). Every write carries `"confirm": true`: the server
// refuses a write without it, so only a confirmed action in the page can change a thread.
import { call } from "../api";
import type { CheckpointDetail, DebugStatus, ReplayResult, ThreadDetail, ThreadPage, WriteResult } from "./types";

const T = (thread: string) => `/api/debug/threads/${encodeURIComponent(thread)}`;

export function status(): Promise<DebugStatus> {
  return call("GET", "/api/debug/status");
}

export function threads(q: string, cursor: string | null, limit = 40): Promise<ThreadPage> {
  const p = new URLSearchParams({ limit: String(limit) });
  if (q) p.set("q", q);
  if (cursor) p.set("cursor", cursor);
  return call("GET", `/api/debug/threads?${p}`);
}

export function thread(id: string): Promise<ThreadDetail> {
  return call("GET", T(id));
}

export function checkpoint(thread: string, checkpoint: string): Promise<CheckpointDetail> {
  return call("GET", `${T(thread)}/checkpoints/${encodeURIComponent(checkpoint)}`);
}

export function fullValue(thread: string, checkpoint: string, channel: string): Promise<{ value: unknown }> {
  return call("GET", `${T(thread)}/checkpoints/${encodeURIComponent(checkpoint)}/value?channel=${encodeURIComponent(channel)}`);
}

/** A new thread from ``checkpointId`` with ``values``; ``run`` runs it on from there. */
export function fork(thread: string, checkpointId: string, values: Record<string, unknown>, run: boolean, asNode: string | null = null, effects = ""): Promise<WriteResult> {
  return call("POST", `${T(thread)}/fork`, { checkpoint_id: checkpointId, values, run, confirm: true, ...(asNode ? { as_node: asNode } : {}), ...(effects ? { effects } : {}) });
}

/** ``asNode``: the edit stands for that node's output, so its successors run next, routed on
 * the edited state (null: the checkpoint's plan stays). */
export function update(thread: string, checkpointId: string, values: Record<string, unknown>, asNode: string | null = null): Promise<WriteResult> {
  return call("POST", `${T(thread)}/update`, { checkpoint_id: checkpointId, values, confirm: true, ...(asNode ? { as_node: asNode } : {}) });
}

export function step(thread: string): Promise<WriteResult> {
  return call("POST", `${T(thread)}/step`, { confirm: true });
}

export function run(thread: string): Promise<WriteResult> {
  return call("POST", `${T(thread)}/run`, { confirm: true });
}

export function replayNode(thread: string, checkpointId: string, node: string, live: boolean): Promise<ReplayResult> {
  // a live replay calls models and tools for real: the page asked first
  return call("POST", `${T(thread)}/replay-node`, { checkpoint_id: checkpointId, node, live, ...(live ? { confirm: true } : {}) });
}

export function resume(thread: string, action: "approve" | "reject" | "answer", interruptId: string | null, value?: unknown): Promise<WriteResult> {
  const body: Record<string, unknown> = { action, confirm: true };
  if (interruptId) body.interrupt_id = interruptId;
  if (value !== undefined) body.value = value;
  return call("POST", `${T(thread)}/resume`, body);
}

// The memory items the open thread read and wrote: every journaled `ctx.memory` call
// (GET /api/debug/memory?thread=ID) as a row of op, namespace, key, revision and value,
// grouped by superstep and node. Rows of the picked checkpoint's superstep are marked, so
// stepping through the timeline shows what each step saw and changed. Read-only: the journal
// says what the run saw then, not what the store holds now.
import { call } from "../api";
import { h } from "../dom";
import { oneLine } from "./dom";
import type { ThreadDetail } from "./types";

export interface MemoryOp {
  effect_key: string;
  step: number;
  node: string;
  instance: string;
  checkpoint_id: string | null;
  recorded: boolean;
  query: string | null;
  op: "get" | "search" | "list" | "namespaces" | "put" | "delete" | string;
  namespace: string[] | null;
  key: string | null;
  rev: number | null;
  value: unknown;
  truncated: boolean;
  found: boolean;
}

const WRITES = new Set(["put", "delete"]);

/** The list per thread detail (a refresh of the thread fetches it again). */
const fetched = new WeakMap<ThreadDetail, Promise<MemoryOp[] | null>>();

function memoryOps(t: ThreadDetail): Promise<MemoryOp[] | null> {
  let found = fetched.get(t);
  if (!found) {
    found = call<{ ops: MemoryOp[] }>("GET", `/api/debug/memory?thread=${encodeURIComponent(t.thread_id)}`).then(
      (r) => r.ops,
      () => null,
    );
    fetched.set(t, found);
  }
  return found;
}

/** The card (hidden while the thread made no memory call); ``picked`` is the open checkpoint. */
export function memoryCard(t: ThreadDetail, picked: () => string | null): HTMLElement {
  const card = h("details", { className: "dbg-memory", id: "dbg-memory", hidden: true, open: true });
  void memoryOps(t).then((ops) => {
    if (!ops?.length) return;
    const wrote = ops.filter((o) => WRITES.has(o.op)).length;
    card.hidden = false;
    card.append(
      h("summary", {}, h("span", { className: "mem-title" }, "memory"), h("span", { className: "hint" }, ` ${ops.length - wrote} read · ${wrote} written`)),
      table(ops),
    );
    markMemoryCheckpoint(picked());
  });
  return card;
}

function table(ops: MemoryOp[]): HTMLElement {
  const list = h("div", { className: "mem-ops" });
  let group = "";
  for (const o of ops) {
    const at = `${o.step} ${o.node}${o.instance}`;
    if (at !== group) {
      group = at;
      list.append(h("div", { className: "mem-group", "data-step": String(o.step) }, `step ${o.step} · ${o.node}`));
    }
    list.append(row(o));
  }
  return h("div", { className: "mem-scroll" }, list);
}

/** One item read or written: the op, its address and revision, then what it held. */
function row(o: MemoryOp): HTMLElement {
  const address = `${(o.namespace ?? ["?"]).join(" / ")}${o.key !== null ? ` : ${o.key}` : ""}`;
  const what = o.op === "delete" ? (o.found ? "removed" : "nothing to remove") : !o.found ? (o.op === "put" ? "not written" : "not found") : oneLine(o.value, 90);
  const title = [o.query !== null ? `query: ${o.query}` : "", o.found && o.op !== "delete" ? JSON.stringify(o.value, null, 2) : "", o.recorded ? "" : "started, no result recorded (in doubt)"].filter(Boolean).join("\n");
  return h(
    "div",
    {
      className: `mem-op ${WRITES.has(o.op) ? "write" : "read"}${o.found ? "" : " missing"}${o.recorded ? "" : " in-doubt"}`,
      "data-op": o.op,
      "data-step": String(o.step),
      "data-checkpoint": o.checkpoint_id ?? "",
      "data-key": o.key ?? "",
      title,
    },
    h("span", { className: `mem-badge m-${o.op}` }, o.op),
    h("code", { className: "mem-addr" }, address),
    h("span", { className: "mem-rev" }, o.rev !== null ? `r${o.rev}` : ""),
    h("span", { className: "mem-val" }, o.query !== null ? `“${oneLine(o.query, 30)}” → ${what}` : what),
  );
}

/** Mark the rows of ``checkpoint``'s superstep (``null``: none). */
export function markMemoryCheckpoint(checkpoint: string | null): void {
  const card = document.getElementById("dbg-memory");
  if (!card) return;
  for (const el of card.querySelectorAll<HTMLElement>(".mem-op")) el.classList.toggle("here", !!checkpoint && el.dataset.checkpoint === checkpoint);
}

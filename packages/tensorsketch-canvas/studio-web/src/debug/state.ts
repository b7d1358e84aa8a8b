// The state inspector: one checkpoint's channels (diffed against the previous checkpoint,
// editable as JSON), its pending Sends, journal effects, errors, and the node replay.
import { formatMs } from "../draw";
import { h } from "../dom";
import { diffView, jsonText, lineDiff, oneLine, statusBadge, when } from "./dom";
import type { CheckpointDetail, CheckpointRow, NestedChild, ReplayResult, ThreadDetail } from "./types";

export interface StateView {
  thread: ThreadDetail;
  checkpoint: CheckpointDetail;
  row: CheckpointRow | null;
  full: Map<string, unknown>;
  edits: Map<string, string>;
  editErrors: Map<string, string>;
  replay: { node: string; result: ReplayResult | null; error: string | null; busy: boolean } | null;
  replayLive: boolean;
  busy: boolean;
  readonly: boolean;
  /** the thread is a subgraph's namespace (it runs inside its parent: no fork from here) */
  nested: boolean;
  /** whether the canvas can open a subgraph node */
  canOpen(node: string): boolean;
  /** the node an edit is applied as ("": keep the checkpoint's plan) and the graph's nodes */
  asNode: string;
  nodes: readonly string[];
  /** the node whose routing decided what runs next (null: none known) */
  decider: string | null;
}

export interface StateActions {
  close(): void;
  expand(channel: string): void;
  /** start (text) or stop (null) editing a channel */
  edit(channel: string, text: string | null): void;
  /** the text of an edited channel changed (no repaint) */
  typed(channel: string, text: string): void;
  discard(): void;
  fork(): void;
  update(): void;
  asNode(node: string): void;
  replay(node: string): void;
  replayLive(live: boolean): void;
  /** open a nested child's namespace (and its subgraph on the canvas) */
  openChild(child: NestedChild): void;
}

const LONG = 12; // lines of a value shown before it scrolls

export function renderState(panel: HTMLElement, v: StateView, a: StateActions): void {
  const cp = v.checkpoint;
  const scroll = panel.scrollTop;
  const channels = Object.entries(cp.state);
  const changed = channels.filter(([, c]) => c.changed).length;
  const head = v.thread.head === cp.id;
  panel.replaceChildren(
    h(
      "div",
      { className: "dbg-head" },
      h("h3", {}, `step ${cp.step}`),
      head ? h("span", { className: "tl-tag head" }, "head") : null,
      h("span", { className: "grow" }),
      h("button", { className: "x", id: "dbg-state-close", title: "close (the canvas shows the live overlay again)", "aria-label": "close the state panel", onclick: a.close }, "×"),
    ),
    h("p", { className: "hint mono", title: cp.id }, `checkpoint ${cp.id}${v.row?.created_at ? ` · ${when(v.row.created_at)}` : ""}`),
    h(
      "div",
      { className: "dbg-flow" },
      h("span", { className: "k ran" }, "ran"),
      h("span", {}, cp.ran.length ? cp.ran.join(", ") : "—"),
      h("span", { className: "k next" }, "next"),
      h("span", {}, cp.next.length ? cp.next.join(", ") : "— (done)"),
    ),
  );
  if (cp.errors.length) {
    const box = h("div", { className: "dbg-errors" }, h("h4", {}, "errors"));
    for (const e of cp.errors) box.append(h("pre", { className: "dbg-json err" }, `${e.node ? `${e.node}: ` : ""}${e.error}`));
    panel.append(box);
  }
  if (cp.sends.length) {
    const ul = h("ul", { className: "dbg-sends" });
    for (const s of cp.sends) ul.append(h("li", {}, h("b", {}, s.node), " ← ", h("code", {}, oneLine(s.arg, 120))));
    panel.append(h("h4", {}, `pending Sends (${cp.sends.length})`), ul);
  }
  panel.append(h("h4", {}, `state · ${channels.length} channel${channels.length === 1 ? "" : "s"}${changed ? `, ${changed} changed` : ""}`));
  if (!channels.length) panel.append(h("p", { className: "hint" }, "No channel has a value at this checkpoint."));
  for (const [name, c] of channels) panel.append(channelCard(name, c, v, a));
  if (v.edits.size) {
    panel.append(
      h(
        "div",
        { className: "dbg-editbar", id: "dbg-editbar" },
        h("span", {}, `${v.edits.size} edited`),
        h("button", { id: "dbg-discard", disabled: v.busy, onclick: a.discard }, "discard"),
        h("span", { className: "grow" }),
        h("button", {
          id: "dbg-update",
          className: "danger",
          disabled: v.busy || !head,
          title: head ? "save the edit as a new checkpoint of this thread (update_state)" : "update_state edits the thread's latest checkpoint: open the head to update in place, or fork from here",
          onclick: a.update,
        }, "update in place…"),
        v.nested ? null : h("button", { id: "dbg-fork", className: "primary", disabled: v.busy, title: "start a new thread from this checkpoint with the edit", onclick: a.fork }, "fork…"),
      ),
      routingRow(v, a),
    );
  }
  if (cp.subgraphs?.length) panel.append(subgraphsBox(cp.subgraphs, v, a));
  panel.append(effectsTable(cp));
  panel.append(replayBox(v, a));
  panel.scrollTop = scroll;
}

/** What runs after the edit: the checkpoint's plan, or — applied as a node — that node's
 * successors routed on the edited values. Says so when the edit cannot change what runs. */
function routingRow(v: StateView, a: StateActions): HTMLElement {
  const cp = v.checkpoint;
  const select = h(
    "select",
    { id: "dbg-as-node", "aria-label": "apply the edit as a node's output", disabled: v.busy },
    h("option", { value: "" }, "keep the plan"),
    ...v.nodes.map((n) => h("option", { value: n }, `apply as node ${n}`)),
  );
  select.value = v.asNode;
  select.addEventListener("change", () => a.asNode(select.value));
  const decided = v.decider;
  const note = v.asNode
    ? `The edit stands for ${v.asNode}'s output: ${v.asNode}'s successors run next, routed on the edited values.`
    : cp.next.length
      ? `Next runs ${cp.next.join(", ")} whatever the edit: this checkpoint already planned it. To route on the edited values, apply the edit as ${decided ? `node ${decided} (its route picked ${cp.next.join(", ")})` : "the node whose output it changes"}.`
      : "Nothing is planned after this checkpoint: the edit changes the state only.";
  return h("div", { className: "dbg-route", id: "dbg-route" }, select, h("p", { className: "hint", id: "dbg-route-note" }, note));
}

/** Each subgraph task's own state, nested under the task: the child that ran in this
 * superstep or the one it runs now (running or waiting), with its children below it. */
function subgraphsBox(children: NestedChild[], v: StateView, a: StateActions): HTMLElement {
  const box = h("section", { className: "dbg-subgraphs", id: "dbg-subgraphs" }, h("h4", {}, `subgraphs · ${children.length}`));
  for (const child of children) box.append(nestedCard(child, v, a, 0));
  return box;
}

function nestedCard(child: NestedChild, v: StateView, a: StateActions, depth: number): HTMLElement {
  const relation = child.relation === "ran" ? "ran in this step" : child.status === "completed" ? "ran from here" : "runs from here";
  const openable = depth === 0 && v.canOpen(child.node);
  const card = h(
    "div",
    { className: "dbg-sub", "data-task": child.task, "data-thread": child.thread_id },
    h(
      "div",
      { className: "dbg-sub-head" },
      h("b", {}, child.task),
      statusBadge(child.status),
      h("span", { className: "grow" }),
      depth === 0
        ? h("button", { className: "x dbg-sub-open", "data-open": child.task, disabled: !openable, title: openable ? `open ${child.node} on the canvas, with its own checkpoints` : `${child.node}'s graph is not defined in this file, so the canvas cannot open it`, onclick: () => a.openChild(child) }, "open ›")
        : null,
    ),
  );
  card.append(h("p", { className: "hint dbg-sub-where" }, `${child.graph !== child.node ? `graph ${child.graph} · ` : ""}${relation} · at its step ${child.step}`));
  if (child.waiting) card.append(h("p", { className: "dbg-sub-wait" }, `waits in ${child.waiting.node ?? child.task}: ${child.waiting.kind === "question" ? oneLine(child.waiting.question, 90) : child.waiting.kind}`));
  const rows = h("dl", { className: "dbg-sub-state" });
  for (const [name, c] of Object.entries(child.state)) rows.append(h("dt", {}, name), h("dd", { className: "mono", title: c.truncated ? "truncated: open the subgraph to read it whole" : "" }, oneLine(JSON.stringify(c.value) ?? String(c.value), 120)));
  card.append(rows);
  for (const inner of child.subgraphs) card.append(nestedCard(inner, v, a, depth + 1));
  return card;
}

function channelCard(name: string, c: CheckpointDetail["state"][string], v: StateView, a: StateActions): HTMLElement {
  const full = v.full.has(name);
  const value = full ? v.full.get(name) : c.value;
  const editing = v.edits.has(name);
  const card = h("div", { className: `dbg-channel${c.changed ? " changed" : ""}${editing ? " editing" : ""}`, "data-channel": name });
  const tools = h("span", { className: "tools" });
  if (c.truncated && !full) tools.append(h("button", { className: "x", "data-expand": name, title: "fetch the whole value", onclick: () => a.expand(name) }, "expand"));
  if (!v.readonly && !editing) {
    tools.append(
      h("button", {
        className: "x",
        "data-edit": name,
        title: c.truncated && !full ? "expand the value first to edit it" : "edit this value as JSON",
        disabled: c.truncated && !full,
        onclick: () => a.edit(name, jsonText(value)),
      }, "edit"),
    );
  }
  card.append(h("div", { className: "dbg-channel-head" }, h("b", {}, name), c.changed ? h("span", { className: "chg" }, "changed") : null, h("span", { className: "grow" }), tools));
  if (editing) {
    const text = v.edits.get(name) ?? "";
    const area = h("textarea", { className: "dbg-edit", "data-edit-area": name, "aria-label": `${name} as JSON`, rows: Math.min(14, Math.max(3, text.split("\n").length + 1)), spellcheck: false, value: text });
    const msg = h("p", { className: "dbg-field-error", "data-error-for": name, hidden: !v.editErrors.has(name) }, v.editErrors.get(name) ?? "");
    area.addEventListener("input", () => {
      a.typed(name, area.value);
      try {
        JSON.parse(area.value);
        area.classList.remove("bad");
        if (msg.dataset.local) (msg.hidden = true), delete msg.dataset.local;
      } catch (err) {
        area.classList.add("bad");
        msg.textContent = `not JSON: ${(err as Error).message}`;
        msg.dataset.local = "1";
        msg.hidden = false;
      }
    });
    card.append(area, msg, h("div", { className: "row end" }, h("button", { className: "x", "data-cancel-edit": name, onclick: () => a.edit(name, null) }, "cancel edit")));
    return card;
  }
  if (c.present === false) {
    card.append(h("p", { className: "hint gone" }, h("span", {}, "not held by this checkpoint (the parent had"), h("code", { title: oneLine(c.previous, 400) }, oneLine(c.previous, 60)), h("span", {}, ")")));
    return card;
  }
  const now = jsonText(value);
  if (c.changed && c.previous !== null && c.previous !== undefined && !c.truncated) {
    const diff = lineDiff(jsonText(c.previous), now);
    if (diff) {
      card.append(clamp(diffView(diff)));
      return card;
    }
  }
  card.append(clamp(h("pre", { className: "dbg-json value" }, now)));
  if (c.changed && (c.previous === null || c.previous === undefined)) card.append(h("p", { className: "hint" }, "new at this checkpoint"));
  else if (c.changed) card.append(h("p", { className: "hint was" }, h("span", {}, "was"), h("code", { title: oneLine(c.previous, 400) }, oneLine(c.previous, 100))));
  if (c.truncated && !full) card.append(h("p", { className: "hint" }, "truncated: expand to see all of it"));
  return card;
}

function clamp(pre: HTMLPreElement): HTMLPreElement {
  if ((pre.textContent ?? "").split("\n").length > LONG) pre.classList.add("long");
  return pre;
}

function effectsTable(cp: CheckpointDetail): HTMLElement {
  if (cp.effects === null) {
    return h("div", { className: "dbg-effects" }, h("h4", {}, "journal effects"), h("p", { className: "hint" }, "This backend cannot list its journal."));
  }
  const box = h("div", { className: "dbg-effects" }, h("h4", {}, `journal effects (${cp.effects.length})`));
  if (!cp.effects.length) {
    box.append(h("p", { className: "hint" }, "No effect recorded for this superstep."));
    return box;
  }
  const table = h("table", {}, h("tr", {}, h("th", {}, "node"), h("th", {}, "effect"), h("th", {}, "result")));
  for (const e of cp.effects) {
    const doubt = e.kind === "in_doubt";
    const result = doubt ? `in doubt (${String((e.preview as { policy?: string } | null)?.policy ?? "retry")}): started, no result` : `${oneLine(e.preview, 90)}${e.truncated ? " …" : ""}`;
    table.append(h("tr", { title: e.key, className: doubt ? "in-doubt" : "" }, h("td", {}, e.node ?? ""), h("td", { className: "mono" }, shortKey(e.key)), h("td", { className: "mono" }, result)));
  }
  box.append(table);
  return box;
}

function shortKey(key: string): string {
  return key.length > 28 ? `${key.slice(0, 26)}…` : key;
}

function replayBox(v: StateView, a: StateActions): HTMLElement {
  const cp = v.checkpoint;
  const box = h("div", { className: "dbg-replay" }, h("h4", {}, "replay a node"));
  const nodes = [...new Set([...cp.ran, ...cp.next])];
  box.append(h("p", { className: "hint" }, "Re-runs a node that ran here (on its recorded input) or runs next, and shows what it returns now; nothing is saved. Clicking a node on the canvas picks it."));
  const row = h("div", { className: "row wrap" });
  for (const n of nodes) {
    row.append(h("button", { "data-replay": n, className: v.replay?.node === n ? "on" : "", disabled: v.readonly || v.replay?.busy, onclick: () => a.replay(n) }, `↺ ${n}`));
  }
  const live = h("input", { type: "checkbox", id: "dbg-replay-live", checked: v.replayLive });
  live.addEventListener("change", () => a.replayLive(live.checked));
  row.append(h("label", { className: "hint check", title: "make the node's model and tool calls for real instead of replaying them from the journal" }, live, " live calls"));
  box.append(row);
  const r = v.replay;
  if (r?.busy) box.append(h("p", { className: "hint" }, `running ${r.node}…`));
  else if (r?.error) box.append(h("pre", { className: "dbg-json err", id: "dbg-replay-out" }, `${r.node}: ${r.error}`));
  else if (r?.result) {
    const res = r.result;
    const fx = res.effects ? ` · effects ${res.effects.replayed} replayed, ${res.effects.live} live` : "";
    box.append(
      h("p", { className: "hint" }, `${res.node} returned${res.duration_ms !== null ? ` in ${formatMs(res.duration_ms)}` : ""}${fx}`),
      res.error ? h("pre", { className: "dbg-json err", id: "dbg-replay-out" }, res.error) : clamp(h("pre", { className: "dbg-json value", id: "dbg-replay-out" }, jsonText(res.output))),
    );
  } else if (r) box.append(h("p", { className: "hint" }, `press ↺ ${r.node} to run it`));
  return box;
}

// Effects in doubt on the open thread: an effect that wrote its intent and no result (the run
// stopped between calling out and recording what came back), so nobody knows whether it
// happened. Each is listed with what a resume does about it (its policy: retry, ask, fail; an
// idempotency key always retries); one the thread waits on (`ask`) is answered here, through
// the debugger's resume: it went through (with its result), run it again, or fail the run.
import { call } from "../api";
import { h } from "../dom";
import { resume } from "./api";
import { confirmAction } from "./confirm";
import type { ThreadDetail } from "./types";

export interface InDoubt {
  key: string;
  effect: string;
  node: string | null;
  step: number | null;
  args: unknown;
  policy: string;
  idempotency_key: boolean;
  action: "retry" | "ask" | "fail" | string;
  explains: string;
  waiting: boolean;
  interrupt_id: string | null;
}

export interface DoubtHooks {
  disabled: boolean;
  /** run ``fn`` while the debugger shows itself busy (one write at a time) */
  busy(fn: () => Promise<void>): Promise<unknown>;
  /** open the thread again on ``checkpoint`` (after the resume wrote one) */
  reopen(thread: string, checkpoint: string | null): Promise<void>;
  toast(msg: string, kind?: "info" | "error" | "conflict"): void;
}

/** The list per thread detail (a refresh of the thread fetches it again). */
const fetched = new WeakMap<ThreadDetail, Promise<InDoubt[] | null>>();

function effectsInDoubt(t: ThreadDetail): Promise<InDoubt[] | null> {
  let found = fetched.get(t);
  if (!found) {
    found = call<{ effects: InDoubt[] }>("GET", `/api/debug/in-doubt?thread=${encodeURIComponent(t.thread_id)}`).then(
      (r) => r.effects,
      () => null,
    );
    fetched.set(t, found);
  }
  return found;
}

/** The card listing the thread's effects in doubt (empty, and hidden, when there are none). */
export function doubtCard(t: ThreadDetail, hooks: DoubtHooks): HTMLElement {
  const card = h("div", { className: "dbg-doubt", id: "dbg-doubt", hidden: true });
  void effectsInDoubt(t).then((effects) => {
    if (!effects?.length) return;
    card.hidden = false;
    card.append(h("h4", {}, `${effects.length} effect${effects.length === 1 ? "" : "s"} in doubt`), h("p", { className: "hint" }, "started and recorded no result: did it happen?"));
    for (const e of effects) card.append(entry(t, e, hooks));
  });
  return card;
}

function entry(t: ThreadDetail, e: InDoubt, hooks: DoubtHooks): HTMLElement {
  const where = [e.node, e.step !== null ? `step ${e.step}` : null].filter(Boolean).join(" · ");
  const row = h(
    "div",
    { className: `dbg-doubt-item a-${e.action.replace(/[^a-z]/g, "")}`, "data-key": e.key },
    h("div", { className: "dbg-doubt-head" }, h("span", { className: "doubt-mark", title: "intent recorded, no result" }, "?"), h("code", {}, e.effect), where ? h("span", { className: "hint" }, ` ${where}`) : "", h("span", { className: `policy p-${e.action}` }, e.idempotency_key ? "retry (idempotency key)" : e.action)),
    e.args !== null && e.args !== undefined ? h("pre", { className: "dbg-json" }, JSON.stringify(e.args, null, 2)) : "",
    h("p", { className: "hint explains" }, e.explains),
  );
  if (e.waiting && e.interrupt_id) row.append(answerRow(t, e, hooks));
  return row;
}

function answerRow(t: ThreadDetail, e: InDoubt, hooks: DoubtHooks): HTMLElement {
  const result = h("input", { id: "dbg-doubt-result", placeholder: 'its result, as JSON: "r-17"', "aria-label": `the result of ${e.effect}`, autocomplete: "off", disabled: hooks.disabled });
  const btn = (label: string, id: string, cls: string, fn: () => void) => h("button", { id, className: cls, disabled: hooks.disabled, onclick: fn }, label);
  const happened = () => {
    let value: unknown;
    try {
      value = JSON.parse(result.value);
    } catch {
      hooks.toast("Type the result the effect returned, as JSON (a string in quotes).", "error");
      return;
    }
    void decide(t, e, { result: value }, `It happened: ${e.effect} returned ${result.value}`, hooks);
  };
  return h(
    "div",
    { className: "dbg-doubt-answer" },
    h("p", {}, "The run waits for you: did it happen?"),
    h("div", { className: "row" }, result, btn("it happened", "dbg-doubt-happened", "primary", happened)),
    h(
      "div",
      { className: "row" },
      btn("run it again", "dbg-doubt-retry", "", () => void decide(t, e, "retry", `Run ${e.effect} again`, hooks)),
      btn("fail the run", "dbg-doubt-fail", "danger", () => void decide(t, e, "fail", `Fail the run at ${e.effect}`, hooks)),
    ),
  );
}

async function decide(t: ThreadDetail, e: InDoubt, value: unknown, what: string, hooks: DoubtHooks): Promise<void> {
  const ok = await confirmAction({
    title: `${what}?`,
    body: `${t.thread_id} resumes in ${e.node ?? "its node"} and runs on until it ends or waits again.`,
    detail: JSON.stringify({ effect: e.effect, args: e.args, decision: value }, null, 2),
    ok: "resume",
    danger: value === "fail",
  });
  if (!ok) return;
  await hooks.busy(async () => {
    try {
      const res = await resume(t.thread_id, "answer", e.interrupt_id, value);
      hooks.toast(`Decided about ${e.effect}: ${t.thread_id} is ${res.status ?? "resumed"}.`);
      await hooks.reopen(t.thread_id, res.checkpoint_id ?? null);
    } catch (err) {
      hooks.toast(`Resume failed: ${(err as Error).message}`, "error");
    }
  });
}

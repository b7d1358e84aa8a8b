// The run panel: start a run of the opened graph from the canvas. A form built from the state
// schema (or, for an agent graph, a chat) posts the input; the live overlay follows the run,
// the debugger opens its thread once it stops (on a --backend), a question or an approval it
// waits on is answered in place — at its node and in the panel — and an agent thread's
// messages are shown. Everything sent is data the server validates against the schema.
import { call } from "./api";
import * as debug from "./debug/index";
import { statusBadge } from "./debug/dom";
import { byId, h } from "./dom";
import { watchRun } from "./live";
import { toast } from "./notices";
import { anchorAt } from "./nested";
import { relayout, reveal } from "./stage";
import { state } from "./store";
import { parseValue, placeholder, widgetFor, type JsonSchema, type RunField, type Widget } from "./run-form";

interface Waiting {
  kind: string;
  interrupt_id: string;
  node: string | null;
  /** the subgraph tasks it sits in, outermost first */
  path?: string[];
  tool?: unknown;
  args?: unknown;
  question?: unknown;
}

interface MessageView {
  role: string;
  text: string;
  name: string | null;
  tool_calls: { id: string; name: string; args: unknown }[];
  tool_call_id: string | null;
  is_error: boolean;
}

interface RunThread {
  thread_id: string;
  status: string;
  run: string | null;
  error: string | null;
  waiting: Waiting[];
  messages?: MessageView[] | null;
  /** where a stopped thread stands, field by field (bounded previews) */
  state?: StateField[] | null;
}

interface StateField {
  name: string;
  value: unknown;
  truncated: boolean;
}

interface RunForm {
  graph: string;
  state: string;
  agent: boolean;
  durable: boolean;
  backend: string;
  fields: RunField[];
  defs: Record<string, JsonSchema>;
}

const T = (thread: string) => `/api/run/threads/${encodeURIComponent(thread)}`;

const run = {
  open: false,
  form: null as RunForm | null,
  thread: null as RunThread | null,
  sending: false,
  widgets: new Map<string, { w: Widget; read(): string | boolean; error: HTMLElement }>(),
};

/** Peeks for tests: the panel's current thread. */
export const runPanel = run;

function panel(): HTMLElement {
  return byId("run-panel");
}

async function toggle(): Promise<void> {
  run.open = !run.open;
  panel().hidden = !run.open;
  byId("run-toggle").classList.toggle("on", run.open);
  document.body.classList.toggle("run-open", run.open);
  relayout(true); // the canvas shrank or grew: fit again, unless the user moved the view
  if (!run.open) {
    showAsk();
    return;
  }
  try {
    run.form = await call<RunForm>("GET", "/api/run");
  } catch (err) {
    run.form = null;
    panel().replaceChildren(head(), h("p", { className: "run-error", id: "run-form-error" }, (err as Error).message));
    return;
  }
  render();
}

function head(): HTMLElement {
  const f = run.form;
  const where = f ? (f.durable ? `durable · ${f.backend}` : "in memory (start with --backend to keep runs)") : "";
  return h(
    "div",
    { className: "run-head" },
    h("h3", {}, f?.agent ? "Chat" : "Run"),
    h("span", { className: "hint", id: "run-where", title: "where the run's checkpoints go" }, where),
    h("button", { className: "x", title: "close", "aria-label": "close the run panel", onclick: () => void toggle() }, "×"),
  );
}

/** Build the panel (when it opens): the head, the form or chat, the thread. */
function render(): void {
  const f = run.form;
  if (!f) return;
  const body = f.agent ? chat() : form(f);
  panel().replaceChildren(head(), body, threadView());
  update();
}

/** The thread changed: redraw it and what may be sent now; typed input is kept. */
function update(): void {
  if (run.open && run.form) {
    document.getElementById("run-thread")?.replaceWith(threadView());
    const running = run.sending || run.thread?.status === "running";
    const startButton = document.getElementById("run-start") as HTMLButtonElement | null;
    if (startButton) startButton.disabled = running;
    const send = document.getElementById("run-send") as HTMLButtonElement | null;
    if (send) send.disabled = running || (run.thread?.waiting.length ?? 0) > 0;
    const fresh = document.getElementById("run-new-chat") as HTMLButtonElement | null;
    if (fresh) fresh.disabled = !run.thread || running;
  }
  showAsk();
}

// -- the form ----------------------------------------------------------------------------------

function form(f: RunForm): HTMLElement {
  run.widgets.clear();
  const rows = f.fields.map((field) => fieldRow(field, f.defs));
  const go = h("button", { id: "run-start", className: "primary", type: "submit" }, "▶ run");
  const el = h("form", { id: "run-form", className: "run-form" }, h("p", { className: "hint" }, `the ${f.state} fields the run starts from; an empty one keeps its default`), ...rows, h("div", { className: "row" }, go));
  el.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void submitForm();
  });
  return el;
}

function fieldRow(field: RunField, defs: Record<string, JsonSchema>): HTMLElement {
  const w = widgetFor(field.schema, defs);
  const id = `run-field-${field.name}`;
  let input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;
  let read: () => string | boolean;
  if (w.kind === "boolean") {
    const box = h("input", { id, type: "checkbox", checked: w.fallback === true });
    input = box;
    read = () => box.checked;
  } else if (w.kind === "enum") {
    const sel = h("select", { id });
    sel.add(new Option(w.hasDefault ? `(default: ${JSON.stringify(w.fallback)})` : "(pick one)", ""));
    for (const o of w.options) sel.add(new Option(typeof o === "string" ? o : JSON.stringify(o), JSON.stringify(o)));
    input = sel;
    read = () => sel.value;
  } else if (w.kind === "json") {
    const area = h("textarea", { id, rows: 2, placeholder: placeholder(w), spellcheck: false });
    input = area;
    read = () => area.value;
  } else {
    const box = h("input", { id, type: w.kind === "text" ? "text" : "number", step: w.kind === "integer" ? "1" : "any", placeholder: placeholder(w), autocomplete: "off", spellcheck: false });
    input = box;
    read = () => box.value;
  }
  const error = h("span", { className: "run-field-error", id: `${id}-error` });
  run.widgets.set(field.name, { w, read, error });
  const type = w.kind === "json" ? "JSON" : w.kind;
  return h(
    "label",
    { className: `run-field k-${w.kind}`, title: field.description ?? "" },
    h("span", { className: "name" }, field.name, field.required ? h("b", { className: "req", title: "required" }, " *") : "", h("span", { className: "type" }, ` ${type}`)),
    input,
    error,
  );
}

async function submitForm(): Promise<void> {
  const input: Record<string, unknown> = {};
  let bad = false;
  for (const [name, { w, read, error }] of run.widgets) {
    const parsed = parseValue(w, read());
    error.textContent = "";
    if ("error" in parsed) {
      error.textContent = `${name} ${parsed.error}`;
      bad = true;
    } else if ("value" in parsed) input[name] = parsed.value;
  }
  if (bad) return;
  await start({ input });
}

// -- the chat ----------------------------------------------------------------------------------

function chat(): HTMLElement {
  const text = h("textarea", { id: "run-message", rows: 2, placeholder: "message the agent (Enter sends, Shift+Enter: new line)", spellcheck: true });
  const send = () => {
    const message = text.value.trim();
    if (!message) return;
    const thread = run.thread && run.thread.status !== "running" ? run.thread.thread_id : undefined;
    void start({ message, ...(thread ? { thread_id: thread } : {}) }).then((ok) => {
      if (ok) text.value = "";
    });
  };
  text.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      send();
    }
  });
  return h(
    "div",
    { className: "run-chat" },
    text,
    h(
      "div",
      { className: "row" },
      h("button", { id: "run-send", className: "primary", onclick: send }, "send"),
      h("button", { id: "run-new-chat", title: "start a new thread", onclick: () => newChat() }, "new chat"),
    ),
  );
}

function newChat(): void {
  run.thread = null;
  update();
}

// -- starting and following a run --------------------------------------------------------------

async function start(body: Record<string, unknown>): Promise<boolean> {
  run.sending = true;
  update();
  try {
    const started = await call<RunThread>("POST", "/api/run", body);
    run.thread = { ...started, messages: run.thread?.thread_id === started.thread_id ? run.thread.messages : [] };
    if (started.run) watchRun(started.run);
    void refresh(true); // the run may have stopped before this answer came back (its event missed)
    return true;
  } catch (err) {
    const field = (err as { body?: Record<string, unknown> }).body?.field;
    const slot = typeof field === "string" ? run.widgets.get(field)?.error : undefined;
    if (slot) slot.textContent = (err as Error).message;
    else toast(`The run did not start: ${(err as Error).message}`, "error");
    return false;
  } finally {
    run.sending = false;
    update();
  }
}

/** The debugger opened ``thread``: an agent's chat shows that thread's messages and goes on
 * with it (unless a run of the panel's own is still going). */
export function showThread(thread: string): void {
  if (!run.form?.agent || run.thread?.thread_id === thread || run.thread?.status === "running") return;
  run.thread = { thread_id: thread, status: "", run: null, error: null, waiting: [], messages: [] };
  update();
  void refresh(false);
}

/** The file changed on disk: when its state's fields changed too, the open form is built
 * again (a form whose fields are the same keeps what was typed). */
export async function onFileChanged(): Promise<void> {
  if (!run.open || !run.form) return;
  let fresh: RunForm;
  try {
    fresh = await call<RunForm>("GET", "/api/run");
  } catch {
    return; // the file does not load right now: the form stays until it does
  }
  const shape = (f: RunForm) => JSON.stringify([f.agent, f.fields, f.defs]);
  if (shape(fresh) === shape(run.form)) return;
  run.form = fresh;
  render();
}

/** SSE ``run``: a run of this launch started or stopped. */
export function onRunEvent(data: unknown): void {
  const t = data as Partial<RunThread> | null;
  if (!t || typeof t.thread_id !== "string" || t.thread_id !== run.thread?.thread_id) return;
  void refresh(t.status !== "running");
}

async function refresh(stopped: boolean): Promise<void> {
  const id = run.thread?.thread_id;
  if (!id) return;
  let t: RunThread;
  try {
    t = await call<RunThread>("GET", T(id));
  } catch (err) {
    toast(`Could not read thread ${id}: ${(err as Error).message}`, "error");
    return;
  }
  if (run.thread?.thread_id !== id) return;
  run.thread = t;
  update();
  if (stopped && t.status !== "running" && debug.dbg.status?.enabled) {
    void debug.showRun(id);
    debug.onServerEvent("debug", { thread_id: id }); // its row in the thread list, now
  }
}

// -- the thread: status, what it waits on, messages -----------------------------------------

function threadView(): HTMLElement {
  const t = run.thread;
  if (!t) return h("div", { id: "run-thread", className: "run-thread empty" });
  return h(
    "div",
    { id: "run-thread", className: "run-thread" },
    h("div", { className: "row run-status" }, h("code", { id: "run-thread-id", title: "the run's thread (the debugger lists it)" }, t.thread_id), statusBadge(t.status)),
    t.error ? h("p", { className: "run-error", id: "run-error" }, t.error) : "",
    t.waiting[0] ? waitingCard(t.waiting[0], "run-waiting") : "",
    t.messages ? messagesView(t.messages) : "",
    !t.messages && t.state?.length ? stateView(t.state) : "",
  );
}

/** A form-started run's answer: the state it stopped with (an agent's is its messages). */
function stateView(fields: StateField[]): HTMLElement {
  const list = h("dl", { id: "run-state", className: "run-state", "aria-label": "the thread's state" });
  for (const f of fields) {
    const text = typeof f.value === "string" && !f.truncated ? JSON.stringify(f.value) : f.truncated ? String(f.value) : JSON.stringify(f.value, null, 2);
    list.append(h("dt", {}, f.name), h("dd", {}, h("pre", { className: "run-json", title: f.truncated ? "the beginning of a long value" : "" }, text)));
  }
  return h("section", { className: "run-state-box" }, h("h4", {}, "State"), list);
}

function waitingCard(w: Waiting, id: string): HTMLElement {
  const where = w.node ? ` in ${[...(w.path ?? []), w.node].join(" › ")}` : "";
  const card = h("div", { className: `run-waiting k-${w.kind.replace(/[^a-z]/g, "")}`, id });
  const p = (suffix: string) => `${id}-${suffix}`;
  if (w.kind === "approval") {
    const reason = h("input", { id: p("reason"), placeholder: "why reject? (optional: the agent is told)", "aria-label": "reason for rejecting the call", autocomplete: "off" });
    card.append(
      h("h4", {}, `Waiting for approval${where}`),
      w.tool ? h("p", {}, "tool call ", h("code", {}, String(w.tool))) : "",
      w.args !== undefined && w.args !== null ? h("pre", { className: "run-json" }, JSON.stringify(w.args, null, 2)) : "",
      h("div", { className: "row" }, h("button", { id: p("approve"), className: "primary", onclick: () => void answer(w, "approve") }, "✓ approve"), h("button", { id: p("reject"), className: "danger", onclick: () => void answer(w, "reject", reason.value) }, "✗ reject")),
      h("div", { className: "row" }, reason),
    );
  } else if (w.kind === "question") {
    const text = h("input", { id: p("answer"), placeholder: "your answer", "aria-label": "your answer", autocomplete: "off" });
    text.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") void answer(w, "answer", text.value);
    });
    card.append(
      h("h4", {}, `Asks${where}`),
      h("p", { className: "q" }, typeof w.question === "string" ? w.question : JSON.stringify(w.question)),
      h("div", { className: "row" }, text, h("button", { id: p("answer-ok"), className: "primary", onclick: () => void answer(w, "answer", text.value) }, "answer")),
    );
  } else {
    card.append(h("h4", {}, `Waiting (${w.kind})${where}`), h("p", { className: "hint" }, "open the debugger to go on from here"));
  }
  return card;
}

async function answer(w: Waiting, action: "approve" | "reject" | "answer", value?: string): Promise<void> {
  const t = run.thread;
  if (!t) return;
  const body: Record<string, unknown> = { action, interrupt_id: w.interrupt_id };
  if (value !== undefined && (action === "answer" || value.trim())) body.value = value;
  try {
    const resumed = await call<RunThread>("POST", `${T(t.thread_id)}/resume`, body);
    run.thread = { ...resumed, messages: t.messages };
    if (resumed.run) watchRun(resumed.run);
    void refresh(true);
  } catch (err) {
    toast(`Could not ${action}: ${(err as Error).message}`, "error");
    return;
  }
  update();
}

function messagesView(messages: MessageView[]): HTMLElement {
  const names = new Map<string, string>();
  for (const m of messages) for (const c of m.tool_calls) names.set(c.id, c.name);
  const list = h("ol", { id: "run-messages", className: "run-messages", "aria-label": "the thread's messages" });
  for (const m of messages) {
    const who = m.role === "tool" ? `tool · ${m.name ?? names.get(m.tool_call_id ?? "") ?? "?"}` : m.role;
    const li = h("li", { className: `msg r-${m.role.replace(/[^a-z]/g, "")}${m.is_error ? " err" : ""}` }, h("span", { className: "role" }, who));
    if (m.text) li.append(h("div", { className: "text" }, m.text));
    for (const c of m.tool_calls) li.append(h("div", { className: "call" }, "calls ", h("code", {}, c.name), h("pre", { className: "run-json" }, JSON.stringify(c.args, null, 2))));
    list.append(li);
  }
  if (!messages.length) list.append(h("li", { className: "hint" }, "no messages yet"));
  return h("section", { className: "run-messages-box" }, h("h4", {}, "Messages"), list);
}

// -- the question at its node ------------------------------------------------------------------

let askFrame = 0;

/** The canvas moved into or out of a subgraph: the pending question moves with it. */
export function refreshAsk(): void {
  showAsk();
}

/** The pending question or approval drawn next to the node that asked it (kept in place as
 * the view pans and zooms) — or, asked inside a subgraph, next to the subgraph node on the
 * canvas above it, and at the node itself once that subgraph is opened; none when the node
 * is not on the canvas. */
function showAsk(): void {
  const w = run.thread?.waiting[0];
  const ask = byId("run-ask");
  cancelAnimationFrame(askFrame);
  const at = w ? anchorAt(w.node, w.path, state.path) : null;
  const box = at ? document.querySelector(`#boxes g[data-node="${CSS.escape(at)}"]`) : null;
  if (!w || !at || !box || run.thread?.status === "running") {
    ask.hidden = true;
    ask.replaceChildren();
    return;
  }
  ask.replaceChildren(waitingCard(w, "run-ask-card"));
  ask.hidden = false;
  reveal([at]);
  const place = () => {
    const el = document.querySelector(`#boxes g[data-node="${CSS.escape(at)}"]`);
    if (!el) {
      ask.hidden = true;
      return;
    }
    const r = el.getBoundingClientRect();
    ask.style.left = `${Math.max(4, r.left)}px`;
    ask.style.top = `${r.bottom + 8}px`;
    askFrame = requestAnimationFrame(place);
  };
  place();
}

export function mountRunPanel(): void {
  byId("run-toggle").addEventListener("click", () => void toggle());
}

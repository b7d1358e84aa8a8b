// The Studio debugger: a threads panel and a checkpoint timeline on the left, the state of
// the picked checkpoint on the right, its superstep on the canvas. Shown only when the
// server says /api/debug is enabled (the Studio was started with --backend); otherwise the
// page is the canvas alone. Reads are free; every write asks for a confirmation first.
import { ApiError } from "../api";
import type { Scene } from "../layout";
import * as dapi from "./api";
import { confirmAction, confirmWith } from "./confirm";
import { doubtCard } from "./doubt";
import { markMemoryCheckpoint, memoryCard } from "./memory";
import { byId, h } from "../dom";
import { statusBadge, when } from "./dom";
import { drawMarks } from "./marks";
import { renderState, type StateView } from "./state";
import { Timeline } from "./timeline";

export { layoutTree } from "./timeline";
import { bare } from "../nested";
import type { CheckpointDetail, DebugStatus, NestedChild, RunAssistant, ThreadDetail, ThreadRow, Waiting, WriteResult } from "./types";

export interface Host {
  svg: SVGSVGElement;
  layer: SVGGElement;
  scene(): Scene | null;
  toast(msg: string, kind?: "info" | "error" | "conflict"): void;
  /** the stage changed size (a panel opened or closed): the graph stays where it is on the
   * screen; ``refit`` (the debugger's first opening, as the page loads) fits it instead */
  relayout(refit?: boolean): void;
  /** the thread of the run the live overlay watches, if the trace names one */
  liveThread(): string | null;
  /** the debugger opened ``thread``: the live overlay shows that thread's newest run */
  followThread(thread: string): void;
  /** bring these nodes into view if they are off-screen (the open checkpoint's marks) */
  reveal(nodes: string[]): void;
  /** the subgraph nodes the canvas is opened at, outermost first */
  path(): readonly string[];
  /** open the subgraph node ``node`` of the graph shown (false: the canvas cannot) */
  openSubgraph(node: string): Promise<boolean>;
  /** whether the canvas can open ``node`` (a subgraph node of a graph in this file) */
  canOpen(node: string): boolean;
  /** back out of the canvas's subgraphs until ``depth`` of them stay open */
  leaveSubgraph(depth: number): Promise<void>;
}

/** A thread the debugger left to look inside one of its subgraphs (the way back). */
interface Left {
  thread: string;
  selectedId: string | null;
}

const PAGE = 40;

export const dbg = {
  status: null as DebugStatus | null,
  open: false,
  q: "",
  threads: [] as ThreadRow[],
  cursor: null as string | null,
  listed: null as string | null, // the search the list shows (null before the first answer)
  thread: null as ThreadDetail | null,
  checkpoint: null as CheckpointDetail | null,
  selectedId: null as string | null,
  full: new Map<string, unknown>(),
  edits: new Map<string, string>(),
  editErrors: new Map<string, string>(),
  replay: null as StateView["replay"],
  replayLive: false,
  /** the node the pending edit is applied as ("": keep the checkpoint's plan) */
  asNode: "",
  busy: false,
  timings: { thread: 0, checkpoint: 0 } as Record<string, number>,
  /** the threads left on the way into the subgraph namespace shown, outermost first */
  stack: [] as Left[],
  /** inside a subgraph that has not checkpointed on the thread: why nothing shows */
  missing: null as string | null,
  /** the child thread a click on a nested state asked for (the next level opens it) */
  wanted: null as string | null,
};

let host: Host;
let timeline: Timeline;
const $ = byId;

// -- start -------------------------------------------------------------------------------------

export async function initDebug(h0: Host): Promise<void> {
  host = h0;
  let status: DebugStatus;
  try {
    status = await dapi.status();
  } catch {
    return; // an older server, or debugging off: the page stays the canvas
  }
  dbg.status = status;
  if (!status.enabled) return;
  buildPanels();
  const toggle = $("debug-toggle");
  toggle.hidden = false;
  toggle.addEventListener("click", () => setOpen(!dbg.open));
  $("pause-live").addEventListener("click", () => void pauseLive());
  setOpen(true, true);
  await loadThreads(false);
}

function setOpen(open: boolean, first = false): void {
  dbg.open = open;
  $("dbg-panel").hidden = !open;
  $("debug-toggle").classList.toggle("on", open);
  document.body.classList.toggle("dbg-left", open);
  if (!open) selectCheckpoint(null);
  host.relayout(first);
}

function buildPanels(): void {
  const search = h("input", { id: "dbg-search", type: "search", placeholder: "search thread id or run label", "aria-label": "search threads by id or run label", autocomplete: "off", spellcheck: false });
  let timer = 0;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = window.setTimeout(() => {
      dbg.q = search.value.trim();
      void loadThreads(false);
    }, 200);
  });
  const status = dbg.status!;
  const where = [status.backend, status.backend_label].filter(Boolean).join(" · ");
  const panel = h(
    "aside",
    { id: "dbg-panel", hidden: true },
    h(
      "section",
      { className: "dbg-threads" },
      h("div", { className: "dbg-head" }, h("h3", {}, "Threads"), h("span", { className: "hint", title: "the backend the Studio reads (the address stays in the server)" }, where), h("button", { className: "x", id: "dbg-refresh", title: "reload the list", "aria-label": "reload the thread list", onclick: () => void loadThreads(false) }, "↻")),
      status.graph_error ? h("p", { className: "dbg-error" }, `The graph could not be loaded, so only reading works: ${status.graph_error}`) : null,
      search,
      threadList(),
      h("button", { id: "dbg-more", hidden: true, onclick: () => void loadThreads(true) }, "more"),
    ),
    h("section", { className: "dbg-thread", id: "dbg-thread" }),
  );
  const statePanel = h("aside", { id: "dbg-state", hidden: true });
  document.body.append(panel, statePanel);
  timeline = new Timeline({
    onSelect: (id) => void openCheckpoint(id),
    onOpenThread: (id, at) => void openThread(id, at),
    head: () => dbg.thread?.head ?? null,
  });
  renderThread();
}

// -- threads -----------------------------------------------------------------------------------

/** The first page of threads (``more``: the next one). ``keep`` reloads as many as are
 * shown (a refresh after an event must not fold the pages the user opened). */
let listSeq = 0;
async function loadThreads(more: boolean, keep = false): Promise<void> {
  const q = dbg.q;
  const mine = ++listSeq;
  const limit = keep ? Math.min(200, Math.max(PAGE, dbg.threads.length)) : PAGE;
  let page;
  try {
    page = await dapi.threads(q, more ? dbg.cursor : null, limit);
  } catch (err) {
    host.toast(`Could not list the threads: ${(err as Error).message}`, "error");
    return;
  }
  if (mine !== listSeq) return; // a newer search or refresh is on its way
  dbg.threads = more ? [...dbg.threads, ...page.threads] : page.threads;
  dbg.cursor = page.next_cursor;
  dbg.listed = q;
  renderThreads();
}

/** The thread list: a listbox. One row is in the tab order (the open thread's, else the
 * first); the arrow keys, Home and End move between rows, Enter or Space opens one. */
function threadList(): HTMLUListElement {
  const list = h("ul", { id: "dbg-thread-list", role: "listbox", "aria-label": "threads" });
  list.addEventListener("keydown", (ev) => {
    const rows = [...list.querySelectorAll<HTMLElement>("li.dbg-thread-row")];
    const at = rows.indexOf(document.activeElement as HTMLElement);
    if (at < 0) return;
    const to = ev.key === "ArrowDown" ? at + 1 : ev.key === "ArrowUp" ? at - 1 : ev.key === "Home" ? 0 : ev.key === "End" ? rows.length - 1 : null;
    if (to !== null) {
      ev.preventDefault();
      focusRow(rows, Math.max(0, Math.min(rows.length - 1, to)));
    } else if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      const id = rows[at].dataset.thread;
      if (id) void openRoot(id);
    }
  });
  return list;
}

function focusRow(rows: HTMLElement[], i: number): void {
  rows.forEach((r, j) => (r.tabIndex = j === i ? 0 : -1));
  rows[i]?.focus();
}

function renderThreads(): void {
  const list = $("dbg-thread-list");
  const focused = (document.activeElement as HTMLElement | null)?.closest?.<HTMLElement>("li.dbg-thread-row")?.dataset.thread ?? null;
  list.replaceChildren();
  if (!dbg.threads.length) list.append(h("li", { className: "hint empty" }, dbg.q ? `No thread matches “${dbg.q}”.` : "No threads in this backend yet: run the graph with this backend and a thread_id."));
  const open = dbg.thread?.thread_id;
  const tabbed = dbg.threads.some((t) => t.thread_id === focused) ? focused : dbg.threads.some((t) => t.thread_id === open) ? open : dbg.threads[0]?.thread_id;
  for (const t of dbg.threads) {
    const selected = t.thread_id === open;
    const li = h(
      "li",
      {
        className: `dbg-thread-row${selected ? " selected" : ""}`,
        "data-thread": t.thread_id,
        title: t.thread_id,
        role: "option",
        "aria-selected": String(selected),
        tabIndex: t.thread_id === tabbed ? 0 : -1,
        onclick: () => void openRoot(t.thread_id),
      },
      h("span", { className: "tid" }, t.thread_id),
      t.status ? statusBadge(t.status) : h("span", {}),
      h("span", { className: "meta" }, `${t.label ? `${t.label} · ` : ""}${t.checkpoints} checkpoint${t.checkpoints === 1 ? "" : "s"}${t.updated_at ? ` · ${when(t.updated_at)}` : ""}`),
    );
    list.append(li);
    if (t.thread_id === focused) li.focus(); // a refresh keeps the keyboard where it was
  }
  $("dbg-more").hidden = !dbg.cursor;
}

// -- one thread --------------------------------------------------------------------------------

/** Bumped when a thread is opened (not by a refresh, `pick = "keep"`). An answer that comes
 * back after a later open started is dropped, and so is a refresh of a thread the user has
 * left: a slow live refresh never undoes the user's click. */
let threadOpens = 0;

export async function openThread(id: string, pick: "head" | "keep" | string = "head"): Promise<void> {
  const t0 = performance.now();
  const open = pick === "keep" ? threadOpens : ++threadOpens;
  const current = () => open === threadOpens && (pick !== "keep" || dbg.thread?.thread_id === id);
  let detail: ThreadDetail;
  try {
    detail = await dapi.thread(id);
  } catch (err) {
    if (current()) host.toast(`Could not open thread ${id}: ${(err as Error).message}`, "error");
    return;
  }
  if (!current()) return; // superseded while in flight
  const same = dbg.thread?.thread_id === id;
  dbg.thread = detail;
  dbg.missing = null;
  // a refresh leaves the overlay alone; a subgraph's namespace is its root's run
  if (pick !== "keep" && !detail.namespace?.length) host.followThread(id);
  renderThread();
  timeline.setData(detail.checkpoints, detail.forked_from ?? null);
  renderThreads();
  dbg.timings.thread = performance.now() - t0;
  const keep = pick === "keep" && same && dbg.selectedId && detail.checkpoints.some((c) => c.id === dbg.selectedId);
  const target = keep ? dbg.selectedId : pick === "head" || pick === "keep" ? detail.head : pick;
  if (target && detail.checkpoints.some((c) => c.id === target)) await openCheckpoint(target, keep ? "keep" : "reset");
  else selectCheckpoint(null);
}

/** A run of ``thread`` (the run panel's) stopped: the debugger shows it — in the namespace of
 * the subgraph the canvas has open, when it shows that thread already. */
export async function showRun(thread: string): Promise<void> {
  const open = dbg.thread;
  if (open && (open.root_thread ?? open.thread_id) === thread) await openThread(open.thread_id, "keep");
  else await openRoot(thread);
}

/** A thread picked in the list: opened at the top level, then — when the canvas shows a
 * subgraph — in that subgraph's namespace of it. */
async function openRoot(id: string): Promise<void> {
  dbg.stack = [];
  await openThread(id);
  if (host.path().length) await followPath(host.path());
}

/** The canvas opened a subgraph node (or went back out): the debugger shows the namespace
 * of the open thread that subgraph checkpoints in — the child of the open checkpoint's task
 * when it has one, else that node's latest child up to it — and going back out reopens the
 * thread left, at the checkpoint that was open. */
export async function followPath(path: readonly string[]): Promise<void> {
  if (!dbg.status?.enabled || (!dbg.thread && !dbg.stack.length)) return;
  if (path.length < dbg.stack.length) {
    const back = dbg.stack[path.length];
    dbg.stack = dbg.stack.slice(0, path.length);
    await openThread(back.thread, back.selectedId ?? "head");
    return;
  }
  for (let depth = dbg.stack.length; depth < path.length; depth++) {
    const parent = dbg.thread;
    if (!parent) return;
    const child = childFor(parent, dbg.checkpoint, path[depth]);
    dbg.stack = [...dbg.stack, { thread: parent.thread_id, selectedId: dbg.selectedId }];
    if (!child) {
      ++threadOpens; // an open still in flight must not land here
      dbg.thread = null;
      dbg.missing = `${path[depth]} has not run on ${parent.thread_id} yet: its checkpoints show here once it has.`;
      selectCheckpoint(null);
      renderThread();
      return;
    }
    await openThread(child, "head");
    if (dbg.thread?.thread_id !== child) return; // the open failed or was superseded
  }
}

/** The child thread of ``parent`` that subgraph node ``task`` checkpoints in, as seen from
 * checkpoint ``cp``: the one asked for, the one ``cp`` runs or ran, else the latest before. */
function childFor(parent: ThreadDetail, cp: CheckpointDetail | null, task: string): string | null {
  const node = bare(task);
  const wanted = dbg.wanted;
  dbg.wanted = null;
  const nested = (cp?.subgraphs ?? []).filter((c) => c.node === node);
  if (wanted && nested.some((c) => c.thread_id === wanted)) return wanted;
  const here = nested.find((c) => c.relation === "next") ?? nested.find((c) => c.relation === "ran");
  if (here) return here.thread_id;
  const all = (parent.subgraphs ?? []).filter((c) => c.node === node);
  const before = cp ? all.filter((c) => c.step <= cp.step) : all;
  return (before.at(-1) ?? all.at(-1))?.thread_id ?? null;
}

function renderThread(): void {
  const box = $("dbg-thread");
  const t = dbg.thread;
  if (!t) {
    box.replaceChildren(crumbs(null) ?? "", h("p", { className: "hint pick", id: "dbg-missing" }, dbg.missing ?? "Pick a thread to see its checkpoints."));
    return;
  }
  const readonly = !!dbg.status?.graph_error;
  const done = finished(t);
  const inner = t.namespace?.length ? `this subgraph runs inside its parent: step or run ${t.root_thread ?? "the root thread"} (an answer or an edit here goes to this subgraph)` : null;
  const act = (label: string, id: string, title: string, fn: () => void) =>
    h("button", { id, title: inner ?? done ?? (readonly ? "the graph could not be loaded, so the thread cannot run" : title), disabled: dbg.busy || readonly || !!done || !!inner, onclick: fn }, label);
  const name = t.namespace?.length ? t.namespace[t.namespace.length - 1].task : t.thread_id;
  box.replaceChildren(
    crumbs(t) ?? "",
    h("div", { className: "dbg-head" }, h("h3", { className: "tid", title: t.thread_id }, name), statusBadge(t.status)),
    h("p", { className: "hint" }, `${t.checkpoints.length} checkpoint${t.checkpoints.length === 1 ? "" : "s"}${runLabel(t) ? ` · ${runLabel(t)}` : ""}`),
    assistantLine(t),
    waitingCard(t.waiting, readonly) ?? "",
    doubtCard(t, { disabled: dbg.busy || readonly, busy: withBusy, reopen: (id, cp) => openThread(id, cp ?? "head"), toast: (m, k) => host.toast(m, k) }),
    memoryCard(t, () => dbg.selectedId),
    h(
      "div",
      { className: "row dbg-actions" },
      act("⇥ step", "dbg-step", "run one superstep of this thread, then stop", () => void doStep()),
      act("▶ run", "dbg-run", "run this thread until it ends or stops at an interrupt", () => void doRun()),
      h("span", { className: "grow" }),
      h("button", { className: "x", id: "dbg-reload-thread", title: "reload this thread", "aria-label": "reload this thread", onclick: () => void openThread(t.thread_id, "keep") }, "↻"),
    ),
    timeline.root,
  );
  timeline.select(dbg.selectedId, false);
}

/** Why ⇥ step and ▶ run have nothing to do: the thread is completed and its head plans
 * nothing (``null`` while there is something to run). */
export function finished(t: ThreadDetail): string | null {
  const head = t.checkpoints.find((c) => c.id === t.head);
  if (t.status !== "completed" || t.waiting || (head && head.next.length)) return null;
  return "the thread is completed: nothing is left to run (fork a checkpoint to run it again)";
}

/** Inside a subgraph: the way back, the root thread and each subgraph task above this one
 * (a click goes back out on the canvas too, and the debugger follows). */
function crumbs(t: ThreadDetail | null): HTMLElement | null {
  if (!dbg.stack.length) return null;
  const tasks = host.path();
  const parts: (HTMLElement | string)[] = [h("span", { className: "hint" }, "inside ")];
  dbg.stack.forEach((left, i) => {
    const label = i === 0 ? left.thread : tasks[i - 1] ?? left.thread;
    parts.push(h("button", { className: "crumb", "data-depth": String(i), title: `back to ${i === 0 ? `thread ${left.thread}` : label}`, onclick: () => void host.leaveSubgraph(i) }, label), " › ");
  });
  parts.push(h("b", { className: "crumb-here", title: t?.thread_id ?? "" }, tasks[dbg.stack.length - 1] ?? t?.namespace?.at(-1)?.task ?? "?"));
  return h("nav", { className: "dbg-crumbs", id: "dbg-crumbs", "aria-label": "subgraph namespaces" }, ...parts);
}

/** Which assistant (a versioned configuration of the graph) the thread's latest run ran
 * with, or nothing for a run of the bare graph. */
function assistantLine(t: ThreadDetail): HTMLElement | string {
  const a = t.run?.assistant as RunAssistant | null | undefined;
  if (!a || typeof a.name !== "string") return "";
  const version = typeof a.version === "number" ? ` v${a.version}` : "";
  return h(
    "p",
    { className: "hint dbg-assistant", id: "dbg-assistant", title: `the latest run ran with assistant ${a.id ?? a.name}${version}` },
    "assistant ",
    h("code", {}, a.name),
    version,
  );
}

function runLabel(t: ThreadDetail): string {
  const r = t.run;
  if (!r) return "";
  const label = r.label ?? r.run_id ?? r.id;
  return typeof label === "string" ? label : "";
}

function waitingCard(w: Waiting | null, readonly: boolean): HTMLElement | null {
  if (!w) return null;
  const card = h("div", { className: `dbg-waiting k-${String(w.kind).replace(/[^a-z]/g, "")}`, id: "dbg-waiting" });
  const where = w.node ? ` in ${[...(w.path ?? []), w.node].join(" › ")}` : "";
  const btn = (label: string, id: string, cls: string, fn: () => void) => h("button", { id, className: cls, disabled: dbg.busy || readonly, onclick: fn }, label);
  if (w.kind === "approval") {
    const reason = h("input", { id: "dbg-reject-reason", placeholder: "why reject? (optional: the agent is told)", "aria-label": "reason for rejecting the call", autocomplete: "off", disabled: dbg.busy || readonly });
    card.append(
      h("h4", {}, `Waiting for approval${where}`),
      w.tool ? h("p", {}, "tool call ", h("code", {}, String(w.tool))) : "",
      w.args !== undefined && w.args !== null ? h("pre", { className: "dbg-json" }, JSON.stringify(w.args, null, 2)) : "",
      h("div", { className: "row" }, btn("✓ approve", "dbg-approve", "primary", () => void doResume("approve")), btn("✗ reject", "dbg-reject", "danger", () => void doResume("reject", reason.value))),
      h("div", { className: "row" }, reason),
    );
  } else if (w.kind === "question") {
    const answer = h("input", { id: "dbg-answer", placeholder: "your answer", "aria-label": "your answer", autocomplete: "off" });
    card.append(
      h("h4", {}, `Asks${where}`),
      h("p", { className: "q" }, String(w.question ?? "")),
      h("div", { className: "row" }, answer, btn("answer", "dbg-answer-ok", "primary", () => void doResume("answer", answer.value))),
    );
  } else if (w.kind === "in_doubt") {
    card.append(h("h4", {}, `Waiting: an effect in doubt${where}`), h("p", { className: "hint" }, "say below whether it happened"));
  } else if (w.kind === "timer") {
    card.append(h("h4", {}, `Sleeping${where}`), h("p", {}, `wakes up at ${when(w.wake_at ?? null) || "?"}${relative(w.wake_at)}`));
  } else if (w.kind === "breakpoint") {
    const v = (w.value ?? {}) as { when?: string; nodes?: string[] };
    const at = v.when && v.nodes?.length ? ` ${v.when} ${v.nodes.join(", ")}` : where;
    card.append(h("h4", {}, `Stopped at a breakpoint${at}`), h("p", { className: "hint" }, "⇥ step runs the next superstep, ▶ run goes on to the end."));
  } else {
    card.append(h("h4", {}, `Waiting (${w.kind})${where}`), w.question ? h("p", {}, String(w.question)) : "");
  }
  const more = (w.all?.length ?? 1) - 1;
  if (more > 0) card.append(h("p", { className: "hint" }, `and ${more} more interrupt${more === 1 ? "" : "s"} after this one`));
  return card;
}

function relative(at: string | number | null | undefined): string {
  if (at === null || at === undefined) return "";
  const t = typeof at === "number" ? at * (at > 1e12 ? 1 : 1000) : Date.parse(at);
  if (Number.isNaN(t)) return "";
  const s = Math.round((t - Date.now()) / 1000);
  if (s <= 0) return " (due now)";
  return s < 90 ? ` (in ${s} s)` : s < 5400 ? ` (in ${Math.round(s / 60)} min)` : ` (in ${(s / 3600).toFixed(1)} h)`;
}

// -- one checkpoint ----------------------------------------------------------------------------

async function openCheckpoint(id: string, mode: "reset" | "keep" = "reset"): Promise<void> {
  const t = dbg.thread;
  if (!t) return;
  dbg.selectedId = id;
  timeline.select(id);
  const t0 = performance.now();
  let cp: CheckpointDetail;
  try {
    cp = await dapi.checkpoint(t.thread_id, id);
  } catch (err) {
    host.toast(`Could not read checkpoint ${id}: ${(err as Error).message}`, "error");
    return;
  }
  if (dbg.selectedId !== id || dbg.thread?.thread_id !== t.thread_id) return; // the user moved on
  if (mode === "reset" || dbg.checkpoint?.id !== id) {
    dbg.full.clear();
    dbg.edits.clear();
    dbg.editErrors.clear();
    dbg.replay = null;
  }
  dbg.checkpoint = cp;
  dbg.timings.checkpoint = performance.now() - t0;
  showState();
}

function selectCheckpoint(id: null): void {
  dbg.selectedId = id;
  dbg.checkpoint = null;
  dbg.edits.clear();
  dbg.editErrors.clear();
  dbg.replay = null;
  timeline?.select(null, false);
  showState();
}

function showState(): void {
  const panel = $("dbg-state");
  const open = !!dbg.checkpoint;
  if (panel) {
    panel.hidden = !open;
    if (open) renderStatePanel();
  }
  const was = document.body.classList.contains("dbg-right");
  document.body.classList.toggle("dbg-right", open);
  document.body.classList.toggle("dbg-pinned", open);
  repaintMarks();
  markMemoryCheckpoint(dbg.selectedId);
  if (was !== open) host.relayout();
  if (open) host.reveal(focusNodes());
}

/** The nodes the open checkpoint marks on the canvas: what ran, what runs next, the Sends'
 * targets and the nodes that failed (the view keeps them in sight). */
export function focusNodes(): string[] {
  const cp = dbg.open ? dbg.checkpoint : null;
  if (!cp) return [];
  return [...new Set([...cp.ran, ...cp.next, ...cp.sends.map((s) => s.node), ...cp.errors.map((e) => e.node ?? "")])].filter(Boolean);
}

/** The canvas's nodes (not START, END or stubs), for "apply as node". */
function graphNodes(): string[] {
  const boxes = host.scene()?.boxes;
  return boxes ? [...boxes.values()].filter((b) => b.kind === "node").map((b) => b.id) : [];
}

/** The node whose routing picked what ``cp`` runs next: one that ran in it, else the source of
 * a route (conditional, dynamic or a `route → ?` stub) leading to a next node. */
function decider(cp: CheckpointDetail): string | null {
  const scene = host.scene();
  const routed = (style: string) => style === "conditional" || style === "dynamic";
  const wires = scene?.wires ?? [];
  const into = wires.find((w) => routed(w.style) && cp.next.includes(w.to));
  const stub = wires.find((w) => scene?.boxes.get(w.to)?.kind === "stub");
  return cp.ran[0] ?? into?.from ?? stub?.from ?? null;
}

function renderStatePanel(): void {
  const t = dbg.thread;
  const cp = dbg.checkpoint;
  if (!t || !cp) return;
  const row = t.checkpoints.find((c) => c.id === cp.id) ?? null;
  const view: StateView = {
    thread: t,
    checkpoint: cp,
    row,
    full: dbg.full,
    edits: dbg.edits,
    editErrors: dbg.editErrors,
    replay: dbg.replay,
    replayLive: dbg.replayLive,
    busy: dbg.busy,
    readonly: !!dbg.status?.graph_error,
    nested: !!t.namespace?.length,
    canOpen: (node) => host.canOpen(node),
    asNode: dbg.asNode,
    nodes: graphNodes(),
    decider: decider(cp),
  };
  renderState($("dbg-state"), view, {
    close: () => selectCheckpoint(null),
    expand: (channel) => void expand(channel),
    edit: (channel, text) => {
      if (text === null) dbg.edits.delete(channel);
      else dbg.edits.set(channel, text);
      dbg.editErrors.delete(channel);
      renderStatePanel();
    },
    typed: (channel, text) => dbg.edits.set(channel, text),
    discard: () => {
      dbg.edits.clear();
      dbg.asNode = "";
      dbg.editErrors.clear();
      renderStatePanel();
    },
    fork: () => void doWrite("fork"),
    update: () => void doWrite("update"),
    asNode: (node) => {
      dbg.asNode = node;
      renderStatePanel();
    },
    replay: (node) => void doReplay(node),
    replayLive: (live) => {
      dbg.replayLive = live;
    },
    openChild: (child) => void openChild(child),
  });
}

/** "open ›" on a nested state: the canvas opens that subgraph node and the debugger that
 * very child's namespace. */
async function openChild(child: NestedChild): Promise<void> {
  dbg.wanted = child.thread_id;
  if (!(await host.openSubgraph(child.node))) {
    dbg.wanted = null;
    host.toast(`${child.node} cannot be opened on this canvas (its graph is not defined in this file).`, "error");
  }
}

async function expand(channel: string): Promise<void> {
  const t = dbg.thread;
  const cp = dbg.checkpoint;
  if (!t || !cp) return;
  try {
    const { value } = await dapi.fullValue(t.thread_id, cp.id, channel);
    if (dbg.checkpoint?.id !== cp.id) return;
    dbg.full.set(channel, value);
    renderStatePanel();
  } catch (err) {
    host.toast(`Could not read ${channel}: ${(err as Error).message}`, "error");
  }
}

// -- the canvas --------------------------------------------------------------------------------

/** Redraw the picked checkpoint's marks (after every paint of the canvas: boxes move). */
export function repaintMarks(): void {
  if (!host) return;
  drawMarks(host.svg, host.layer, host.scene(), dbg.open ? dbg.checkpoint : null);
}

/** A click on a node while a checkpoint is open picks the node to replay; ``true`` when
 * the debugger took the click (the node inspector stays closed). */
export function onNodeClick(name: string): boolean {
  if (!dbg.checkpoint || !dbg.open) return false;
  dbg.replay = { node: name, result: null, error: null, busy: false };
  renderStatePanel();
  document.querySelector("#dbg-state .dbg-replay")?.scrollIntoView({ block: "nearest" });
  return true;
}

// -- writes ------------------------------------------------------------------------------------

async function withBusy<T>(fn: () => Promise<T>): Promise<T | undefined> {
  if (dbg.busy) return undefined;
  dbg.busy = true;
  document.body.classList.add("dbg-busy");
  renderThread();
  if (dbg.checkpoint) renderStatePanel();
  try {
    return await fn();
  } finally {
    dbg.busy = false;
    document.body.classList.remove("dbg-busy");
    renderThread();
    if (dbg.checkpoint) renderStatePanel();
    void loadThreads(false, true); // statuses and checkpoint counts moved
  }
}

function failed(what: string, err: unknown): void {
  const e = err as Error;
  const kind = err instanceof ApiError && err.status === 409 ? "conflict" : "error";
  host.toast(`${what}: ${e.message}`, kind);
}

/** The edited channels as JSON values, or the first channel whose text is not JSON. */
function editedValues(): { values: Record<string, unknown> } | { channel: string; error: string } {
  const values: Record<string, unknown> = {};
  for (const [channel, text] of dbg.edits) {
    try {
      values[channel] = JSON.parse(text);
    } catch (err) {
      return { channel, error: `not JSON: ${(err as Error).message}` };
    }
  }
  return { values };
}

async function doWrite(kind: "fork" | "update"): Promise<void> {
  const t = dbg.thread;
  const cp = dbg.checkpoint;
  if (!t || !cp || !dbg.edits.size) return;
  const parsed = editedValues();
  if ("error" in parsed) {
    dbg.editErrors.set(parsed.channel, parsed.error);
    renderStatePanel();
    return;
  }
  const names = Object.keys(parsed.values);
  const asNode = dbg.asNode || null;
  const routing = asNode
    ? ` Applied as node ${asNode}: ${asNode}'s successors run next, routed on the edited values.`
    : cp.next.length
      ? ` The plan stays: ${cp.next.join(", ")} runs next whatever the edit (choose "apply as node" to route on it).`
      : "";
  const answer = await confirmWith(
    kind === "fork"
      ? {
          title: "Fork a new thread?",
          body: `A new thread starts from checkpoint ${short(cp.id)} (step ${cp.step}) of ${t.thread_id} with ${names.join(", ")} changed; it inherits the journal up to that point. ${t.thread_id} itself is not touched.${routing}`,
          detail: JSON.stringify(parsed.values, null, 2),
          ok: "fork",
          check: { label: "run the new thread on from there", checked: true },
          choice: {
            label: `side effects ${t.thread_id} ran after this point:`,
            options: [
              ["", "stop before the first one"],
              ["reuse", "reuse their results where the call is identical"],
              ["rerun", "run them again"],
            ],
          },
        }
      : {
          title: `Update ${t.thread_id} in place?`,
          body: `Saves a new checkpoint on ${t.thread_id} with ${names.join(", ")} changed (update_state); its next run continues from there.${routing}`,
          detail: JSON.stringify(parsed.values, null, 2),
          ok: "update",
          danger: true,
        },
  );
  if (!answer.ok) return;
  await withBusy(async () => {
    let res: WriteResult;
    try {
      res = kind === "fork" ? await dapi.fork(t.thread_id, cp.id, parsed.values, answer.checked, asNode, answer.choice) : await dapi.update(t.thread_id, cp.id, parsed.values, asNode);
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        const channel = typeof err.body.channel === "string" ? err.body.channel : names[0];
        dbg.editErrors.set(channel, err.message);
        return;
      }
      failed(kind === "fork" ? "Fork failed" : "Update failed", err);
      return;
    }
    dbg.edits.clear();
    dbg.asNode = "";
    if (res.error) host.toast(`The run stopped on an error: ${res.error}`, "error");
    if (kind === "fork" && res.thread_id) {
      if (!res.error) host.toast(`Forked into thread ${res.thread_id}${answer.checked ? ` (${res.status ?? "ran"})` : ""}.`);
      await openThread(res.thread_id, res.checkpoint_id ?? "head");
    } else {
      host.toast(`Updated ${t.thread_id}: new checkpoint ${short(res.checkpoint_id ?? "")}.`);
      await openThread(t.thread_id, res.checkpoint_id ?? "head");
    }
  });
}

async function doStep(): Promise<void> {
  const t = dbg.thread;
  if (!t) return;
  const ok = await confirmAction({ title: "Run one superstep?", body: `Runs the next superstep of ${t.thread_id} (its nodes' effects run for real), then stops.`, ok: "step" });
  if (!ok) return;
  await withBusy(async () => {
    try {
      const res = await dapi.step(t.thread_id);
      const ran = res.ran?.length ? `ran ${res.ran.join(", ")}` : "nothing ran";
      if (res.error) host.toast(`Step: ${ran}, and it failed: ${res.error}`, "error");
      else if (!res.ran?.length && res.checkpoint_id === t.head) host.toast(idle(res.status));
      else host.toast(`Step: ${ran}${res.next?.length ? `; next ${res.next.join(", ")}` : ""} (${res.status ?? "?"}).`);
      await openThread(t.thread_id, res.checkpoint_id ?? "head");
    } catch (err) {
      failed("Step failed", err);
    }
  });
}

async function doRun(): Promise<void> {
  const t = dbg.thread;
  if (!t) return;
  const ok = await confirmAction({ title: `Run ${t.thread_id}?`, body: "Runs the thread until it ends or stops at an interrupt (its nodes' effects run for real).", ok: "run" });
  if (!ok) return;
  await withBusy(async () => {
    try {
      const res = await dapi.run(t.thread_id);
      if (res.error) host.toast(`Run failed: ${res.error}`, "error");
      else if (!res.ran?.length && res.checkpoint_id === t.head) host.toast(idle(res.status));
      else host.toast(`Run: ${res.status ?? "done"}.`);
      await openThread(t.thread_id, res.checkpoint_id ?? "head");
    } catch (err) {
      failed("Run failed", err);
    }
  });
}

/** What a step or run that wrote no checkpoint says. */
function idle(status: string | null | undefined): string {
  return status === "completed" ? "Nothing ran: the thread is completed, there is nothing left to run." : `Nothing ran (${status ?? "?"}): no new checkpoint.`;
}

async function doResume(action: "approve" | "reject" | "answer", answer?: string): Promise<void> {
  const t = dbg.thread;
  const w = t?.waiting;
  if (!t || !w) return;
  if (action === "answer" && !answer?.trim()) {
    host.toast("Type an answer first.", "error");
    return;
  }
  const what = action === "approve" ? `Approve the call of ${w.tool ?? "the tool"}` : action === "reject" ? `Reject the call of ${w.tool ?? "the tool"}` : "Send this answer";
  const reason = action === "reject" ? answer?.trim() || "" : "";
  const ok = await confirmAction({
    title: `${what}?`,
    body: `${t.thread_id} resumes${w.node ? ` in ${w.node}` : ""} and runs on until it ends or waits again.${reason ? ` The agent is told: “${reason}”.` : ""}`,
    detail: action === "answer" ? answer : w.args !== undefined && w.args !== null ? JSON.stringify(w.args, null, 2) : undefined,
    ok: action,
    danger: action === "reject",
  });
  if (!ok) return;
  await withBusy(async () => {
    try {
      const value = action === "answer" ? answer : reason || undefined;
      const res = await dapi.resume(t.thread_id, action, w.interrupt_id ?? null, value);
      const root = t.namespace?.length ? (t.root_thread ?? t.thread_id) : t.thread_id;
      host.toast(`${action === "answer" ? "Answered" : action === "approve" ? "Approved" : "Rejected"}: ${root} is ${res.status ?? "resumed"}.`);
      // in a subgraph the answer resumed the root thread: this namespace's new head shows
      await openThread(t.thread_id, root === t.thread_id ? (res.checkpoint_id ?? "head") : "head");
    } catch (err) {
      failed("Resume failed", err);
    }
  });
}

/** Where ``node`` can be replayed from the open checkpoint: a node that ran in it replays
 * from the parent (the checkpoint that planned it, so its recorded input), a node it plans
 * next from the checkpoint itself. */
export function replayPoint(cp: CheckpointDetail, node: string): string | null {
  if (cp.ran.includes(node) && cp.parent_id) return cp.parent_id;
  if (cp.next.includes(node)) return cp.id;
  return null;
}

async function doReplay(node: string): Promise<void> {
  const t = dbg.thread;
  const cp = dbg.checkpoint;
  if (!t || !cp) return;
  const at = replayPoint(cp, node);
  if (!at) {
    dbg.replay = { node, result: null, error: `${node} neither ran in this superstep nor runs next; pick the checkpoint where it ran.`, busy: false };
    renderStatePanel();
    return;
  }
  const live = dbg.replayLive;
  if (live) {
    const ok = await confirmAction({ title: `Replay ${node} with live calls?`, body: "Its model and tool calls run for real instead of being replayed from the journal. Nothing is saved to the thread.", ok: "replay live" });
    if (!ok) return;
  }
  dbg.replay = { node, result: null, error: null, busy: true };
  renderStatePanel();
  try {
    const result = await dapi.replayNode(t.thread_id, at, node, live);
    if (dbg.replay?.node === node) dbg.replay = { node, result, error: null, busy: false };
  } catch (err) {
    if (dbg.replay?.node === node) dbg.replay = { node, result: null, error: (err as Error).message, busy: false };
  }
  if (dbg.checkpoint?.id === cp.id) renderStatePanel();
}

function short(id: string): string {
  return id.length > 14 ? `${id.slice(0, 12)}…` : id;
}

// -- live --------------------------------------------------------------------------------------

/** The live overlay's run → its thread, opened on its newest checkpoint. */
async function pauseLive(): Promise<void> {
  const thread = host.liveThread();
  if (!thread) {
    host.toast("The watched run names no thread (it ran without a thread_id and backend), so there is no checkpoint to pause on.", "error");
    return;
  }
  if (!dbg.open) setOpen(true);
  await openRoot(thread);
}

export function setLive(on: boolean): void {
  const b = document.getElementById("pause-live");
  if (b) b.hidden = !on || !dbg.status?.enabled;
}

let refreshTimer = 0;
/** SSE: a write of the debugger ("debug") or new spans ("trace") may have moved a thread. */
export function onServerEvent(kind: "debug" | "trace", data: unknown): void {
  if (!dbg.status?.enabled || !dbg.open) return;
  const thread = typeof data === "object" && data !== null ? (data as Record<string, unknown>).thread_id : undefined;
  clearTimeout(refreshTimer);
  refreshTimer = window.setTimeout(() => {
    if (dbg.busy) return; // the action that caused it reloads by itself
    void loadThreads(false, true);
    const open = dbg.thread?.thread_id;
    const root = dbg.thread?.root_thread ?? open;
    if (open && (kind === "trace" ? dbg.thread?.status === "running" || host.liveThread() === root : thread === open || thread === root)) void openThread(open, "keep");
  }, 250);
}

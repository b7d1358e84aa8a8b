// The canvas's state and the named transitions that change it. Every other module reads
// `state`, typed read-only; only the functions here write it, so each change has a name (and
// a test in test/store.test.ts). The functions take the state as an argument, which lets a
// test start from a fresh `createState()`.
import { describeEdit } from "./edit-ops";
import type { Direction, Scene } from "./layout";
import type { EditOp, EditResponse, GraphIR, GraphResponse, HoleRef, NodeClassInfo, RunSummary, RunTrace, TeamIR, XY } from "./types";

/** The pan and zoom: the scene point (0, 0) is at screen (x, y), at scale k. */
export interface View {
  readonly x: number;
  readonly y: number;
  readonly k: number;
}

/** One step of the undo history: an edit with its inverse, or a node's move. */
export type HistoryEntry =
  | { readonly kind: "edit"; readonly redo: EditOp; readonly undo: EditOp; readonly label: string }
  | { readonly kind: "move"; readonly node: string; readonly before: XY | null; readonly after: XY; readonly label: string }
  | { readonly kind: "moves"; readonly moves: readonly Move[]; readonly label: string };

/** One node's move in a group's: ``before`` null, it was not pinned. */
export interface Move {
  readonly node: string;
  readonly before: XY | null;
  readonly after: XY;
}

export interface StudioState {
  file: string;
  graph: GraphIR | null; // the last good graph
  team: TeamIR | null; // the file's agents and their handoffs (drawn when there is no graph)
  graphName: string | null;
  graphs: readonly string[];
  version: string;
  layout: Readonly<Record<string, XY>>;
  holes: readonly HoleRef[];
  fileHoles: readonly HoleRef[] | null; // the opened file's holes when it last parsed
  readOnly: boolean;
  message: string | null; // why there is no graph, as the server says it
  scene: Scene | null;
  view: View;
  userView: boolean; // the user panned or zoomed: stop fitting the graph after each change
  fitted: boolean;
  selectedWire: number | null;
  /** Delete/Backspace may delete the selected wire: the user picked it with a single click and
   * has not typed since (typing means they think a field has the focus). */
  wireArmed: boolean;
  selectedNode: string | null;
  /** groups of nodes drawn collapsed into one box each (a view choice, for this page) */
  collapsed: readonly (readonly string[])[];
  /** the nodes Shift+click gathered (two or more move together; empty: none) */
  group: readonly string[];
  /** the graphs opened on the way to this one through subgraph nodes, outermost first (the
   * breadcrumb back); empty when the graph was picked directly */
  trail: readonly string[];
  /** the subgraph nodes opened on the way here, outermost first (beside ``trail``: the
   * node, where ``trail`` has the graph it sits in); a run's trace and interrupts inside a
   * subgraph are placed by it */
  path: readonly string[];
  /** which way the ranks run (the toolbar's ↧/→ button; kept in the browser) */
  direction: Direction;
  /** the file's Node classes (GraphResponse.classes): the palette */
  classes: readonly NodeClassInfo[];
  /** the file's top-level functions (GraphResponse.functions) */
  functions: readonly string[];
  undo: readonly HistoryEntry[];
  redo: readonly HistoryEntry[];
  live: boolean;
  runs: readonly RunSummary[];
  run: string | null;
  followLatest: boolean;
  trace: RunTrace | null;
  busy: boolean;
  connected: boolean;
  paints: number;
  lastPaint: number;
  framed: number;
  timings: Readonly<Record<string, number>>;
}

export function createState(): StudioState {
  return {
    file: "",
    graph: null,
    team: null,
    graphName: null,
    graphs: [],
    version: "",
    layout: {},
    holes: [],
    fileHoles: null,
    readOnly: false,
    message: null,
    scene: null,
    view: { x: 0, y: 0, k: 1 },
    userView: false,
    fitted: false,
    selectedWire: null,
    wireArmed: false,
    collapsed: [],
    group: [],
    selectedNode: null,
    trail: [],
    path: [],
    direction: "LR",
    classes: [],
    functions: [],
    undo: [],
    redo: [],
    live: false,
    runs: [],
    run: null,
    followLatest: true,
    trace: null,
    busy: false,
    connected: false,
    paints: 0,
    lastPaint: 0,
    framed: 0,
    timings: { layout: 0, draw: 0, edit: 0 },
  };
}

/** The page's one state. Read-only here: write it through the transitions below. */
export const state: Readonly<StudioState> = createState();

// -- the file and its graph --------------------------------------------------------------------

/** Take in the server's answer for the opened file. A file that does not parse keeps the last
 * good graph (read-only) and counts the holes it had when it last parsed. Returns whether the
 * graph or its layout changed (or nothing is drawn yet): the canvas must be painted again. */
export function acceptGraph(s: StudioState, resp: GraphResponse): boolean {
  s.file = resp.file;
  s.graphs = resp.graphs ?? [];
  s.graphName = resp.selected ?? s.graphName;
  s.message = resp.message ?? null;
  const holes = resp.holes ?? [];
  const mine = (hole: HoleRef) => hole.file === resp.file;
  if (!resp.parse_error) s.fileHoles = holes.filter(mine);
  s.holes = resp.parse_error ? [...holes.filter((hole) => !mine(hole)), ...(s.fileHoles ?? [])] : holes;
  const oldGraph = s.graph;
  const oldTeam = JSON.stringify(s.team);
  if (!resp.parse_error) s.team = resp.team ?? null;
  const oldLayout = JSON.stringify(s.layout);
  s.layout = resp.layout ?? {};
  s.version = resp.version;
  if (!resp.parse_error) s.functions = resp.functions ?? [];
  if (!resp.parse_error) s.classes = resp.classes ?? [];
  if (resp.graph && !resp.parse_error) s.graph = resp.graph;
  else if (resp.graph && !s.graph) s.graph = resp.graph;
  s.readOnly = !!resp.parse_error || !!resp.stale;
  return (
    JSON.stringify(oldGraph) !== JSON.stringify(s.graph) ||
    oldLayout !== JSON.stringify(s.layout) ||
    oldTeam !== JSON.stringify(s.team) ||
    !s.scene
  );
}

/** Take in an accepted edit: the new version, the re-extracted graph, the layout if sent. */
export function acceptEdit(s: StudioState, res: EditResponse, ms: number): void {
  s.timings = { ...s.timings, edit: ms };
  s.version = res.version;
  if (res.graph) s.graph = res.graph;
  if (res.layout) s.layout = res.layout;
}

export function setLayout(s: StudioState, layout: Readonly<Record<string, XY>>): void {
  s.layout = layout;
}

/** Open another graph of the same file: its history does not apply, and the view fits it.
 * ``path``: the subgraph nodes opened to get there (none when it was picked directly). */
export function switchGraph(s: StudioState, name: string, trail: readonly string[] = [], path: readonly string[] = []): void {
  s.trail = trail;
  s.path = path;
  s.collapsed = [];
  s.group = [];
  s.graphName = name;
  s.undo = [];
  s.redo = [];
  s.fitted = false;
  s.graph = null;
}

export function setBusy(s: StudioState, busy: boolean): void {
  s.busy = busy;
}

export function setConnected(s: StudioState): void {
  s.connected = true;
}

// -- the scene and the selection ---------------------------------------------------------------

/** The scene now drawn (null: no graph); a selection that is no longer in it is dropped. */
export function showScene(s: StudioState, scene: Scene | null): void {
  s.scene = scene;
  if (!scene) return;
  if (s.selectedNode && !scene.boxes.has(s.selectedNode)) s.selectedNode = null;
  s.group = s.group.filter((n) => scene.boxes.has(n));
  if (s.selectedWire !== null && !scene.wires.some((w) => w.index === s.selectedWire)) s.selectedWire = null;
}

/** Select a node (null: none); a node and a wire are never selected together. */
export function selectNode(s: StudioState, name: string | null): void {
  s.selectedNode = name;
  if (name) {
    s.selectedWire = null;
    s.wireArmed = false;
  }
}

/** Shift+click: add ``name`` to the group, or take it out (the node selected before joins
 * the group with the first one added). */
export function toggleGroup(s: StudioState, name: string): void {
  const base = s.group.length ? s.group : s.selectedNode && s.selectedNode !== name ? [s.selectedNode] : [];
  s.group = base.includes(name) ? base.filter((n) => n !== name) : [...base, name];
  s.selectedNode = s.group.length === 1 ? s.group[0] : null;
  s.selectedWire = null;
  s.wireArmed = false;
}

/** Draw ``members`` as one box (``expand``: show them again). */
export function setCollapsed(s: StudioState, members: readonly string[], expand = false): void {
  const key = members.join("+");
  s.collapsed = expand ? s.collapsed.filter((g) => g.join("+") !== key) : [...s.collapsed, [...members]];
}

/** Forget the group (a plain click, Escape, the background). */
export function clearGroup(s: StudioState): void {
  s.group = [];
}

/** Select the wire of ``graph.edges[index]`` (null: none). Returns whether it changed.
 * ``explicit``: a single click picked it, so Delete/Backspace may delete it (a wire that came
 * under the second click of a double-click, or any other way, is only shown). */
export function selectWire(s: StudioState, index: number | null, explicit = false): boolean {
  const changed = s.selectedWire !== index;
  s.selectedWire = index;
  s.wireArmed = index !== null && explicit;
  if (index !== null) s.selectedNode = null;
  return changed;
}

/** The user typed text while nothing editable had the focus: Delete/Backspace must not then
 * delete the selected wire (they meant to edit a field). */
export function disarmWire(s: StudioState): void {
  s.wireArmed = false;
}

/** Whether Delete/Backspace deletes the selected wire now. */
export function wireDeletable(s: Readonly<StudioState>): boolean {
  return s.selectedWire !== null && s.wireArmed;
}

// -- the view ----------------------------------------------------------------------------------

export function setView(s: StudioState, view: View): void {
  s.view = view;
}

/** Whether the user has moved the view: while so, loads and edits do not fit the graph. */
export function setUserView(s: StudioState, byUser: boolean): void {
  s.userView = byUser;
}

/** Whether a paint fits the view: the graph's first paint (on load, or another graph picked)
 * always; a later one while the user has not moved the view — unless it keeps the view
 * (``keepView``: it follows a write the page itself made, and a re-fit there is a jump). */
export function fitsOnPaint(s: Readonly<StudioState>, keepView: boolean): boolean {
  return !s.fitted || (!s.userView && !keepView);
}

/** The first paint fitted the view (later ones fit only while the user has not moved it). */
export function markFitted(s: StudioState): void {
  s.fitted = true;
}

/** Count a paint and its timings (benchmarks read them). Returns the paint's number. */
export function countPaint(s: StudioState, layoutMs: number, drawnAt: number, drawStart: number): number {
  s.paints++;
  s.lastPaint = drawnAt;
  s.timings = { ...s.timings, layout: layoutMs, draw: drawnAt - drawStart };
  return s.paints;
}

/** Paint number ``n`` reached the screen at ``at`` (ignored when a later paint came first). */
export function markFramed(s: StudioState, n: number, at: number): void {
  if (n === s.paints) s.framed = at;
}

// -- undo history ------------------------------------------------------------------------------

/** Record an accepted edit. Without an inverse (e.g. a node's class stays in the code) the
 * earlier steps would no longer line up, so the history is dropped; returns false then. */
export function recordEdit(s: StudioState, op: EditOp, inverse: EditOp | null, exact?: unknown): boolean {
  if (!inverse) {
    forgetHistory(s);
    return false;
  }
  s.undo = [...s.undo, { kind: "edit", redo: bare(op), undo: withExact(inverse, exact), label: describeEdit(op) }];
  s.redo = [];
  return true;
}

/** ``op`` without the one-use parts (``exact``, ``layout``): what to send to apply it again. */
function bare(op: EditOp): EditOp {
  return { op: op.op, args: op.args };
}

/** ``op`` carrying the answer's ``exact`` (none: just the op). */
function withExact(op: EditOp, exact: unknown): EditOp {
  return exact === undefined || exact === null ? bare(op) : { ...bare(op), exact };
}

/** Several nodes moved together: one step to undo. */
export function recordMoves(s: StudioState, moves: readonly Move[]): void {
  s.undo = [...s.undo, { kind: "moves", moves, label: `move ${moves.length} nodes` }];
  s.redo = [];
}

/** A node moved from ``before`` (null: it was not pinned, the automatic layout placed it). */
export function recordMove(s: StudioState, node: string, before: XY | null, after: XY): void {
  s.undo = [...s.undo, { kind: "move", node, before, after, label: `move ${node}` }];
  s.redo = [];
}

export function forgetHistory(s: StudioState): void {
  s.undo = [];
  s.redo = [];
}

/** Take the newest step to undo off the history (undefined: nothing to undo). */
export function takeUndo(s: StudioState): HistoryEntry | undefined {
  const e = s.undo[s.undo.length - 1];
  if (e) s.undo = s.undo.slice(0, -1);
  return e;
}

export function takeRedo(s: StudioState): HistoryEntry | undefined {
  const e = s.redo[s.redo.length - 1];
  if (e) s.redo = s.redo.slice(0, -1);
  return e;
}

/** ``e`` was undone; redoing it sends the inverse the server gave for the undo (else the
 * step it had), with the undo's ``exact``, so a redo gives back the very text undone. */
export function undone(s: StudioState, e: HistoryEntry, inverse: EditOp | null, exact?: unknown): void {
  s.redo = [...s.redo, e.kind === "edit" ? { ...e, redo: withExact(inverse ?? e.redo, exact) } : e];
}

/** ``e`` was redone; undoing it again sends the inverse the server gave for the redo (else
 * the step it had), with the redo's ``exact``. */
export function redone(s: StudioState, e: HistoryEntry, inverse: EditOp | null, exact?: unknown): void {
  s.undo = [...s.undo, e.kind === "edit" ? { ...e, undo: withExact(inverse ?? e.undo, exact) } : e];
}

/** Undoing ``e`` failed: it stays the next step to undo. */
export function restoreUndo(s: StudioState, e: HistoryEntry): void {
  s.undo = [...s.undo, e];
}

/** Redoing ``e`` failed: it stays the next step to redo. */
export function restoreRedo(s: StudioState, e: HistoryEntry): void {
  s.redo = [...s.redo, e];
}

// -- the live trace overlay --------------------------------------------------------------------

export function setLive(s: StudioState, on: boolean): void {
  s.live = on;
}

/** A run's start as a number to sort by (an unparsable time sorts first). */
function startedAt(r: RunSummary): number {
  return typeof r.started === "number" ? r.started : Date.parse(String(r.started)) || 0;
}

/** Take in the traced runs, oldest first whatever order the server lists them in ("run 1"
 * stays run 1). The overlay follows the newest run unless the user picked another that is
 * still listed. */
export function setRuns(s: StudioState, runs: readonly RunSummary[]): void {
  s.runs = [...runs].sort((a, b) => startedAt(a) - startedAt(b));
  const latest = s.runs[s.runs.length - 1]?.run ?? null;
  if (s.followLatest || !s.runs.some((r) => r.run === s.run)) s.run = latest;
}

/** The user picked ``run`` in the run picker ("": none); picking the newest follows new runs. */
export function pickRun(s: StudioState, run: string): void {
  s.run = run || null;
  s.followLatest = run === s.runs[s.runs.length - 1]?.run;
}

/** A run was started from the page: the overlay follows the newest run, which it is about to
 * be (its first spans are on their way). */
export function followNewest(s: StudioState): void {
  s.followLatest = true;
}

/** The debugger opened ``thread``: while live, the overlay shows that thread's newest traced
 * run. Returns whether the run changed. */
export function followThread(s: StudioState, thread: string): boolean {
  const run = [...s.runs].reverse().find((r) => r.thread_id === thread);
  if (!s.live || !run || run.run === s.run) return false;
  s.run = run.run;
  s.followLatest = run === s.runs[s.runs.length - 1];
  return true;
}

/** The thread of the run the overlay shows, if the trace names one. */
export function liveThread(s: Readonly<StudioState>): string | null {
  return s.runs.find((r) => r.run === s.run)?.thread_id ?? null;
}

export function setTrace(s: StudioState, trace: RunTrace | null): void {
  s.trace = trace;
}

/** Lay the graph out left to right or top to bottom. */
export function setDirection(s: StudioState, direction: Direction): void {
  s.direction = direction;
}

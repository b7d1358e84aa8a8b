// A thread's checkpoints as a parent tree, newest on top, forks as side lanes. Virtualised:
// only the rows in view (plus a margin) are in the DOM, so 2,000 checkpoints stay cheap.
// The runtime forks into new threads: a checkpoint with forks gets a stub out of the tree
// and a chip per fork thread, and a forked thread ends in a row naming where it came from.
import type { CheckpointRow, ForkedFrom } from "./types";

export const ROW_PX = 26;
const LANE_PX = 13;
const MARGIN_ROWS = 8;
/** Fork chips on one row; the rest are counted in a "+N" chip (its tooltip names them). */
const MAX_FORK_CHIPS = 2;
/** Lanes drawn at most; branches past them share the last lane (a thread with dozens of
 * concurrent branches stays readable; the tags still name every fork). */
export const MAX_LANES = 6;
const LANE_COLORS = ["#6741d9", "#1971c2", "#e8590c", "#2f9e44", "#c2255c", "#0c8599"];
const SVG_NS = "http://www.w3.org/2000/svg";

export interface Laid {
  rows: CheckpointRow[]; // newest first
  index: Map<string, number>;
  lane: number[];
  parent: number[]; // row index of the parent, or -1
  lanes: number;
  forks: Set<string>; // ids whose parent has more than one child
}

/** Lanes for the tree: the head branch (or, without one, the first child) continues its
 * parent's lane; every other branch takes the lowest lane free over its span of rows. */
export function layoutTree(oldestFirst: CheckpointRow[]): Laid {
  const rows = [...oldestFirst].reverse();
  const n = rows.length;
  const index = new Map<string, number>();
  rows.forEach((r, i) => index.set(r.id, i));
  const parent = rows.map((r) => (r.parent_id !== null && index.has(r.parent_id) ? index.get(r.parent_id)! : -1));
  const children = new Map<number, number[]>();
  for (let i = n - 1; i >= 0; i--) {
    const p = parent[i];
    if (p >= 0) (children.get(p) ?? children.set(p, []).get(p)!).push(i);
  }
  const forks = new Set<string>();
  for (const kids of children.values()) if (kids.length > 1) for (const k of kids) forks.add(rows[k].id);
  // the child that continues a branch: the one on the head branch, else the oldest
  const cont = new Map<number, number>();
  for (const [p, kids] of children) cont.set(p, kids.find((k) => rows[k].on_head_branch) ?? kids[0]);
  // branches: chains that follow `cont`, each starting at a root or at a non-continuing child
  const branchOf = new Array<number>(n).fill(-1);
  const spans: { top: number; bottom: number; head: boolean; members: number[] }[] = [];
  for (let i = n - 1; i >= 0; i--) {
    if (branchOf[i] >= 0) continue;
    const members: number[] = [];
    let cur: number | undefined = i;
    while (cur !== undefined && branchOf[cur] < 0) {
      branchOf[cur] = spans.length;
      members.push(cur);
      cur = cont.get(cur);
    }
    const bottom = parent[i] >= 0 ? parent[i] : i; // from the fork point (older = lower)
    const top = members[members.length - 1];
    spans.push({ top, bottom, head: members.some((m) => rows[m].on_head_branch), members });
  }
  const order = spans.map((_, i) => i).sort((a, b) => Number(spans[b].head) - Number(spans[a].head) || spans[b].bottom - spans[a].bottom);
  const laneTop: number[] = []; // per lane: the topmost (smallest) row index in use
  const lane = new Array<number>(n).fill(0);
  for (const b of order) {
    const s = spans[b];
    let l = 0;
    while (l < laneTop.length && laneTop[l] <= s.bottom) l++;
    laneTop[l] = s.top;
    for (const m of s.members) lane[m] = Math.min(l, MAX_LANES - 1);
  }
  return { rows, index, lane, parent, lanes: Math.max(1, Math.min(MAX_LANES, laneTop.length)), forks };
}

/** What a row says: the nodes that ran, else how the checkpoint came to be. An edit
 * (``update_state``) says so even on a thread that waits: it carries the interrupts on. */
export function rowText(r: CheckpointRow): string {
  if (r.ran.length) return r.ran.join(", ");
  if (r.error) return "failed";
  if (r.source === "update") return "state edited";
  if (r.interrupted) return "waiting";
  switch (r.source) {
    case "input":
      return "input";
    case "fork":
      return "forked here";
    case "update":
      return "state edited";
    default:
      return r.parent_id === null ? "input" : "(no node ran)";
  }
}

export interface TimelineOpts {
  onSelect(id: string): void;
  /** open another thread (a fork, or the thread this one was forked from) at a checkpoint */
  onOpenThread(threadId: string, checkpointId: string | "head"): void;
  head(): string | null;
}

export class Timeline {
  readonly root: HTMLDivElement;
  private spacer: HTMLDivElement;
  private win: HTMLDivElement;
  private laid: Laid = layoutTree([]);
  private origin: ForkedFrom | null = null;
  private selected: string | null = null;
  private drawn = "";
  rendered = 0; // rows in the DOM (tests read it)

  constructor(private opts: TimelineOpts) {
    this.root = document.createElement("div");
    this.root.className = "tl";
    this.root.tabIndex = 0;
    this.root.setAttribute("aria-label", "checkpoints, newest first (arrow keys move between them)");
    this.spacer = document.createElement("div");
    this.spacer.className = "tl-spacer";
    this.win = document.createElement("div");
    this.win.className = "tl-win";
    this.spacer.append(this.win);
    this.root.append(this.spacer);
    this.root.addEventListener("scroll", () => this.render());
    this.root.addEventListener("click", (ev) => {
      const jump = (ev.target as Element).closest<HTMLElement>("[data-thread]");
      if (jump?.dataset.thread) {
        this.opts.onOpenThread(jump.dataset.thread, jump.dataset.checkpoint ?? "head");
        return;
      }
      const row = (ev.target as Element).closest<HTMLElement>(".tl-row");
      if (row?.dataset.id) this.opts.onSelect(row.dataset.id);
    });
    this.root.addEventListener("keydown", (ev) => {
      if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp") return;
      ev.preventDefault();
      const at = this.selected !== null ? this.laid.index.get(this.selected) ?? -1 : -1;
      const next = Math.max(0, Math.min(this.laid.rows.length - 1, at + (ev.key === "ArrowDown" ? 1 : -1)));
      const row = this.laid.rows[next];
      if (row) this.opts.onSelect(row.id);
    });
    new ResizeObserver(() => this.render(true)).observe(this.root);
  }

  get laidOut(): Laid {
    return this.laid;
  }

  /** ``origin``: the checkpoint of another thread this one was forked from (a last row). */
  setData(oldestFirst: CheckpointRow[], origin: ForkedFrom | null = null): void {
    this.laid = layoutTree(oldestFirst);
    this.origin = origin;
    this.spacer.style.height = `${(this.laid.rows.length + (origin ? 1 : 0)) * ROW_PX}px`;
    this.render(true);
  }

  select(id: string | null, scroll = true): void {
    this.selected = id;
    if (id !== null && scroll) {
      const i = this.laid.index.get(id);
      if (i !== undefined) {
        const top = i * ROW_PX;
        const h = this.root.clientHeight;
        if (top < this.root.scrollTop || top + ROW_PX > this.root.scrollTop + h) this.root.scrollTop = Math.max(0, top - h / 3);
      }
    }
    this.render(true);
  }

  private render(force = false): void {
    const { rows, lane, parent, lanes, forks } = this.laid;
    const origin = this.origin;
    const n = rows.length;
    const h = this.root.clientHeight || 400;
    const first = Math.max(0, Math.floor(this.root.scrollTop / ROW_PX) - MARGIN_ROWS);
    const lastAll = Math.min(n - (origin ? 0 : 1), Math.ceil((this.root.scrollTop + h) / ROW_PX) + MARGIN_ROWS);
    const last = Math.min(n - 1, lastAll); // checkpoint rows; `lastAll` may add the origin row
    const key = `${first}:${lastAll}:${n}:${this.selected}`;
    if (!force && key === this.drawn) return;
    this.drawn = key;
    // one more column when a branch leaves the thread: the stubs out to the fork threads
    const branching = rows.some((r) => r.forks?.length);
    const outX = lanes * LANE_PX + 9;
    const gutter = lanes * LANE_PX + 10 + (branching ? LANE_PX : 0);
    const laneX = (l: number) => 9 + l * LANE_PX;
    const rowY = (i: number) => (i - first) * ROW_PX + ROW_PX / 2;
    this.win.style.top = `${first * ROW_PX}px`;
    this.win.style.setProperty("--gutter", `${gutter}px`);
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "tl-tree");
    svg.setAttribute("width", String(gutter));
    svg.setAttribute("height", String(Math.max(0, lastAll - first + 1) * ROW_PX));
    const line = (d: string, color: string, cls: string) => {
      const path = document.createElementNS(SVG_NS, "path");
      path.setAttribute("d", d);
      path.setAttribute("stroke", color);
      path.setAttribute("class", cls);
      svg.append(path);
    };
    // edges that touch the window: a child at or above its bottom, a parent at or below its top
    for (let c = 0; c <= last; c++) {
      const p = parent[c];
      if (p < first || p < 0) continue;
      const x1 = laneX(lane[c]);
      const x2 = laneX(lane[p]);
      const y1 = rowY(c);
      const y2 = rowY(p);
      const path = document.createElementNS(SVG_NS, "path");
      const d = x1 === x2 ? `M ${x1} ${y1} L ${x2} ${y2}` : `M ${x1} ${y1} L ${x1} ${y2 - ROW_PX * 0.6} Q ${x1} ${y2} ${x2 + Math.sign(x1 - x2) * 5} ${y2}`;
      path.setAttribute("d", d);
      path.setAttribute("stroke", LANE_COLORS[lane[c] % LANE_COLORS.length]);
      path.setAttribute("class", "tl-edge");
      svg.append(path);
    }
    const frag = document.createDocumentFragment();
    frag.append(svg);
    const head = this.opts.head();
    for (let i = first; i <= last; i++) {
      const r = rows[i];
      const dot = document.createElementNS(SVG_NS, "circle");
      dot.setAttribute("cx", String(laneX(lane[i])));
      dot.setAttribute("cy", String(rowY(i)));
      dot.setAttribute("r", r.id === this.selected ? "5.5" : "4");
      dot.setAttribute("class", `tl-dot${r.error ? " err" : ""}`);
      dot.setAttribute("stroke", LANE_COLORS[lane[i] % LANE_COLORS.length]);
      svg.append(dot);
      const row = document.createElement("div");
      row.className = `tl-row${r.id === this.selected ? " selected" : ""}${r.error ? " err" : ""}`;
      row.dataset.id = r.id;
      row.style.top = `${(i - first) * ROW_PX}px`;
      row.title = `${r.id}${r.created_at ? `\n${r.created_at}` : ""}${r.next.length ? `\nnext: ${r.next.join(", ")}` : ""}${r.error ? `\nerror: ${r.error}` : ""}`;
      const step = document.createElement("span");
      step.className = "tl-step";
      step.textContent = String(r.step);
      const what = document.createElement("span");
      what.className = "tl-ran";
      what.textContent = rowText(r);
      if (!r.ran.length) what.classList.add("quiet");
      row.append(step, what);
      const tag = (text: string, cls: string) => {
        const t = document.createElement("span");
        t.className = `tl-tag ${cls}`;
        t.textContent = text;
        row.append(t);
      };
      if (r.error) tag("error", "err");
      if (forks.has(r.id) && parent[i] >= 0 && lane[i] !== lane[parent[i]]) tag("fork", "fork");
      if (r.id === head) tag("head", "head");
      if (r.forks?.length) {
        // a stub out of the tree, up towards the newer rows, ending in an open dot
        const x = laneX(lane[i]);
        const y = rowY(i);
        line(`M ${x + 4} ${y} L ${outX - 5} ${y} Q ${outX} ${y} ${outX} ${y - 5} L ${outX} ${y - 9}`, "#1971c2", "tl-edge tl-branch");
        const end = document.createElementNS(SVG_NS, "circle");
        end.setAttribute("cx", String(outX));
        end.setAttribute("cy", String(y - 10));
        end.setAttribute("r", "2.6");
        end.setAttribute("class", "tl-dot tl-branch-end");
        end.setAttribute("stroke", "#1971c2");
        svg.append(end);
        for (const f of r.forks.slice(0, MAX_FORK_CHIPS)) {
          const chip = document.createElement("button");
          chip.className = "tl-fork";
          chip.dataset.thread = f.thread_id;
          chip.dataset.checkpoint = "head";
          chip.title = `forked into thread ${f.thread_id}: open it`;
          chip.textContent = `↗ ${f.thread_id}`;
          row.append(chip);
        }
        const more = r.forks.slice(MAX_FORK_CHIPS);
        if (more.length) {
          const chip = document.createElement("span");
          chip.className = "tl-tag fork";
          chip.textContent = `+${more.length}`;
          chip.title = `also forked into: ${more.map((f) => f.thread_id).join(", ")}`;
          row.append(chip);
        }
      }
      frag.append(row);
    }
    if (origin && lastAll === n && n > 0) {
      // the thread's first checkpoint hangs off a checkpoint of another thread
      const y = rowY(n);
      const x = laneX(lane[n - 1]);
      line(`M ${x} ${rowY(n - 1)} L ${x} ${y}`, "#868e96", "tl-edge tl-origin-edge");
      const stub = document.createElementNS(SVG_NS, "circle");
      stub.setAttribute("cx", String(x));
      stub.setAttribute("cy", String(y));
      stub.setAttribute("r", "3.5");
      stub.setAttribute("class", "tl-dot tl-branch-end");
      stub.setAttribute("stroke", "#868e96");
      svg.append(stub);
      const row = document.createElement("div");
      row.className = "tl-origin";
      row.style.top = `${(n - first) * ROW_PX}px`;
      row.dataset.thread = origin.thread_id;
      row.dataset.checkpoint = origin.step === null ? "head" : origin.checkpoint_id;
      const at = origin.step === null ? " (that checkpoint is gone)" : ` @ step ${origin.step}`;
      row.title = `forked from thread ${origin.thread_id}, checkpoint ${origin.checkpoint_id}: open it there`;
      const text = document.createElement("span");
      text.className = "tl-ran";
      text.textContent = `↓ forked from ${origin.thread_id}${at}`;
      row.append(text);
      frag.append(row);
    }
    this.win.replaceChildren(frag);
    this.rendered = Math.max(0, last - first + 1);
  }
}

// Small helpers of the debugger's panels: JSON text, a line diff, a status badge, a time.
import { h } from "../dom";

/** ``value`` as the JSON a user reads and edits (two-space indent). */
export function jsonText(value: unknown): string {
  if (value === undefined) return "undefined";
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

export function oneLine(value: unknown, max = 80): string {
  let s: string;
  try {
    s = typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
  } catch {
    s = String(value);
  }
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

export type DiffLine = { op: " " | "-" | "+"; text: string };

/** A line diff of two texts (longest common subsequence); ``null`` when either is too long
 * to diff quickly, and the caller shows both values instead. */
export function lineDiff(before: string, after: string, maxLines = 400): DiffLine[] | null {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length > maxLines || b.length > maxLines) return null;
  const n = a.length;
  const m = b.length;
  const lcs: Uint16Array[] = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      out.push({ op: " ", text: a[i] });
      i++;
      j++;
    } else if (i < n && (j >= m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push({ op: "-", text: a[i++] });
    } else {
      out.push({ op: "+", text: b[j++] });
    }
  }
  return out;
}

/** A ``<pre>`` of the diff, unchanged runs longer than 6 lines folded to their ends. */
export function diffView(lines: DiffLine[]): HTMLPreElement {
  const pre = h("pre", { className: "dbg-json diff" });
  let run: DiffLine[] = [];
  const flush = (last: boolean) => {
    const keep = 2;
    if (run.length > 2 * keep + 2) {
      const head = pre.childNodes.length ? run.slice(0, keep) : [];
      const tail = last ? [] : run.slice(-keep);
      for (const l of head) pre.append(h("span", { className: "ctx" }, `  ${l.text}\n`));
      pre.append(h("span", { className: "fold" }, `  … ${run.length - head.length - tail.length} unchanged lines\n`));
      for (const l of tail) pre.append(h("span", { className: "ctx" }, `  ${l.text}\n`));
    } else {
      for (const l of run) pre.append(h("span", { className: "ctx" }, `  ${l.text}\n`));
    }
    run = [];
  };
  for (const l of lines) {
    if (l.op === " ") {
      run.push(l);
      continue;
    }
    flush(false);
    pre.append(h("span", { className: l.op === "+" ? "add" : "del" }, `${l.op} ${l.text}\n`));
  }
  flush(true);
  return pre;
}

export function statusBadge(status: string | null | undefined): HTMLSpanElement {
  const s = status ?? "unknown";
  return h("span", { className: `dbg-status s-${s.replace(/[^a-z]/g, "")}`, title: `status: ${s}` }, s);
}

export function when(iso: string | number | null | undefined): string {
  if (iso === null || iso === undefined || iso === "") return "";
  const t = typeof iso === "number" ? new Date(iso * (iso > 1e12 ? 1 : 1000)) : new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  const today = new Date();
  const same = t.toDateString() === today.toDateString();
  return same ? t.toLocaleTimeString([], { hour12: false }) : `${t.toLocaleDateString()} ${t.toLocaleTimeString([], { hour12: false })}`;
}

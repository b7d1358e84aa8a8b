// Badges on a node for what its `add(...)` call configures: retry, timeout, cache (read-only),
// defer, static breakpoints. They sit on the box's top edge, left of the
// "needs code" tag, and move with the box.
import { el } from "./draw";
import { textWidth, type Box } from "./layout";
import type { GraphIR, NodeIR } from "./types";

const UI = "system-ui, sans-serif";
const PX = 11.5;

interface Badge {
  text: string;
  title: string;
}

function clip(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

export function nodeBadges(node: NodeIR): Badge[] {
  const out: Badge[] = [];
  if (node.retry) out.push({ text: `↻ ${clip(node.retry, 14)}`, title: `retry=${node.retry}` });
  if (node.timeout) out.push({ text: `◷ ${clip(node.timeout, 10)}`, title: `timeout=${node.timeout}` });
  if (node.cache) out.push({ text: `cached ${clip(policyArgs(node.cache), 16)}`, title: `cache=${node.cache}: an input seen within the TTL reuses the node's writes` });
  if (node.defer) out.push({ text: "deferred", title: "defer=True: runs once nothing else is left to run" });
  if (node.interrupt_before) out.push({ text: "‖ before", title: "a static breakpoint: runs stop before this node (interrupt_before)" });
  if (node.interrupt_after) out.push({ text: "‖ after", title: "a static breakpoint: runs stop after this node (interrupt_after)" });
  return out;
}

/** ``CachePolicy(ttl=60)`` → ``ttl=60``: the policy's arguments, for the badge. */
function policyArgs(policy: string): string {
  const m = /^[\w.]*CachePolicy\((.*)\)$/s.exec(policy.trim());
  return m ? m[1] : policy;
}

/** Copy the graph's breakpoint lists onto its nodes, so each box knows its own. */
export function markBreakpoints(graph: GraphIR): void {
  const before = new Set(graph.interrupt_before ?? []);
  const after = new Set(graph.interrupt_after ?? []);
  for (const node of graph.nodes) {
    node.interrupt_before = before.has(node.name);
    node.interrupt_after = after.has(node.name);
  }
}

/** Append ``box``'s badges to its group ``g`` (drawn by drawBox). */
export function drawBadges(box: Box, g: SVGGElement): void {
  const node = box.node;
  if (!node) return;
  const badges = nodeBadges(node);
  if (!badges.length) return;
  let right = box.w - (node.has_hole ? 100 : node.subgraph ? 82 : 10);
  const row = el("g", { class: "node-badges" }, g);
  for (const b of badges) {
    const w = textWidth(b.text, PX, UI) + 12;
    right -= w;
    if (right < 8) break; // no room left on this box: the rest stay in the title of the last
    const bg = el("g", { class: "node-badge", transform: `translate(${right},-10)` }, row);
    el("rect", { x: 0, y: 0, width: w, height: 19, rx: 5, fill: "#ffffff", stroke: "#868e96", "stroke-width": 1.2 }, bg);
    const t = el("text", { x: w / 2, y: 13.5, "text-anchor": "middle", "font-size": PX, "font-family": UI, fill: "#495057" }, bg);
    t.textContent = b.text;
    el("title", {}, bg).textContent = b.title;
    right -= 5;
  }
}

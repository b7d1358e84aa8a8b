// The hole tooltip: a node that still needs code shows what it needs on hover.
import { baseName } from "./captions";
import { byId } from "./dom";
import { state } from "./store";

/** Show the tooltip for the hole under the pointer, or hide it when there is none. */
export function hoverHole(ev: PointerEvent): void {
  const g = (ev.target as Element).closest?.("g.box.hole");
  const tip = byId("tooltip");
  if (!g) {
    tip.hidden = true;
    return;
  }
  const node = state.graph?.nodes.find((n) => n.name === g.getAttribute("data-id"));
  if (!node) return;
  tip.innerHTML = "";
  const b = document.createElement("b");
  b.textContent = "needs code";
  tip.append(b, document.createTextNode(`: ${node.hole ?? "(no description)"}`));
  if (node.line) {
    const s = document.createElement("div");
    s.className = "hint";
    s.textContent = `${baseName(state.file)}:${node.line}`;
    tip.append(s);
  }
  // under the box, so it never hides the node's own ports
  const r = (g.firstElementChild ?? g).getBoundingClientRect();
  tip.style.left = `${Math.max(4, Math.min(r.left, innerWidth - 370))}px`;
  tip.style.top = `${r.bottom + 8 > innerHeight - 60 ? r.top - 60 : r.bottom + 8}px`;
  tip.hidden = false;
}

export function hideTooltip(): void {
  byId("tooltip").hidden = true;
}

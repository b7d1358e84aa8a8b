// The holes list: every node across the project that still needs code, opened from the
// toolbar's badge.
import { holeNodes, holesHeading } from "./captions";
import { byId, h } from "./dom";
import { state } from "./store";

export function holesOpen(): boolean {
  return !byId("holes-list").hidden;
}

export function renderHoles(): void {
  const list = byId("holes-list");
  list.replaceChildren(h("h3", {}, holesHeading(state.holes.length)));
  if (!state.holes.length) list.append(h("p", { className: "hint" }, "Every node has code."));
  const table = h("table", {}, h("tr", {}, h("th", {}, "file"), h("th", {}, "node"), h("th", {}, "message"), h("th", {}, "line")));
  for (const hole of state.holes) {
    const names = holeNodes(hole, state.file, state.graph);
    const node = names.length && names.join() !== hole.node ? h("td", { title: `class ${hole.node}` }, names.join(", "), h("span", { className: "hint" }, ` (class ${hole.node})`)) : h("td", {}, hole.node);
    table.append(h("tr", { className: "hole-row" }, h("td", {}, hole.file), node, h("td", {}, hole.message ?? ""), h("td", {}, hole.line === null ? "" : String(hole.line))));
  }
  list.append(table);
}

export function showHoles(open: boolean): void {
  const list = byId("holes-list");
  list.hidden = !open;
  byId("holes-badge").setAttribute("aria-expanded", String(open));
  if (open) renderHoles();
}

export function mountHolesList(): void {
  byId("holes-badge").addEventListener("click", () => showHoles(!holesOpen()));
}

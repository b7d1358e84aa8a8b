// The inspector: the side panel for the selected node (rename, ports, delete, its last traced
// spans) or the selected wire (what it is, delete). Opening or closing it resizes the stage.
import { deleteEdgeLabel, edgeHint, edgeTitle } from "./captions";
import * as api from "./api";
import { byId, h } from "./dom";
import { formatCost, formatMs } from "./draw";
import { fillSection, showsFill } from "./fill";
import { isPortName, removeEdgeOp } from "./edit-ops";
import { perform } from "./edits";
import { toast } from "./notices";
import { selectNode } from "./selection";
import { applyView } from "./stage";
import { setCollapsed, state } from "./store";
import { paint } from "./paint";
import type { EdgeIR, NodeIR } from "./types";
import { canOpen, openSubgraph } from "./subgraphs";
import { relabelRow, wiringSection } from "./wiring";

/** Render the panel for the selection. Opening or closing it narrows or widens the stage on
 * the right only, so the view stays exactly where it is: a second click of a double-click
 * must land on what the first one did (a re-fit here once moved a wire under it). */
export function renderInspector(): void {
  renderBody();
  const open = !byId("inspector").hidden;
  if (document.body.classList.contains("inspecting") !== open) {
    document.body.classList.toggle("inspecting", open);
    applyView();
  }
}

function renderBody(): void {
  const box = byId("inspector");
  const g = state.graph;
  box.replaceChildren();
  if (state.selectedWire !== null && g) {
    const e = g.edges[state.selectedWire];
    if (!e) return void (box.hidden = true);
    box.hidden = false;
    box.append(...wirePanel(e));
    return;
  }
  if (state.group.length >= 2) {
    box.hidden = false;
    box.append(
      h("h3", {}, `${state.group.length} nodes`),
      h("p", { className: "hint", id: "group-hint" }, `${state.group.join(", ")} — drag one of them to move them together; Shift+click adds or removes a node, a click elsewhere lets go.`),
      h("button", { id: "collapse-group", onclick: () => collapseGroup([...state.group]) }, "collapse into one box"),
    );
    return;
  }
  const node = g?.nodes.find((n) => n.name === state.selectedNode);
  if (!node) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  box.append(...nodePanel(node));
}

/** Draw the gathered nodes as one box (the view only; its *expand* tag shows them again). */
function collapseGroup(members: string[]): void {
  setCollapsed(state, members);
  selectNode(null);
  paint();
}

function wirePanel(e: EdgeIR): HTMLElement[] {
  return [
    h("h3", {}, edgeTitle(e)),
    h("p", { className: "hint" }, edgeHint(e)),
    ...[relabelRow(e)].filter((x): x is HTMLElement => x !== null),
    h("button", { className: "danger", id: "delete-edge", disabled: state.readOnly, onclick: () => void perform(removeEdgeOp(e)) }, deleteEdgeLabel(e)),
  ];
}

function nodePanel(node: NodeIR): HTMLElement[] {
  const out: HTMLElement[] = [
    h("h3", {}, node.name),
    h("p", { className: "hint" }, `class ${node.cls}${node.line ? ` · line ${node.line}` : ""}`),
    editorRow(node),
  ];
  if (node.has_hole) out.push(h("p", { className: "hole-msg" }, h("b", {}, "needs code: "), node.hole ?? "(no description)"));
  if (node.subgraph) {
    out.push(
      canOpen(node)
        ? h("button", { id: "open-subgraph", className: "primary", onclick: () => void openSubgraph(node) }, `open ${node.subgraph} ›`)
        : node.subgraph_error
          ? h("p", { className: "hint subgraph-error" }, `runs ${node.subgraph}, which the canvas cannot read: ${node.subgraph_error}`)
          : h("p", { className: "hint" }, `runs the graph ${node.subgraph}, defined outside this file`),
    );
    if (node.subgraph_file) out.push(h("p", { className: "hint" }, `defined in ${node.subgraph_file}`));
    out.push(destinationsRow(node));
    if (node.child && !canOpen(node)) {
      const cycle = node.child.edges.map((e) => `${e.source} → ${e.target}`).join(", ");
      out.push(h("p", { className: "hint subgraph-child" }, `its graph: ${node.child.nodes.map((n) => n.name).join(", ")} (${cycle})`));
    }
  }
  if (showsFill(node)) out.push(fillSection(node));
  out.push(renameRow(node), deferRow(node));
  out.push(h("h4", { className: "in" }, "In"), portList(node, "in", node.inputs), h("h4", { className: "out" }, "Out"), portList(node, "out", node.outputs));
  if (node.has_hole && !state.readOnly) out.push(addPortRow(node));
  else if (!node.has_hole) out.push(h("p", { className: "hint" }, "Ports of a node with code change in the code (its In/Out classes)."));
  if (!state.readOnly) out.push(wiringSection(node));
  out.push(h("button", { className: "danger", id: "delete-node", disabled: state.readOnly, onclick: () => void perform({ op: "remove_node", args: { name: node.name } }) }, "delete node and its wiring"));
  const spans = spansTable(node);
  if (spans) out.push(...spans);
  return out;
}

/** Open the node's class in an editor: the server's $EDITOR, or a vscode:// link. */
function editorRow(node: NodeIR): HTMLElement {
  const line = node.line ?? 1;
  const open = h("button", {
    id: "open-editor",
    title: "open the class in the editor the Studio was started with ($VISUAL or $EDITOR)",
    onclick: () => {
      api.openNode(node.name, state.graphName).then(
        (r) => toast(`Opened ${node.cls} (line ${r.line}) in your editor.`, "info", 3000),
        (err) => toast((err as Error).message, "error", 9000),
      );
    },
  }, "open in editor");
  const link = h("a", { id: "editor-link", href: `vscode://file/${encodeURI(state.file)}:${line}`, title: `${state.file}:${line}` }, "vscode://");
  return h("div", { className: "row editor-row" }, open, link);
}

/** ``add(child, destinations=(...))``: where a node inside the subgraph may send this graph
 * with ``Command(graph=Command.PARENT, goto=...)`` — one checkbox per node of this graph and
 * END; each tick rewrites the tuple (drawn as the node's goto wires). */
function destinationsRow(node: NodeIR): HTMLElement {
  const g = state.graph;
  const chosen = node.destinations ?? [];
  const names = [...(g?.nodes ?? []).map((n) => n.name).filter((n) => n !== node.name), "__end__"];
  const boxes = names.map((name) => {
    const box = h("input", { type: "checkbox", checked: chosen.includes(name), disabled: state.readOnly, "data-destination": name });
    box.addEventListener("change", () => {
      const next = names.filter((n) => (n === name ? box.checked : chosen.includes(n)));
      void perform({ op: "set_destinations", args: { node: node.name, destinations: next.length ? next : null } });
    });
    return h("label", { className: "destination" }, box, ` ${name === "__end__" ? "END" : name}`);
  });
  return h(
    "div",
    { id: "destinations", className: "destinations", title: "add(..., destinations=(...)): where Command(graph=Command.PARENT, goto=...) from inside may send this graph" },
    h("h4", {}, "hands back to"),
    ...boxes,
  );
}

/** ``add(..., defer=True)``: the node waits until nothing else is left to run. */
function deferRow(node: NodeIR): HTMLElement {
  const box = h("input", { id: "defer-toggle", type: "checkbox", checked: !!node.defer, disabled: state.readOnly });
  box.addEventListener("change", () => void perform({ op: "set_defer", args: { node: node.name, defer: box.checked } }));
  const label = h("label", { className: "row defer-row", title: "defer=True: run once, after every branch that could still reach this node" }, box, " deferred: runs last, once");
  return label;
}

function renameRow(node: NodeIR): HTMLElement {
  const rename = h("input", { id: "rename-input", value: node.name, disabled: state.readOnly, autocomplete: "off", "aria-label": `new name for ${node.name}` });
  const doRename = () => {
    const next = rename.value.trim();
    if (!next || next === node.name) return;
    void perform({ op: "rename_node", args: { old: node.name, new: next } }).then((ok) => {
      if (ok) return selectNode(next);
      // refused: the field shows the node's real name again (the note says why)
      const input = document.getElementById("rename-input") as HTMLInputElement | null;
      if (input && state.selectedNode === node.name) input.value = node.name;
    });
  };
  rename.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") doRename();
    if (ev.key === "Escape") rename.value = node.name;
  });
  return h("div", { className: "row" }, rename, h("button", { id: "rename-ok", disabled: state.readOnly, onclick: doRename }, "rename"));
}

/** A node's ports on one side; a node that still needs code has a remove button on each. */
function portList(node: NodeIR, side: "in" | "out", ports: NodeIR["inputs"]): HTMLUListElement {
  const ul = h("ul", { className: `ports ${side}` });
  for (const p of ports) {
    const li = h("li", {}, `${p.name}: ${p.type}`);
    if (node.has_hole && !state.readOnly) {
      li.append(h("button", { className: "x", title: `remove port ${p.name}`, "aria-label": `remove port ${p.name}`, "data-remove-port": `${side}:${p.name}`, onclick: () => void perform({ op: "remove_port", args: { node: node.name, side, name: p.name } }) }, "×"));
    }
    ul.append(li);
  }
  return ul;
}

function addPortRow(node: NodeIR): HTMLElement {
  const side = h("select", { id: "port-side", "aria-label": "side of the new port" }, h("option", { value: "in" }, "In"), h("option", { value: "out" }, "Out"));
  const pname = h("input", { id: "port-name", placeholder: "name", size: 8, "aria-label": "name of the new port" });
  const ptype = h("input", { id: "port-type", placeholder: "type", size: 8, value: "str", "aria-label": "type of the new port" });
  const add = h("button", {
    id: "port-add",
    onclick: () => {
      const n = pname.value.trim();
      if (!isPortName(n)) return toast("A port name is a Python identifier, e.g. summary.", "error");
      void perform({ op: "add_port", args: { node: node.name, side: side.value, name: n, type: ptype.value.trim() || "str" } });
    },
  }, "+ port");
  return h("div", { className: "row add-port" }, side, pname, ptype, add);
}

/** The node's last traced spans while live is on (null: no trace for it). */
function spansTable(node: NodeIR): HTMLElement[] | null {
  const t = state.live ? state.trace?.nodes[node.name] : undefined;
  if (!t) return null;
  const table = h("table", { className: "spans" }, h("tr", {}, h("th", {}, "span"), h("th", {}, "duration"), h("th", {}, "tokens"), h("th", {}, "cost")));
  for (const s of t.last) {
    table.append(h("tr", { className: s.error ? "err" : "" }, h("td", {}, `${s.name}${s.kind ? ` (${s.kind})` : ""}`), h("td", {}, formatMs(s.duration_ms)), h("td", {}, String(s.tokens ?? 0)), h("td", {}, formatCost(s.cost))));
    if (s.error) table.append(h("tr", { className: "err" }, h("td", { colSpan: 4 }, `error: ${s.error}`)));
  }
  return [h("h4", {}, `last spans · ${t.status}`), table];
}

// The node panel's "wiring" section: the kinds of wiring a drag cannot say — a route with its
// label and routing function, a loop, a fan-out through a function that returns Sends, a
// wait-for-all join — and the label field of a selected route. Each is one edit the server
// writes in the file's own style; a function is picked from the ones the file defines (the
// page names code, it never sends any).
import { h } from "./dom";
import { mappedRoute, suggestLabel } from "./edit-ops";
import { perform } from "./edits";
import { displayName } from "./layout";
import { toast } from "./notices";
import { state } from "./store";
import { END, type EdgeIR, type EditOp, type NodeIR } from "./types";

export type WiringKind = "route" | "loop" | "fanout" | "join";

let kind: WiringKind = "route";

const KINDS: [WiringKind, string][] = [
  ["route", "route to a node, by label"],
  ["loop", "loop until a condition"],
  ["fanout", "fan out (Send) via a function"],
  ["join", "join: wait for all, then run"],
];

function options(names: readonly string[], selected?: string): HTMLOptionElement[] {
  return names.map((n) => h("option", { value: n, selected: n === selected }, displayName(n)));
}

function fnSelect(): HTMLSelectElement | HTMLElement {
  if (!state.functions.length) {
    return h("p", { className: "hint", id: "wire-no-fn" }, "The file defines no function yet: write one in your editor (it takes the state and returns a label, a bool or Sends), then pick it here.");
  }
  return h("select", { id: "wire-fn", "aria-label": "the function (defined in the file)" }, ...options(state.functions));
}

/** The section for ``node``: pick a kind, fill its fields, add. */
export function wiringSection(node: NodeIR): HTMLElement {
  const names = state.graph?.nodes.map((n) => n.name) ?? [];
  const others = names.filter((n) => n !== node.name);
  const box = h("div", { className: "wiring", id: "wiring" });
  const pick = h("select", { id: "wire-kind", "aria-label": "kind of wiring to add" }, ...KINDS.map(([k, label]) => h("option", { value: k, selected: k === kind }, label)));
  pick.addEventListener("change", () => {
    kind = pick.value as WiringKind;
    box.replaceWith(wiringSection(node));
  });
  box.append(h("h4", {}, "wiring"), h("div", { className: "row" }, pick));
  const route = mappedRoute(state.graph, node.name);
  const fields: HTMLElement[] = [];
  let op: () => EditOp | string;
  if (kind === "route") {
    const target = h("select", { id: "wire-target", "aria-label": "route target" }, ...options([...names, END]));
    const label = h("input", { id: "wire-label", placeholder: "label", size: 8, "aria-label": "route label (what the routing function returns)", autocomplete: "off", spellcheck: false });
    label.value = suggestLabel(state.graph, node.name, target.value);
    target.addEventListener("change", () => (label.value = suggestLabel(state.graph, node.name, target.value)));
    const fn = route ? h("span", { className: "hint" }, `via ${route.path} (its routing call)`) : fnSelect();
    fields.push(h("div", { className: "row" }, "to", target), h("div", { className: "row" }, "when", label), h("div", { className: "row" }, route ? null : "via", fn));
    op = () => {
      const args: Record<string, unknown> = { source: node.name, target: target.value, label: label.value.trim() };
      if (!route) args.path = (fn as HTMLSelectElement).value;
      return { op: "add_route", args };
    };
  } else if (kind === "loop") {
    const fn = fnSelect();
    const exit = h("select", { id: "wire-target", "aria-label": "where the loop exits to" }, ...options([END, ...others]));
    fields.push(h("div", { className: "row" }, "until", fn), h("div", { className: "row" }, "then", exit));
    op = () => ({ op: "add_loop", args: { node: node.name, until: (fn as HTMLSelectElement).value, exit: exit.value } });
  } else if (kind === "fanout") {
    const fn = fnSelect();
    fields.push(h("div", { className: "row" }, "via", fn), h("p", { className: "hint" }, "The function returns node names or Send(node, payload) for each item; the canvas draws the targets its code names."));
    op = () => ({ op: "add_fanout", args: { source: node.name, path: (fn as HTMLSelectElement).value } });
  } else {
    const also = h("select", { id: "wire-with", multiple: true, size: Math.min(5, Math.max(2, others.length)), "aria-label": "the other nodes the join waits for" }, ...options(others));
    const target = h("select", { id: "wire-target", "aria-label": "the node that runs after all of them" }, ...options(others));
    fields.push(h("div", { className: "row" }, "and", also), h("div", { className: "row" }, "then run", target));
    op = () => {
      const chosen = [...also.selectedOptions].map((o) => o.value);
      if (!chosen.length) return "Pick the other nodes the join waits for (Ctrl-click for several).";
      return { op: "add_join", args: { sources: [node.name, ...chosen], target: target.value } };
    };
  }
  const needsFn = (kind !== "route" || !route) && kind !== "join" && !state.functions.length;
  const add = h("button", {
    id: "wire-add",
    disabled: state.readOnly || needsFn,
    onclick: () => {
      const made = op();
      if (typeof made === "string") return toast(made, "error");
      void perform(made);
    },
  }, "add");
  box.append(...fields, h("div", { className: "row" }, add));
  return box;
}

/** The label field of a selected route (a key of its routing call's mapping). */
export function relabelRow(e: EdgeIR): HTMLElement | null {
  if (e.kind !== "conditional" || e.branch === "loop" || e.label === null || !e.source) return null;
  const input = h("input", { id: "route-relabel", value: e.label, disabled: state.readOnly, autocomplete: "off", spellcheck: false, "aria-label": "the route's label" });
  const go = () => {
    const next = input.value.trim();
    if (!next || next === e.label) return;
    void perform({ op: "relabel_route", args: { source: e.source, label: e.label, new: next } });
  };
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") go();
    if (ev.key === "Escape") input.value = e.label ?? "";
  });
  return h("div", { className: "row" }, "label", input, h("button", { id: "route-relabel-ok", disabled: state.readOnly, onclick: go }, "relabel"));
}

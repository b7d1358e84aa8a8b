// The confirmation every write of the debugger goes through: a modal that says what will
// change, in which thread, and waits for an explicit yes. Safe by default: it opens with the
// focus on cancel, so Enter (or Escape) cancels until the user moves to the action.
import { h } from "../dom";

let dialog: HTMLDialogElement | null = null;

export interface Confirm {
  title: string;
  body: string;
  detail?: string;
  ok: string;
  danger?: boolean;
  /** a checkbox in the dialog (its state comes back with the answer) */
  check?: { label: string; checked: boolean };
  /** a choice among options ([value, label]), the first one preselected */
  choice?: { label: string; options: [string, string][] };
}

export async function confirmAction(c: Confirm): Promise<boolean> {
  return (await confirmWith(c)).ok;
}

export function confirmWith(c: Confirm): Promise<{ ok: boolean; checked: boolean; choice: string }> {
  if (!dialog) {
    dialog = h("dialog", { id: "dbg-confirm" });
    document.body.append(dialog);
  }
  const d = dialog;
  const ok = h("button", { value: "ok", id: "dbg-confirm-ok", className: c.danger ? "danger" : "primary" }, c.ok);
  const cancel = h("button", { value: "cancel", id: "dbg-confirm-cancel", formNoValidate: true }, "cancel");
  const box = c.check ? h("input", { type: "checkbox", id: "dbg-confirm-check", checked: c.check.checked }) : null;
  const pick = c.choice
    ? h("select", { id: "dbg-confirm-choice" }, ...c.choice.options.map(([value, label]) => new Option(label, value)))
    : null;
  d.replaceChildren(
    h(
      "form",
      { method: "dialog" },
      h("h3", {}, c.title),
      h("p", { className: "dbg-confirm-body" }, c.body),
      c.detail ? h("pre", { className: "dbg-json" }, c.detail) : null,
      box && c.check ? h("label", { className: "check" }, box, ` ${c.check.label}`) : null,
      pick && c.choice ? h("label", { className: "choice" }, `${c.choice.label} `, pick) : null,
      h("div", { className: "row" }, cancel, ok),
    ),
  );
  d.returnValue = "";
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve({ ok: d.returnValue === "ok", checked: !!box?.checked, choice: pick?.value ?? "" }), { once: true });
    d.showModal();
    cancel.focus();
  });
}

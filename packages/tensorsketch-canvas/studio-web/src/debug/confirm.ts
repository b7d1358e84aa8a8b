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
}

export async function confirmAction(c: Confirm): Promise<boolean> {
  return (await confirmWith(c)).ok;
}

export function confirmWith(c: Confirm): Promise<{ ok: boolean; checked: boolean }> {
  if (!dialog) {
    dialog = h("dialog", { id: "dbg-confirm" });
    document.body.append(dialog);
  }
  const d = dialog;
  const ok = h("button", { value: "ok", id: "dbg-confirm-ok", className: c.danger ? "danger" : "primary" }, c.ok);
  const cancel = h("button", { value: "cancel", id: "dbg-confirm-cancel", formNoValidate: true }, "cancel");
  const box = c.check ? h("input", { type: "checkbox", id: "dbg-confirm-check", checked: c.check.checked }) : null;
  d.replaceChildren(
    h(
      "form",
      { method: "dialog" },
      h("h3", {}, c.title),
      h("p", { className: "dbg-confirm-body" }, c.body),
      c.detail ? h("pre", { className: "dbg-json" }, c.detail) : null,
      box && c.check ? h("label", { className: "check" }, box, ` ${c.check.label}`) : null,
      h("div", { className: "row" }, cancel, ok),
    ),
  );
  d.returnValue = "";
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve({ ok: d.returnValue === "ok", checked: !!box?.checked }), { once: true });
    d.showModal();
    cancel.focus();
  });
}

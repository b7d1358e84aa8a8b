// The "+ node" dialog: a name and its ports; the new node lands, unwired, where the user is
// looking.
import { byId, h } from "./dom";
import { parsePorts } from "./edit-ops";
import { addNode, perform } from "./edits";
import { toast } from "./notices";
import { currentSize } from "./stage";
import { state } from "./store";
import { dropPoint, freeSpot } from "./view";

async function submit(): Promise<void> {
  const name = byId<HTMLInputElement>("new-name").value.trim();
  const inputs = parsePorts(byId<HTMLTextAreaElement>("new-inputs").value);
  const outputs = parsePorts(byId<HTMLTextAreaElement>("new-outputs").value);
  if (typeof inputs === "string" || typeof outputs === "string") {
    toast((typeof inputs === "string" ? inputs : outputs) as string, "error");
    return;
  }
  if (state.graph?.nodes.some((n) => n.name === name)) {
    toast(`There is already a node called ${name}; pick another name.`, "error");
    return;
  }
  const at = freeSpot(state.scene?.boxes.values() ?? [], dropPoint(state.view, currentSize()));
  await addNode(name, inputs, outputs, at);
}

/** A name for a new node of class ``cls``: the class name, or with a number while taken. */
function freeName(cls: string): string {
  const taken = new Set(state.graph?.nodes.map((n) => n.name) ?? []);
  let name = cls;
  for (let n = 2; taken.has(name); n++) name = `${cls}${n}`;
  return name;
}

/** The palette: the file's node classes whose name holds the search, each a button that
 * places a node of that class (unwired, where the user is looking). */
function renderPalette(): void {
  const q = byId<HTMLInputElement>("palette-search").value.trim().toLowerCase();
  const list = byId("palette-list");
  const shown = state.classes.filter((c) => c.name.toLowerCase().includes(q));
  list.replaceChildren(
    ...shown.map((c) => {
      const ports = `${c.inputs.map((p) => p.name).join(", ") || "—"} → ${c.outputs.map((p) => p.name).join(", ") || "—"}`;
      const button = h("button", { type: "button", className: "palette-item", "data-cls": c.name, onclick: () => void place(c.name) }, c.name, h("span", { className: "hint" }, ports));
      return h("li", {}, button);
    }),
  );
  if (!shown.length) list.append(h("li", { className: "hint" }, state.classes.length ? "no class matches" : "this file defines no Node class yet"));
}

async function place(cls: string): Promise<void> {
  byId<HTMLDialogElement>("node-dialog").close("cancel");
  const name = freeName(cls);
  const at = freeSpot(state.scene?.boxes.values() ?? [], dropPoint(state.view, currentSize()));
  await perform({ op: "place_node", args: { cls, name }, layout: { [name]: at } });
}

export function mountNodeDialog(): void {
  const dialog = byId<HTMLDialogElement>("node-dialog");
  byId("add-node").addEventListener("click", () => {
    byId<HTMLFormElement>("node-form").reset();
    renderPalette();
    dialog.showModal();
    byId("new-name").focus();
  });
  byId("palette-search").addEventListener("input", renderPalette);
  byId("palette-search").addEventListener("keydown", (ev) => {
    // Enter places the first match rather than submitting the new-node form
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    const first = document.querySelector<HTMLButtonElement>("#palette-list .palette-item");
    if (first?.dataset.cls) void place(first.dataset.cls);
  });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    await submit();
  });
}

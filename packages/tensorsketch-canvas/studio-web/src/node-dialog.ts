// The "+ node" dialog: a name and its ports; the new node lands, unwired, where the user is
// looking.
import { byId } from "./dom";
import { parsePorts } from "./edit-ops";
import { addNode } from "./edits";
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

export function mountNodeDialog(): void {
  const dialog = byId<HTMLDialogElement>("node-dialog");
  byId("add-node").addEventListener("click", () => {
    byId<HTMLFormElement>("node-form").reset();
    dialog.showModal();
    byId("new-name").focus();
  });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    await submit();
  });
}

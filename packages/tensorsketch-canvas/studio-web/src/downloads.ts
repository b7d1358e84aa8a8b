// The export buttons: the graph as Mermaid text (in a dialog, with a download link), and what
// the canvas shows as an SVG or PNG download.
import * as api from "./api";
import { byId } from "./dom";
import { exportPng, exportSvg } from "./export";
import { toast } from "./notices";
import { stage } from "./stage";
import { state } from "./store";

function download(name: string, blob: Blob): void {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 5000);
}

/** The downloads' file name: the graph's name, safe in any file system. */
function baseFileName(): string {
  return (state.graphName || "graph").replace(/[^A-Za-z0-9_.-]/g, "_");
}

async function showMermaid(): Promise<void> {
  try {
    const text = await api.exportText("mermaid");
    byId<HTMLTextAreaElement>("export-text").value = text;
    const a = byId<HTMLAnchorElement>("export-download");
    a.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
    a.download = `${baseFileName()}.mmd`;
    const area = byId<HTMLTextAreaElement>("export-text");
    byId<HTMLDialogElement>("export-dialog").showModal();
    // from its first line: the caret (at the end after setting the value) would scroll it down
    area.setSelectionRange(0, 0);
    area.scrollTop = 0;
  } catch (err) {
    toast(`Export failed: ${(err as Error).message}`, "error");
  }
}

export function mountDownloads(): void {
  const { svg, viewport } = stage();
  byId("export-mermaid").addEventListener("click", () => void showMermaid());
  byId("export-svg").addEventListener("click", async () => {
    download(`${baseFileName()}.svg`, new Blob([await exportSvg(svg, viewport)], { type: "image/svg+xml" }));
  });
  byId("export-png").addEventListener("click", async () => {
    download(`${baseFileName()}.png`, await exportPng(svg, viewport));
  });
}

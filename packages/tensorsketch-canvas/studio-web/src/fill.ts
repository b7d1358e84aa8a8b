// The "Fill" action on a hole node: pick the model among what the server offers, start the
// fill (it runs on the server, its checks in subprocesses), follow its progress, and show the
// verdict: written (the canvas reloads and the node has code) or kept as an "unverified" draft
// with the checks that failed.
import * as api from "./api";
import { h } from "./dom";
import { holeOf, isUnverified } from "./hole-status";
import { toast } from "./notices";
import { state } from "./store";
import { reload } from "./sync";
import { paint } from "./paint";
import type { NodeIR } from "./types";

interface Choice {
  provider: string;
  model: string | null;
  configured: boolean;
}

export interface FillJob {
  file: string;
  node: string;
  status: "running" | "written" | "draft" | "error" | string;
  provider?: string;
  model?: string | null;
  stage?: string;
  attempt?: number;
  started_at?: number;
  attempts?: number;
  failures?: string[];
  error?: string;
  cost_usd?: number | null;
  tokens?: number;
}

interface FillView {
  enabled: boolean;
  choices: Choice[];
  attempts: number | null;
  fills: FillJob[];
}

let view: FillView | null = null;
let polling = 0;
/** The provider and model picked last (kept across repaints of the panel). */
const picked = { provider: "", model: "" };

function unverified(node: NodeIR): boolean {
  return isUnverified(node, state.holes, state.file);
}

/** Whether the inspector shows the fill section for ``node``: a hole, or a node filled in
 * this launch (its verdict stays shown). */
export function showsFill(node: NodeIR): boolean {
  return node.has_hole || !!jobOf(node);
}

function jobOf(node: NodeIR): FillJob | undefined {
  return view?.fills.find((job) => job.node === node.cls && job.file === state.file);
}

/** What the job is doing now, in words. */
export function progressText(job: FillJob, now = Date.now() / 1000): string {
  const secs = job.started_at ? Math.max(0, Math.round(now - job.started_at)) : 0;
  const step: Record<string, string> = { starting: "starting", Ask: "asking the model", Check: "checking the body (parse, mypy, contract tests)", Write: "writing the body", Keep: "keeping the draft" };
  const attempt = job.attempt ? ` · attempt ${job.attempt}${view?.attempts ? ` of ${view.attempts}` : ""}` : "";
  return `${step[job.stage ?? ""] ?? job.stage ?? "running"}${attempt} · ${secs} s`;
}

async function refresh(): Promise<void> {
  try {
    view = await api.call<FillView>("GET", "/api/holes/fill");
  } catch {
    view = null;
  }
}

/** The section the inspector shows for a hole node (filled in once the server answers). */
export function fillSection(node: NodeIR): HTMLElement {
  const box = h("div", { className: "fill", id: "fill-section" });
  if (view === null) void refresh().then(() => renderFill(box, node));
  else renderFill(box, node);
  return box;
}

function renderFill(box: HTMLElement, node: NodeIR): void {
  box.replaceChildren(h("h4", {}, "Fill with a model"));
  const done = jobOf(node);
  if (!node.has_hole && done) return void box.append(verdict(done));
  if (!view) return void box.append(h("p", { className: "hint" }, "The fill action is not available."));
  if (!view.enabled) {
    box.append(h("p", { className: "hint" }, "Filling is off: start the Studio with --fill-provider NAME --fill-model MODEL."));
    return;
  }
  const job = jobOf(node);
  const running = job?.status === "running";
  if (!picked.provider || !view.choices.some((c) => c.provider === picked.provider)) picked.provider = view.choices[0]?.provider ?? "";
  const provider = h("select", { id: "fill-provider", "aria-label": "provider", disabled: running }, ...view.choices.map((c) => new Option(c.configured ? `${c.provider} (configured)` : c.provider, c.provider)));
  provider.value = picked.provider;
  const chosen = () => view?.choices.find((c) => c.provider === provider.value);
  const model = h("input", { id: "fill-model", "aria-label": "model", placeholder: chosen()?.model ?? "model", value: picked.model, disabled: running, autocomplete: "off" });
  provider.addEventListener("change", () => {
    picked.provider = provider.value;
    model.placeholder = chosen()?.model ?? "model";
  });
  model.addEventListener("input", () => (picked.model = model.value));
  const go = h("button", { id: "fill-node", className: "primary", disabled: running || state.readOnly, onclick: () => void start(node, provider.value, model.value.trim()) }, running ? "filling…" : "Fill");
  box.append(h("div", { className: "row" }, provider, model), h("div", { className: "row" }, go));
  if (job) box.append(verdict(job));
  else if (unverified(node)) box.append(draftView(node));
}

/** A draft left by an earlier fill (this launch's or the CLI's): what its checks said. */
function draftView(node: NodeIR): HTMLElement {
  const failures = holeOf(state.holes, state.file, node.cls)?.draft?.failures ?? [];
  const out = h("div", { className: "fill-verdict draft", id: "fill-verdict", "data-status": "draft" });
  out.append(h("p", {}, h("b", {}, "unverified"), " — a draft beside the file did not pass its checks; fill again to retry."));
  const list = h("ol", { className: "fill-failures" });
  for (const failure of failures) list.append(h("li", {}, h("pre", {}, failure)));
  if (failures.length) out.append(list);
  return out;
}

function verdict(job: FillJob): HTMLElement {
  const out = h("div", { className: `fill-verdict ${job.status}`, id: "fill-verdict", "data-status": job.status });
  const by = job.provider ? ` by ${job.provider}${job.model ? ` (${job.model})` : ""}` : "";
  const cost = job.cost_usd ? ` · $${job.cost_usd.toFixed(4)}` : "";
  if (job.status === "running") out.append(h("p", { id: "fill-progress" }, `filling${by}: ${progressText(job)}`));
  else if (job.status === "written") out.append(h("p", {}, h("b", {}, "verified and written"), ` after ${job.attempts ?? "?"} attempt(s)${cost}.`));
  else if (job.status === "draft") {
    out.append(h("p", {}, h("b", {}, "unverified"), ` — kept as a draft after ${job.attempts ?? "?"} attempt(s)${cost}; the file is unchanged. What failed:`));
    const list = h("ol", { className: "fill-failures" });
    for (const failure of job.failures ?? []) list.append(h("li", {}, h("pre", {}, failure)));
    out.append(list);
  } else out.append(h("p", {}, h("b", {}, "the fill failed: "), job.error ?? job.status));
  return out;
}

async function start(node: NodeIR, provider: string, model: string): Promise<void> {
  const body: Record<string, unknown> = { node: node.cls, file: state.file, provider };
  if (model) body.model = model;
  try {
    const job = await api.call<FillJob>("POST", "/api/holes/fill", body);
    view?.fills.splice(0, view.fills.length, ...view.fills.filter((j) => !(j.node === job.node && j.file === job.file)), job);
  } catch (err) {
    toast(`Cannot fill ${node.name}: ${(err as Error).message}`, "error", 9000);
    return;
  }
  rerender(node);
  follow(node);
}

/** Poll the fill until it ends, repainting its progress; then show the verdict. */
function follow(node: NodeIR): void {
  window.clearInterval(polling);
  polling = window.setInterval(async () => {
    await refresh();
    const job = view?.fills.find((j) => j.node === node.cls && j.file === state.file);
    if (!job || job.status !== "running") {
      window.clearInterval(polling);
      if (job?.status === "written") toast(`${node.name} is filled: the body passed every check and is in the file.`, "info");
      else if (job?.status === "draft") toast(`${node.name}: no body passed the checks; the draft is kept, unverified.`, "conflict", 9000);
      await reload({ quiet: true, keepView: true }); // the node loses its hole...
      paint({ keepView: true }); // ...or its tag says "unverified" (the file did not change)
    }
    rerender(node);
  }, 700);
}

/** Draw the section again for the node as the graph has it now (a written fill reloaded it:
 * the node is no longer a hole). */
function rerender(node: NodeIR): void {
  const box = document.getElementById("fill-section");
  const now = state.graph?.nodes.find((n) => n.name === node.name);
  if (box && now && state.selectedNode === now.name) renderFill(box, now);
}

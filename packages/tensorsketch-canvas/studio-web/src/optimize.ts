// The "Optimize" action: improve an agent's prompt against its eval suite. The server runs
// `tensorsketch optimize`'s search in a subprocess; the panel follows its rounds, shows the
// scores before and after (held-out, with 95% intervals), what changed in the instructions and
// examples, and the file's diff, and writes it only when the user confirms.
import * as api from "./api";
import { confirmAction } from "./debug/confirm";
import { byId, h } from "./dom";
import { toast } from "./notices";
import { reload } from "./sync";

interface Choice {
  provider: string;
  model: string | null;
  configured: boolean;
}

interface PromptView {
  instructions: string;
  examples: { input: string; output: string }[];
}

interface Round {
  round: number;
  train: { passed: number; total: number; rate: number };
  holdout: { passed: number; total: number; rate: number } | null;
  accepted: boolean;
  note: string;
}

export interface OptimizeJob {
  id: string;
  agent: string;
  suite: string;
  provider: string;
  model: string | null;
  max_rounds: number;
  status: "running" | "done" | "error" | string;
  rounds: Round[];
  error?: string;
  written?: boolean;
  result?: {
    before: string;
    after: string;
    before_train: string;
    after_train: string;
    improved: boolean;
    stopped: string;
    spent_usd: number;
    initial: PromptView;
    best: PromptView;
    diff: string;
  };
}

interface OptimizeView {
  file: string;
  agents: string[];
  suites: string[];
  choices: Choice[];
  max_rounds: number;
  jobs: OptimizeJob[];
}

let view: OptimizeView | null = null;
let current: string | null = null;
let polling = 0;

export function optimizeOpen(): boolean {
  return !byId("optimize-panel").hidden;
}

async function refresh(): Promise<void> {
  try {
    view = await api.call<OptimizeView>("GET", "/api/optimize");
  } catch (err) {
    view = null;
    toast(`Cannot list agents to optimize: ${(err as Error).message}`, "error");
  }
}

function render(): void {
  const panel = byId("optimize-panel");
  panel.replaceChildren(h("h3", {}, "Optimize an agent"));
  if (!view) return;
  const job = view.jobs.find((j) => j.id === current) ?? null;
  const running = job?.status === "running";
  if (!view.agents.length || !view.suites.length) {
    panel.append(
      h("p", { className: "hint", id: "optimize-missing" }, !view.agents.length ? "This file has no agent with a system= prompt to optimize." : "The project has no eval suite (a file that builds a tensorsketch.eval Suite)."),
    );
    return;
  }
  const select = (id: string, label: string, options: [string, string][]) => h("label", {}, label, h("select", { id, disabled: running }, ...options.map(([v, t]) => new Option(t, v))));
  const agent = select("optimize-agent", "agent ", view.agents.map((a) => [a, a]));
  const suite = select("optimize-suite", "suite ", view.suites.map((s) => [s, s]));
  const provider = select("optimize-provider", "proposer ", view.choices.map((c) => [c.provider, c.configured ? `${c.provider} (configured)` : c.provider]));
  const model = h("input", { id: "optimize-model", placeholder: "model (for a registered provider)", autocomplete: "off", disabled: running });
  const rounds = h("input", { id: "optimize-rounds", type: "number", min: "1", max: "50", value: String(view.max_rounds), disabled: running });
  const go = h("button", { id: "optimize-run", className: "primary", disabled: running, onclick: () => void start(agent, suite, provider, model.value.trim(), Number(rounds.value)) }, running ? "optimizing…" : "Optimize");
  panel.append(h("div", { className: "opt-form" }, agent, suite, provider, h("label", {}, "model ", model), h("label", {}, "rounds ", rounds), go));
  if (job) panel.append(jobView(job));
}

function value(label: HTMLElement): string {
  return (label.querySelector("select") as HTMLSelectElement).value;
}

async function start(agent: HTMLElement, suite: HTMLElement, provider: HTMLElement, model: string, rounds: number): Promise<void> {
  const body: Record<string, unknown> = { agent: value(agent), suite: value(suite), provider: value(provider), max_rounds: rounds };
  if (model) body.model = model;
  try {
    const job = await api.call<OptimizeJob>("POST", "/api/optimize", body);
    current = job.id;
    view?.jobs.push(job);
  } catch (err) {
    toast(`Cannot optimize: ${(err as Error).message}`, "error", 9000);
    return;
  }
  render();
  follow();
}

function follow(): void {
  window.clearInterval(polling);
  polling = window.setInterval(async () => {
    await refresh();
    const job = view?.jobs.find((j) => j.id === current);
    if (!job || job.status !== "running") window.clearInterval(polling);
    if (optimizeOpen()) render();
  }, 700);
}

function pct(x: { passed: number; total: number } | null): string {
  return x ? `${x.passed}/${x.total}` : "–";
}

function jobView(job: OptimizeJob): HTMLElement {
  const out = h("div", { className: `opt-job ${job.status}`, id: "optimize-job", "data-status": job.status });
  const list = h("table", { className: "opt-rounds" }, h("tr", {}, h("th", {}, "round"), h("th", {}, "training"), h("th", {}, "held-out"), h("th", {}, ""), h("th", {}, "note")));
  for (const r of job.rounds) list.append(h("tr", { className: r.accepted ? "kept" : "" }, h("td", {}, String(r.round)), h("td", {}, pct(r.train)), h("td", {}, pct(r.holdout)), h("td", {}, r.accepted ? "kept" : "dropped"), h("td", {}, r.note)));
  if (job.status === "running") out.append(h("p", { id: "optimize-progress" }, `running ${job.agent} on ${job.suite}: ${job.rounds.length} of ${job.max_rounds + 1} candidate(s) scored…`));
  if (job.rounds.length) out.append(list);
  if (job.status === "error") out.append(h("p", { className: "opt-error" }, h("b", {}, "failed: "), job.error ?? ""));
  const r = job.result;
  if (job.status !== "done" || !r) return out;
  out.append(
    h(
      "table",
      { className: "opt-scores", id: "optimize-scores" },
      h("tr", {}, h("th", {}, "split"), h("th", {}, "before"), h("th", {}, "after")),
      h("tr", {}, h("td", {}, "held-out"), h("td", {}, r.before), h("td", { className: r.improved ? "better" : "" }, r.after)),
      h("tr", {}, h("td", {}, "training"), h("td", {}, r.before_train), h("td", {}, r.after_train)),
    ),
    h("p", { className: "hint" }, `stopped: ${r.stopped} · spent $${r.spent_usd.toFixed(4)}`),
  );
  if (!r.improved) {
    out.append(h("p", { id: "optimize-verdict" }, "No candidate beat the current prompt; the file is unchanged."));
    return out;
  }
  out.append(
    h("h4", {}, "instructions"),
    h("div", { className: "opt-prompts" }, h("pre", { className: "before" }, r.initial.instructions), h("pre", { className: "after", id: "optimize-instructions" }, r.best.instructions)),
    h("h4", {}, `examples (${r.initial.examples.length} → ${r.best.examples.length})`),
    h("ul", { className: "opt-examples" }, ...r.best.examples.map((e) => h("li", {}, h("code", {}, e.input), " → ", h("code", {}, e.output)))),
    h("h4", {}, "diff of the file"),
    diffView(r.diff),
  );
  if (job.written) out.append(h("p", { id: "optimize-verdict", className: "written" }, "Written into the file."));
  else out.append(h("button", { id: "optimize-write", className: "primary", onclick: () => void write(job) }, "Write into the file"));
  return out;
}

function diffView(diff: string): HTMLElement {
  const pre = h("pre", { className: "opt-diff", id: "optimize-diff" });
  for (const line of diff.split("\n")) {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
    pre.append(h("span", { className: cls }, `${line}\n`));
  }
  return pre;
}

async function write(job: OptimizeJob): Promise<void> {
  const ok = await confirmAction({
    title: "Write the new prompt?",
    body: `The winning prompt replaces ${job.agent}'s system= prompt in the file (the diff shown); nothing else changes.`,
    ok: "write",
  });
  if (!ok) return;
  try {
    await api.call("POST", "/api/optimize/write", { job: job.id, confirm: true });
  } catch (err) {
    toast(`Not written: ${(err as Error).message}`, "error", 9000);
    return;
  }
  toast(`Wrote the optimized prompt of ${job.agent} into the file.`);
  await refresh();
  render();
  await reload({ quiet: true, keepView: true });
}

export async function showOptimize(open: boolean): Promise<void> {
  const panel = byId("optimize-panel");
  panel.hidden = !open;
  byId("optimize").setAttribute("aria-expanded", String(open));
  if (!open) return;
  await refresh();
  if (!current && view?.jobs.length) current = view.jobs[view.jobs.length - 1]!.id;
  render();
}

export function mountOptimize(): void {
  byId("optimize").addEventListener("click", () => void showOptimize(!optimizeOpen()));
}

// The live trace overlay: the toolbar's live toggle, the run picker, and each traced run's
// latency, cost and calls on its nodes.
import * as api from "./api";
import { runLabel } from "./captions";
import * as debug from "./debug/index";
import { byId } from "./dom";
import { renderInspector } from "./inspector";
import { toast } from "./notices";
import { paintTrace } from "./paint";
import * as store from "./store";
import { state } from "./store";
import type { RunSummary } from "./types";

/** Fetch the traced runs, list them in the run picker, and show the picked one. */
export async function refreshRuns(): Promise<void> {
  let runs: RunSummary[];
  try {
    runs = (await api.traceRuns()).runs ?? [];
  } catch (err) {
    toast(`No trace: ${(err as Error).message}`, "error");
    return;
  }
  store.setRuns(state, runs);
  const picker = byId<HTMLSelectElement>("run-picker");
  picker.hidden = !state.live;
  picker.innerHTML = "";
  if (!state.runs.length) picker.add(new Option("no runs yet", ""));
  state.runs.forEach((r, i) => {
    const opt = new Option(runLabel(r, i), r.run);
    opt.title = `${r.run} · ${r.spans} spans`;
    picker.add(opt);
  });
  if (state.run) picker.value = state.run;
  await refreshTrace();
}

/** Fetch the picked run's trace (none picked: no overlay) and draw it. */
async function refreshTrace(): Promise<void> {
  let trace = null;
  if (state.run) {
    try {
      trace = await api.traceRun(state.run);
    } catch {
      trace = null;
    }
  }
  store.setTrace(state, trace);
  paintTrace();
  renderInspector();
}

/** The debugger opened ``thread``: while live, the overlay shows that thread's newest run. */
export function followThread(thread: string): void {
  if (!store.followThread(state, thread)) return;
  byId<HTMLSelectElement>("run-picker").value = state.run ?? "";
  void refreshTrace();
}

/** The run panel started a run: the overlay turns on and follows it as its spans arrive. */
export function watchRun(run: string): void {
  store.followNewest(state);
  if (state.runs.some((r) => r.run === run)) store.pickRun(state, run);
  if (!state.live) toggleLive();
  else void refreshRuns();
}

function toggleLive(): void {
  store.setLive(state, !state.live);
  const button = byId("live");
  button.classList.toggle("on", state.live);
  button.textContent = state.live ? "■ live" : "▶ live";
  byId("run-picker").hidden = !state.live;
  debug.setLive(state.live);
  if (state.live) void refreshRuns();
  else {
    paintTrace();
    renderInspector();
  }
}

export function mountLive(): void {
  byId("live").addEventListener("click", toggleLive);
  byId<HTMLSelectElement>("run-picker").addEventListener("change", (ev) => {
    store.pickRun(state, (ev.target as HTMLSelectElement).value);
    void refreshTrace();
  });
}

// Keeping the canvas in step with the file on disk: loading the graph, and the server's
// event stream (the file changed, a run was traced, the debugger's threads changed).
import * as api from "./api";
import { markBreakpoints } from "./badges";
import * as debug from "./debug/index";
import { refreshRuns } from "./live";
import { renderInspector } from "./inspector";
import { setBanner, toast } from "./notices";
import { paint } from "./paint";
import { acceptGraph, setConnected, state } from "./store";
import { onFileChanged, onRunEvent } from "./run-panel";
import { renderToolbar } from "./toolbar";
import type { GraphResponse } from "./types";

/** Load the opened graph again (``quiet``: a failure is not worth a toast; ``keepView``: the
 * reload follows a write the page made, so a repaint keeps the view — see paint.ts). */
export async function reload(opts: { quiet?: boolean; keepView?: boolean } = {}): Promise<void> {
  let resp: GraphResponse;
  try {
    resp = await api.getGraph(state.graphName);
  } catch (err) {
    if (!opts.quiet) toast(`Could not load the graph: ${(err as Error).message}`, "error");
    return;
  }
  show(resp, opts.keepView ?? false);
}

/** Show the server's answer: the banner, the toolbar, and the canvas if the graph changed
 * (the same graph and layout as on screen: no repaint, so nothing moves). */
function show(resp: GraphResponse, keepView: boolean): void {
  if (resp.graph) markBreakpoints(resp.graph);
  const wasReadOnly = state.readOnly;
  const changed = acceptGraph(state, resp);
  setBanner(resp);
  renderToolbar();
  if (changed) paint({ keepView });
  else document.body.classList.toggle("read-only", state.readOnly);
  // the side panel's controls follow: disabled while the file does not parse, and back
  if (wasReadOnly !== state.readOnly) renderInspector();
}

/** Listen to the server's events. EventSource reconnects by itself; a fetch after an error
 * makes sure a missed change is not missed for long. */
export function connect(): void {
  const es = api.events();
  es.addEventListener("open", () => {
    // whatever changed before the stream was watching is picked up now
    setConnected(state);
    if (state.version) void reload({ quiet: true });
  });
  es.addEventListener("file", (ev) => {
    let version = "";
    try {
      version = JSON.parse((ev as MessageEvent).data).version ?? "";
    } catch {
      /* reload anyway */
    }
    if (version !== state.version && !state.busy) void reload({ quiet: true });
    void onFileChanged();
  });
  es.addEventListener("trace", () => {
    if (state.live) void refreshRuns();
    debug.onServerEvent("trace", null);
  });
  es.addEventListener("debug", (ev) => {
    let data: unknown = null;
    try {
      data = JSON.parse((ev as MessageEvent).data);
    } catch {
      /* refresh anyway */
    }
    debug.onServerEvent("debug", data);
  });
  es.addEventListener("run", (ev) => {
    try {
      onRunEvent(JSON.parse((ev as MessageEvent).data));
    } catch {
      /* a malformed event changes nothing */
    }
  });
  es.onerror = () => {
    setTimeout(() => void reload({ quiet: true }), 1000);
  };
}

// TensorSketch Studio: the canvas. The file is the truth; every gesture is an edit the server
// writes into it, and the canvas repaints from the re-extracted graph it sends back.
//
// This module only wires the page together: `mount()` registers every listener, `start()`
// loads the graph and the debugger. The modules it calls register nothing when imported.
import * as api from "./api";
import * as debug from "./debug/index";
import { mountDownloads } from "./downloads";
import { exportSvg } from "./export";
import { mountGestures } from "./gestures";
import { mountHolesList } from "./holes-list";
import { followThread, mountLive } from "./live";
import { mountNodeDialog } from "./node-dialog";
import { mountNotices, toast, warnNoToken } from "./notices";
import { mountOptimize } from "./optimize";
import { mountRunPanel, runPanel, showThread } from "./run-panel";
import { mountStage, relayout, reveal, stage } from "./stage";
import { liveThread, state } from "./store";
import { canOpen, leaveTo, openNode } from "./subgraphs";
import { connect, reload } from "./sync";
import { mountToolbar } from "./toolbar";

/** Register the page's listeners, and the read-only peeks tests and benchmarks use. */
export function mount(): void {
  const { svg, viewport } = stage();
  (window as unknown as Record<string, unknown>).__studio = {
    state,
    get paints() {
      return state.paints;
    },
    exportSvg: () => exportSvg(svg, viewport),
    debug: debug.dbg,
    layoutTree: debug.layoutTree,
    run: runPanel,
  };
  mountNotices();
  mountStage();
  mountGestures();
  mountToolbar();
  mountHolesList();
  mountNodeDialog();
  mountLive();
  mountDownloads();
  mountOptimize();
  mountRunPanel();
}

/** Load the font, the graph and the debugger, and follow the server's events. */
export async function start(): Promise<void> {
  if (!api.token) warnNoToken();
  try {
    await Promise.race([document.fonts.load("20px Virgil"), new Promise((r) => setTimeout(r, 1500))]);
  } catch {
    /* the fallback font is fine */
  }
  connect();
  await reload();
  await debug.initDebug({
    svg: stage().svg,
    layer: document.getElementById("debug-marks") as unknown as SVGGElement,
    scene: () => state.scene,
    toast,
    relayout,
    reveal,
    liveThread: () => liveThread(state),
    followThread: (thread) => {
      followThread(thread);
      showThread(thread);
    },
    path: () => state.path,
    openSubgraph: openNode,
    canOpen: (node) => canOpen(state.graph?.nodes.find((n) => n.name === node)),
    leaveSubgraph: leaveTo,
  });
}

mount();
void start();

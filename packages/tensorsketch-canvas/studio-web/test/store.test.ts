import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as store from "../src/store";
import type { EditOp } from "../src/types";
import { box, chain, hole, response, scene } from "./fixtures";

const addB: EditOp = { op: "add_node", args: { name: "B" } };
const removeB: EditOp = { op: "remove_node", args: { name: "B" } };
const wireAB: EditOp = { op: "add_edge", args: { source: "A", target: "B" } };
const unwireAB: EditOp = { op: "remove_edge", args: { source: "A", target: "B" } };

describe("acceptGraph", () => {
  test("takes the first graph and asks for a paint", () => {
    const s = store.createState();
    const resp = response({ layout: { A: { x: 1, y: 2 } } });
    assert.equal(store.acceptGraph(s, resp), true);
    assert.equal(s.graph, resp.graph);
    assert.equal(s.file, "/p/flow.py");
    assert.equal(s.version, "v1");
    assert.deepEqual(s.layout, { A: { x: 1, y: 2 } });
    assert.equal(s.readOnly, false);
  });

  test("the same graph and layout again need no paint once a scene is drawn", () => {
    const s = store.createState();
    store.acceptGraph(s, response());
    store.showScene(s, scene([]));
    assert.equal(store.acceptGraph(s, response({ version: "v2" })), false);
    assert.equal(s.version, "v2");
  });

  test("a changed layout or graph asks for a paint", () => {
    const s = store.createState();
    store.acceptGraph(s, response());
    store.showScene(s, scene([]));
    assert.equal(store.acceptGraph(s, response({ layout: { A: { x: 5, y: 5 } } })), true);
    assert.equal(store.acceptGraph(s, response({ layout: { A: { x: 5, y: 5 } }, graph: chain("A", "B") })), true);
  });

  test("a file that stops parsing keeps the last good graph, read-only, and its holes as they were", () => {
    const s = store.createState();
    const good = response({ holes: [hole("/p/flow.py", "Draft"), hole("/p/other.py", "Other")] });
    store.acceptGraph(s, good);
    const broken = response({
      graph: chain("A", "Half"),
      holes: [hole("/p/other.py", "Other")],
      parse_error: { line: 4, column: null, message: "bad" },
    });
    store.acceptGraph(s, broken);
    assert.equal(s.graph, good.graph);
    assert.equal(s.readOnly, true);
    assert.deepEqual(s.holes.map((x) => x.node), ["Other", "Draft"]);
  });

  test("a file that never parsed shows what the server sent, with its holes unknown", () => {
    const s = store.createState();
    const broken = response({ parse_error: { line: 1, column: 2, message: "bad" } });
    store.acceptGraph(s, broken);
    assert.equal(s.graph, broken.graph);
    assert.equal(s.fileHoles, null);
    assert.equal(s.readOnly, true);
  });

  test("a stale answer is read-only; an answer without a selection keeps the open graph", () => {
    const s = store.createState();
    store.switchGraph(s, "second");
    store.acceptGraph(s, response({ stale: true, selected: null }));
    assert.equal(s.readOnly, true);
    assert.equal(s.graphName, "second");
  });
});

describe("acceptEdit", () => {
  test("takes the version, graph and layout, and times the round trip", () => {
    const s = store.createState();
    store.acceptGraph(s, response({ layout: { A: { x: 0, y: 0 } } }));
    const g = chain("A", "B");
    store.acceptEdit(s, { graph: g, version: "v9", inverse: null }, 12.5);
    assert.equal(s.graph, g);
    assert.equal(s.version, "v9");
    assert.deepEqual(s.layout, { A: { x: 0, y: 0 } }, "no layout sent: the layout stays");
    assert.equal(s.timings.edit, 12.5);
  });
});

describe("selection", () => {
  test("a node and a wire are never selected together", () => {
    const s = store.createState();
    store.selectNode(s, "A");
    assert.equal(store.selectWire(s, 2), true);
    assert.equal(s.selectedNode, null);
    assert.equal(store.selectWire(s, 2), false, "the same wire again is no change");
    store.selectNode(s, "B");
    assert.equal(s.selectedWire, null);
    assert.equal(s.selectedNode, "B");
  });

  test("clearing the node keeps the wire", () => {
    const s = store.createState();
    store.selectWire(s, 1);
    store.selectNode(s, null);
    assert.equal(s.selectedWire, 1);
  });

  test("a new scene drops a selection it no longer holds", () => {
    const s = store.createState();
    store.selectNode(s, "Gone");
    store.showScene(s, scene([box("A", 0, 0)], [0]));
    assert.equal(s.selectedNode, null);
    store.selectNode(s, "A");
    store.showScene(s, scene([box("A", 0, 0)], [0]));
    assert.equal(s.selectedNode, "A");
    store.selectWire(s, 3);
    store.showScene(s, scene([box("A", 0, 0)], [0]));
    assert.equal(s.selectedWire, null);
  });

  test("no scene keeps the selection (the graph may come back)", () => {
    const s = store.createState();
    store.selectNode(s, "A");
    store.showScene(s, null);
    assert.equal(s.selectedNode, "A");
    assert.equal(s.scene, null);
  });
});

describe("deleting a wire with the keyboard", () => {
  test("only a wire a single click picked, and not after typing", () => {
    const s = store.createState();
    store.selectWire(s, 2);
    assert.equal(store.wireDeletable(s), false, "selected some other way: shown, not armed");
    store.selectWire(s, 2, true);
    assert.equal(store.wireDeletable(s), true);
    store.disarmWire(s);
    assert.equal(store.wireDeletable(s), false, "the user typed: Backspace edits nothing");
    store.selectWire(s, 1, true);
    store.selectNode(s, "A");
    assert.equal(store.wireDeletable(s), false);
    assert.equal(s.wireArmed, false);
  });
});

describe("undo history", () => {
  test("an answer's exact travels with the undo, and the undo's with the redo", () => {
    const s = store.createState();
    store.recordEdit(s, { ...addB, layout: { B: { x: 1, y: 2 } } }, removeB, { hunks: "h1" });
    const e = store.takeUndo(s);
    assert.ok(e && e.kind === "edit");
    assert.deepEqual(e.undo, { ...removeB, exact: { hunks: "h1" } });
    assert.deepEqual(e.redo, addB, "the drop position is not sent again");
    store.undone(s, e, null, { hunks: "h2" });
    const again = store.takeRedo(s);
    assert.ok(again && again.kind === "edit");
    assert.deepEqual(again.redo, { ...addB, exact: { hunks: "h2" } }, "an exact undo names no inverse: the step is kept");
    store.redone(s, again, null, null);
    const back = store.takeUndo(s);
    assert.ok(back && back.kind === "edit");
    assert.deepEqual(back.undo, removeB, "no exact in the answer: the plain inverse");
  });

  test("a node's first move is undone by unpinning it", () => {
    const s = store.createState();
    store.recordMove(s, "A", null, { x: 5, y: 5 });
    const e = store.takeUndo(s);
    assert.ok(e && e.kind === "move");
    assert.equal(e.before, null);
  });

  test("an edit with an inverse is a step to undo, and clears what could be redone", () => {
    const s = store.createState();
    store.recordEdit(s, addB, removeB);
    const e = store.takeUndo(s)!;
    store.undone(s, e, null);
    assert.equal(s.redo.length, 1);
    assert.equal(store.recordEdit(s, wireAB, unwireAB), true);
    assert.equal(s.redo.length, 0);
    assert.deepEqual(s.undo.map((x) => x.label), ["wire A → B"]);
  });

  test("an edit without an inverse forgets the history", () => {
    const s = store.createState();
    store.recordEdit(s, addB, removeB);
    store.recordMove(s, "A", { x: 0, y: 0 }, { x: 5, y: 5 });
    assert.equal(store.recordEdit(s, wireAB, null), false);
    assert.equal(s.undo.length, 0);
    assert.equal(s.redo.length, 0);
  });

  test("undo then redo sends the inverses the server gave each time", () => {
    const s = store.createState();
    store.recordEdit(s, addB, removeB);
    const e = store.takeUndo(s)!;
    assert.equal(s.undo.length, 0);
    const readd: EditOp = { op: "restore", args: { token: "t1" } };
    store.undone(s, e, readd);
    const r = store.takeRedo(s)!;
    assert.equal(r.kind, "edit");
    assert.deepEqual(r.kind === "edit" && r.redo, readd);
    const removeAgain: EditOp = { op: "remove_node", args: { name: "B", again: true } };
    store.redone(s, r, removeAgain);
    const u = store.takeUndo(s)!;
    assert.deepEqual(u.kind === "edit" && u.undo, removeAgain);
  });

  test("without a new inverse the entry keeps its own", () => {
    const s = store.createState();
    store.recordEdit(s, addB, removeB);
    store.undone(s, store.takeUndo(s)!, null);
    const r = store.takeRedo(s)!;
    assert.deepEqual(r.kind === "edit" && r.redo, addB);
  });

  test("a failed undo or redo leaves the step where it was", () => {
    const s = store.createState();
    store.recordEdit(s, addB, removeB);
    const e = store.takeUndo(s)!;
    store.restoreUndo(s, e);
    assert.deepEqual(s.undo, [e]);
    store.undone(s, store.takeUndo(s)!, null);
    const r = store.takeRedo(s)!;
    store.restoreRedo(s, r);
    assert.deepEqual(s.redo, [r]);
  });

  test("moves are steps too, and nothing to take is undefined", () => {
    const s = store.createState();
    assert.equal(store.takeUndo(s), undefined);
    assert.equal(store.takeRedo(s), undefined);
    store.recordMove(s, "A", { x: 0, y: 0 }, { x: 5, y: 5 });
    const e = store.takeUndo(s)!;
    assert.deepEqual(e, { kind: "move", node: "A", before: { x: 0, y: 0 }, after: { x: 5, y: 5 }, label: "move A" });
    store.undone(s, e, null);
    assert.deepEqual(s.redo, [e]);
  });

  test("a paint after the page's own write keeps the view; a first paint fits", () => {
    const s = store.createState();
    assert.equal(store.fitsOnPaint(s, true), true); // nothing fitted yet: the first paint fits
    store.markFitted(s);
    assert.equal(store.fitsOnPaint(s, false), true); // a load while the view is the fit's
    assert.equal(store.fitsOnPaint(s, true), false); // an edit's quiet reload keeps it
    store.setUserView(s, true);
    assert.equal(store.fitsOnPaint(s, false), false); // the user moved it: never re-fitted
    store.switchGraph(s, "other");
    assert.equal(store.fitsOnPaint(s, true), true); // another graph: fitted again
  });

  test("switching graphs drops the history and the graph, and fits the next one", () => {
    const s = store.createState();
    store.acceptGraph(s, response());
    store.recordEdit(s, addB, removeB);
    store.markFitted(s);
    store.switchGraph(s, "other");
    assert.equal(s.graphName, "other");
    assert.equal(s.graph, null);
    assert.equal(s.fitted, false);
    assert.equal(s.undo.length, 0);
  });
});

describe("live runs", () => {
  const runs = [
    { run: "r3", started: "2024-01-01T00:00:03Z", spans: 1, status: "ok", thread_id: "t1" },
    { run: "r1", started: 1704067201, spans: 1, status: "ok", thread_id: "t1" },
    { run: "r2", started: "2024-01-01T00:00:02Z", spans: 1, status: "ok", thread_id: "t2" },
  ];

  test("runs are kept oldest first, and the newest is followed", () => {
    const s = store.createState();
    store.setRuns(s, [
      { run: "b", started: 20, spans: 1, status: "ok" },
      { run: "a", started: 10, spans: 1, status: "ok" },
      { run: "c", started: 30, spans: 1, status: "ok" },
    ]);
    assert.deepEqual(s.runs.map((r) => r.run), ["a", "b", "c"]);
    assert.equal(s.run, "c");
  });

  test("a picked older run stays picked while it is listed", () => {
    const s = store.createState();
    store.setRuns(s, [{ run: "a", started: 10, spans: 1, status: "ok" }, { run: "b", started: 20, spans: 1, status: "ok" }]);
    store.pickRun(s, "a");
    assert.equal(s.followLatest, false);
    store.setRuns(s, [{ run: "a", started: 10, spans: 1, status: "ok" }, { run: "c", started: 30, spans: 1, status: "ok" }]);
    assert.equal(s.run, "a");
    store.setRuns(s, [{ run: "c", started: 30, spans: 1, status: "ok" }]);
    assert.equal(s.run, "c", "the picked run is gone: the newest is shown");
  });

  test("picking the newest run follows new runs again; picking none shows none", () => {
    const s = store.createState();
    store.setRuns(s, [{ run: "a", started: 10, spans: 1, status: "ok" }, { run: "b", started: 20, spans: 1, status: "ok" }]);
    store.pickRun(s, "a");
    store.pickRun(s, "b");
    assert.equal(s.followLatest, true);
    store.pickRun(s, "");
    assert.equal(s.run, null);
  });

  test("following a thread shows its newest run, only while live", () => {
    const s = store.createState();
    store.setRuns(s, runs);
    assert.deepEqual(s.runs.map((r) => r.run), ["r1", "r2", "r3"]);
    assert.equal(store.followThread(s, "t2"), false, "live is off");
    store.setLive(s, true);
    assert.equal(store.followThread(s, "t2"), true);
    assert.equal(s.run, "r2");
    assert.equal(s.followLatest, false);
    assert.equal(store.liveThread(s), "t2");
    assert.equal(store.followThread(s, "t2"), false, "already shown");
    assert.equal(store.followThread(s, "t1"), true);
    assert.equal(s.run, "r3");
    assert.equal(s.followLatest, true);
    assert.equal(store.followThread(s, "nobody"), false);
  });
});

describe("paint bookkeeping", () => {
  test("each paint is counted and timed; only the latest one's frame is kept", () => {
    const s = store.createState();
    const first = store.countPaint(s, 3, 110, 100);
    const second = store.countPaint(s, 4, 220, 200);
    assert.equal(second, 2);
    assert.equal(s.lastPaint, 220);
    assert.equal(s.timings.layout, 4);
    assert.equal(s.timings.draw, 20);
    store.markFramed(s, first, 300);
    assert.equal(s.framed, 0);
    store.markFramed(s, second, 301);
    assert.equal(s.framed, 301);
  });
});

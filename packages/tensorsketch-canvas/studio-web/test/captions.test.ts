import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as captions from "../src/captions";
import { END, START } from "../src/types";
import { edge, graph, hole, node } from "./fixtures";

describe("parseErrorNotice", () => {
  test("names the file and the place, and cuts the message's own opening", () => {
    const n = captions.parseErrorNotice("/p/flow.py", { line: 7, column: 3, message: "cannot parse flow.py (line 7: invalid syntax); fix the colon" }, true);
    assert.equal(n.lead, "/p/flow.py does not parse (line 7, column 3): ");
    assert.equal(n.text, "invalid syntax; fix the colon");
    assert.match(n.tail, /showing the last good graph/);
  });

  test("without a place or a graph", () => {
    const n = captions.parseErrorNotice("", { line: null, column: null, message: "boom" }, false);
    assert.equal(n.lead, "The file does not parse (somewhere): ");
    assert.equal(n.text, "boom");
    assert.match(n.tail, /nothing to show/);
    assert.equal(captions.parseErrorNotice("f.py", { line: 2, column: null, message: "x" }, false).lead, "f.py does not parse (line 2): ");
  });
});

describe("wire captions", () => {
  test("headings name the ends, a join's sources, a dynamic route's targets", () => {
    assert.equal(captions.edgeTitle(edge(START, "A")), "START → A");
    assert.equal(captions.edgeTitle(edge(null, "J", { kind: "join", sources: ["A", "B"] })), "[A, B] → J");
    assert.equal(captions.edgeTitle(edge("A", null, { kind: "dynamic", routes: ["B", END] })), "A → B | END");
    assert.equal(captions.edgeTitle(edge("A", null, { kind: "dynamic" })), "A → ?");
  });

  test("hints say what kind of wire it is", () => {
    assert.equal(captions.edgeHint(edge("A", "B")), "sequential");
    assert.equal(captions.edgeHint(edge("A", "B", { kind: "conditional", path: "route", label: "yes" })), "conditional: route → yes");
    assert.equal(captions.edgeHint(edge(null, "J", { kind: "join" })), "join: J runs once after all of these have run");
    assert.equal(captions.edgeHint(edge("A", null, { kind: "dynamic" })), "dynamic: the routing function picks the next node when it runs");
    assert.equal(captions.dynamicHint(edge("A", null, { kind: "dynamic", path: "pick", routes: ["B"] })), "dynamic: pick can route to B (read from its code; no mapping to edit)");
    assert.equal(captions.dynamicHint(edge("A", null, { kind: "dynamic", path: "pick", routes: ["B", "C", END] })), "dynamic: pick can route to B, C or END (read from its code; no mapping to edit)");
  });

  test("the delete button names what it deletes", () => {
    assert.equal(captions.deleteEdgeLabel(edge("A", "B")), "delete edge (Del)");
    assert.equal(captions.deleteEdgeLabel(edge(null, "J", { kind: "join" })), "delete join (Del)");
    assert.equal(captions.deleteEdgeLabel(edge("A", "B", { kind: "conditional" })), "delete route (Del)");
  });
});

describe("holes", () => {
  test("the heading agrees in number", () => {
    assert.equal(captions.holesHeading(0), "0 nodes need code");
    assert.equal(captions.holesHeading(1), "1 node needs code");
    assert.equal(captions.holesHeading(3), "3 nodes need code");
  });

  test("the badge's title says which holes a broken file counts", () => {
    assert.equal(captions.holesBadgeTitle("/p/flow.py", false, false), "nodes that still need code, across the project");
    assert.match(captions.holesBadgeTitle("/p/flow.py", true, true), /flow\.py does not parse: its holes are not counted/);
    assert.match(captions.holesBadgeTitle("C:\\p\\flow.py", true, false), /\(flow\.py does not parse: its holes as of when it last parsed\)/);
  });

  test("a hole's class is named by the opened graph's nodes of that class", () => {
    const g = graph([
      node("Reply", { cls: "Draft", has_hole: true }),
      node("Again", { cls: "pkg.Draft(tone='x')", has_hole: true }),
      node("Done", { cls: "Draft", has_hole: false }),
    ]);
    assert.deepEqual(captions.holeNodes(hole("/p/flow.py", "Draft"), "/p/flow.py", g), ["Reply", "Again"]);
    assert.deepEqual(captions.holeNodes(hole("/p/other.py", "Draft"), "/p/flow.py", g), []);
    assert.deepEqual(captions.holeNodes(hole("/p/flow.py", "Draft"), "/p/flow.py", null), []);
  });
});

describe("runs and files", () => {
  test("a run's line counts from 1; seconds and milliseconds read the same", () => {
    assert.equal(captions.runStarted(1704067200), captions.runStarted(1704067200000));
    assert.equal(captions.runStarted("yesterday"), "yesterday");
    assert.equal(captions.runStarted(null), "");
    assert.equal(captions.runLabel({ run: "r", started: "noon", spans: 2, status: "ok" }, 0), "run 1 · ok · noon");
  });

  test("baseName takes the last part of either kind of path", () => {
    assert.equal(captions.baseName("/a/b/flow.py"), "flow.py");
    assert.equal(captions.baseName("C:\\a\\flow.py"), "flow.py");
    assert.equal(captions.baseName("flow.py"), "flow.py");
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { anchorAt, traceAt } from "../src/nested";
import type { NodeTrace, RunTrace } from "../src/types";

const t = (status: string): NodeTrace => ({ status, latency_ms: 1, cost: null, calls: 1, tokens: 0, errors: 0, last: [] }) as unknown as NodeTrace;

describe("traceAt", () => {
  const trace: RunTrace = {
    run: "r",
    nodes: { Review: t("running") },
    subgraphs: { Review: { nodes: { Polish: t("ok"), Ask: t("suspended") }, subgraphs: { Deep: { nodes: { X: t("ok") }, subgraphs: {} } } } },
  };
  test("the top level, a subgraph's nodes, a deeper one, and nothing where nothing ran", () => {
    assert.deepEqual(Object.keys(traceAt(trace, [])), ["Review"]);
    assert.deepEqual(Object.keys(traceAt(trace, ["Review"])), ["Polish", "Ask"]);
    assert.deepEqual(Object.keys(traceAt(trace, ["Review", "Deep"])), ["X"]);
    assert.deepEqual(traceAt(trace, ["Other"]), {});
    assert.deepEqual(traceAt(null, []), {});
  });
  test("a Send instance opens its node's subgraph; an older server sends no subgraphs", () => {
    assert.deepEqual(Object.keys(traceAt(trace, ["Review#1"])), ["Polish", "Ask"]);
    assert.deepEqual(traceAt({ run: "r", nodes: {} }, ["Review"]), {});
  });
});

describe("anchorAt", () => {
  test("at its node in its own graph, at the subgraph node above it, nowhere else", () => {
    assert.equal(anchorAt("Ask", ["Review"], ["Review"]), "Ask");
    assert.equal(anchorAt("Ask", ["Review"], []), "Review");
    assert.equal(anchorAt("Ask", ["Review#0", "Deep"], []), "Review");
    assert.equal(anchorAt("Ask", ["Review", "Deep"], ["Review"]), "Deep");
    assert.equal(anchorAt("Ask", ["Review"], ["Other"]), null);
    assert.equal(anchorAt("Ask", [], ["Review"]), null);
    assert.equal(anchorAt("Triage", undefined, []), "Triage");
  });
});

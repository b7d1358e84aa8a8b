import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as ops from "../src/edit-ops";
import { END, START } from "../src/types";
import { chain, edge } from "./fixtures";

describe("describeEdit", () => {
  test("names each edit as the undo button shows it", () => {
    assert.equal(ops.describeEdit({ op: "add_node", args: { name: "B" } }), "create B");
    assert.equal(ops.describeEdit({ op: "add_edge", args: { source: START, target: "B" } }), "wire START → B");
    assert.equal(ops.describeEdit({ op: "remove_edge", args: { source: "A", target: END } }), "delete A → END");
    assert.equal(ops.describeEdit({ op: "remove_edge", args: { source: "A", target: "J", join: true } }), "delete the join into J");
    assert.equal(ops.describeEdit({ op: "add_join", args: { target: "J" } }), "join into J");
    assert.equal(ops.describeEdit({ op: "rename_node", args: { old: "A", new: "B" } }), "rename A → B");
    assert.equal(ops.describeEdit({ op: "add_port", args: { node: "A", name: "q" } }), "add port A.q");
    assert.equal(ops.describeEdit({ op: "remove_port", args: { node: "A", name: "q" } }), "remove port A.q");
    assert.equal(ops.describeEdit({ op: "remove_node", args: { name: "A" } }), "delete A");
    assert.equal(ops.describeEdit({ op: "restore", args: {} }), "restore what was deleted");
    assert.equal(ops.describeEdit({ op: "something_new", args: {} }), "something_new");
  });
});

describe("removeEdgeOp", () => {
  test("a plain edge by its ends", () => {
    assert.deepEqual(ops.removeEdgeOp(edge("A", "B")), { op: "remove_edge", args: { source: "A", target: "B" } });
  });

  test("a conditional edge by its label too", () => {
    const e = edge("A", "B", { kind: "conditional", label: "yes" });
    assert.deepEqual(ops.removeEdgeOp(e), { op: "remove_edge", args: { source: "A", target: "B", label: "yes" } });
  });

  test("a join whole, named by its first source", () => {
    const e = edge(null, "J", { kind: "join", sources: ["A", "B"] });
    assert.deepEqual(ops.removeEdgeOp(e), { op: "remove_edge", args: { source: "A", target: "J", join: true } });
  });
});

describe("canDeleteEdge", () => {
  test("custom wiring and sourceless edges are not the canvas's to delete", () => {
    assert.equal(ops.canDeleteEdge(edge("A", "B")), true);
    assert.equal(ops.canDeleteEdge(edge(null, "J", { kind: "join", sources: ["A"] })), true);
    assert.equal(ops.canDeleteEdge(edge(null, "B")), false);
    assert.equal(ops.canDeleteEdge(edge("A", null, { kind: "custom", code: "x" })), false);
  });
});

describe("wiringProblem", () => {
  const g = chain("A", "B");

  test("refuses what the compiler would", () => {
    assert.match(ops.wiringProblem(g, "A", "A")!, /cannot be wired to itself/);
    assert.match(ops.wiringProblem(g, "A", START)!, /START has no inputs/);
    assert.match(ops.wiringProblem(g, END, "A")!, /END has no outputs/);
    assert.match(ops.wiringProblem(g, "A", "custom:3")!, /cannot edit/);
    assert.match(ops.wiringProblem(g, "A", "stub:1")!, /cannot edit/);
    assert.equal(ops.wiringProblem(g, "A", "B"), "A → B is already wired.");
  });

  test("lets a new wire through", () => {
    assert.equal(ops.wiringProblem(g, "B", "A"), null);
    assert.equal(ops.wiringProblem(null, "B", "A"), null);
  });
});

describe("parsePorts", () => {
  test("reads name: type entries, str by default", () => {
    assert.deepEqual(ops.parsePorts("query: str\nlimit:int, tags ; extra: list[str] "), { query: "str", limit: "int", tags: "str", extra: "list[str]" });
    assert.deepEqual(ops.parsePorts("  \n"), {});
  });

  test("says which entry is not a port", () => {
    assert.equal(ops.parsePorts("ok: str\n2bad: int"), '"2bad: int" is not a port: write name: type, e.g. query: str');
  });

  test("isPortName takes Python identifiers only", () => {
    assert.equal(ops.isPortName("summary_2"), true);
    assert.equal(ops.isPortName("_x"), true);
    assert.equal(ops.isPortName("2x"), false);
    assert.equal(ops.isPortName("a-b"), false);
    assert.equal(ops.isPortName(""), false);
  });
});

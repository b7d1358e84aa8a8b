import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { findNode } from "../src/search";

const names = ["Classify", "Billing", "Tech", "TechReview", "N1", "N10", "N104"];

describe("findNode", () => {
  test("an exact name, ignoring case, wins over longer ones", () => {
    assert.equal(findNode(names, "tech"), "Tech");
    assert.equal(findNode(names, "N10"), "N10");
  });

  test("a prefix names the one node it starts", () => {
    assert.equal(findNode(names, "class"), "Classify");
    assert.equal(findNode(names, "techr"), "TechReview");
  });

  test("several matches or none: no node", () => {
    assert.equal(findNode(names, "N"), null);
    assert.equal(findNode(names, "zzz"), null);
    assert.equal(findNode(names, "  "), null);
  });

  test("a part inside the name, when it is the only one", () => {
    assert.equal(findNode(names, "illin"), "Billing");
  });
});

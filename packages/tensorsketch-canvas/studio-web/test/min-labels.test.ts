import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fitted } from "../src/min-labels";

/** Every character 6 px wide at 11 px: enough to test the cut without a canvas. */
const measure = (text: string, px: number) => text.length * px * (6 / 11);

describe("fitted", () => {
  test("a name that fits is kept", () => {
    assert.equal(fitted("N104", 40, 11, measure), "N104");
  });

  test("a long name is cut with an ellipsis to the width", () => {
    const out = fitted("ClassifyTheTicket", 40, 11, measure);
    assert.ok(out.endsWith("…"));
    assert.ok(measure(out, 11) <= 40, out);
    assert.ok(out.length > 2);
  });
});

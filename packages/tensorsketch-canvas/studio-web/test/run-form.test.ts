import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseValue, placeholder, widgetFor } from "../src/run-form";

// the shapes pydantic's model_json_schema() gives the run panel's fields
const defs = { Address: { type: "object", properties: { city: { type: "string" } } }, Speed: { enum: ["slow", "fast"], type: "string" } };

describe("widgetFor", () => {
  test("plain types get their own input", () => {
    assert.equal(widgetFor({ type: "string" }).kind, "text");
    assert.equal(widgetFor({ type: "integer", default: 1 }).kind, "integer");
    assert.equal(widgetFor({ type: "number" }).kind, "number");
    assert.equal(widgetFor({ type: "boolean", default: false }).kind, "boolean");
  });

  test("a Literal (inline or by $ref) is a select of its values", () => {
    assert.deepEqual(widgetFor({ enum: ["a", "b"], type: "string" }).options, ["a", "b"]);
    const w = widgetFor({ $ref: "#/$defs/Speed", default: "slow" }, defs);
    assert.equal(w.kind, "enum");
    assert.deepEqual(w.options, ["slow", "fast"]);
    assert.equal(w.fallback, "slow");
  });

  test("X | None is X, nullable; lists, models and wider unions are JSON", () => {
    const w = widgetFor({ anyOf: [{ type: "integer" }, { type: "null" }], default: null });
    assert.equal(w.kind, "integer");
    assert.ok(w.nullable);
    assert.equal(widgetFor({ type: "array", items: { type: "string" } }).kind, "json");
    assert.equal(widgetFor({ anyOf: [{ $ref: "#/$defs/Address" }, { type: "null" }] }, defs).kind, "json");
    assert.equal(widgetFor({ anyOf: [{ type: "integer" }, { type: "string" }] }).kind, "json");
    assert.equal(widgetFor({}).kind, "json");
  });
});

describe("parseValue", () => {
  test("an empty box keeps the default", () => {
    assert.deepEqual(parseValue(widgetFor({ type: "string" }), ""), { skip: true });
    assert.deepEqual(parseValue(widgetFor({ type: "integer" }), "  "), { skip: true });
    assert.deepEqual(parseValue(widgetFor({ type: "array" }), ""), { skip: true });
  });

  test("numbers, booleans and enum values are typed", () => {
    assert.deepEqual(parseValue(widgetFor({ type: "integer" }), "3"), { value: 3 });
    assert.ok("error" in parseValue(widgetFor({ type: "integer" }), "3.5"));
    assert.deepEqual(parseValue(widgetFor({ type: "number" }), "2.5"), { value: 2.5 });
    assert.ok("error" in parseValue(widgetFor({ type: "number" }), "two"));
    assert.deepEqual(parseValue(widgetFor({ type: "boolean" }), true), { value: true });
    assert.deepEqual(parseValue(widgetFor({ enum: ["a", 1] }), "1"), { value: 1 });
    assert.ok("error" in parseValue(widgetFor({ enum: ["a"] }), '"b"'));
  });

  test("JSON text is parsed as data, never run", () => {
    const w = widgetFor({ type: "array" });
    assert.deepEqual(parseValue(w, '["a", {"b": 1}]'), { value: ["a", { b: 1 }] });
    const bad = parseValue(w, "[1, 2].map(alert)");
    assert.ok("error" in bad && bad.error.includes("not valid JSON"));
    // text stays text: what looks like code is only a string
    assert.deepEqual(parseValue(widgetFor({ type: "string" }), "__import__('os')"), { value: "__import__('os')" });
  });

  test("the placeholder shows the default or what is needed", () => {
    assert.equal(placeholder(widgetFor({ type: "integer", default: 1 })), "default: 1");
    assert.equal(placeholder(widgetFor({ type: "string" })), "required");
  });
});

// The run panel's form, as data: which widget each state field gets from its JSON schema, and
// what a widget's text means as a value. Pure (no DOM), so `node --test` checks it. A value is
// always data: text, a number, a boolean, or JSON parsed with JSON.parse — never evaluated.

export type JsonSchema = Record<string, unknown>;

export interface RunField {
  name: string;
  schema: JsonSchema;
  required: boolean;
  description?: string | null;
}

export type WidgetKind = "text" | "integer" | "number" | "boolean" | "enum" | "json";

export interface Widget {
  kind: WidgetKind;
  /** an enum's choices (JSON values) */
  options: unknown[];
  /** the field's default, when the schema says it */
  fallback: unknown;
  hasDefault: boolean;
  /** ``None`` is allowed (an ``X | None`` field) */
  nullable: boolean;
}

/** The schema behind ``$ref`` (the model's ``$defs``), else the schema itself. */
function resolve(schema: JsonSchema, defs: Record<string, JsonSchema>): JsonSchema {
  const ref = schema.$ref;
  if (typeof ref === "string" && ref.startsWith("#/$defs/")) return defs[ref.slice(8)] ?? {};
  return schema;
}

/** The widget for one field: plain types get their input, an enum (a ``Literal``) a select,
 * everything else (lists, dicts, nested models, unions) JSON text. */
export function widgetFor(schema: JsonSchema, defs: Record<string, JsonSchema> = {}): Widget {
  const hasDefault = Object.prototype.hasOwnProperty.call(schema, "default");
  const base: Widget = { kind: "json", options: [], fallback: schema.default, hasDefault, nullable: false };
  let s = resolve(schema, defs);
  const anyOf = Array.isArray(s.anyOf) ? (s.anyOf as JsonSchema[]) : null;
  if (anyOf) {
    const real = anyOf.filter((a) => a.type !== "null");
    base.nullable = real.length < anyOf.length;
    if (real.length !== 1) return base;
    s = resolve(real[0], defs);
  }
  if (Array.isArray(s.enum) && s.enum.length) return { ...base, kind: "enum", options: s.enum };
  if (s.const !== undefined) return { ...base, kind: "enum", options: [s.const] };
  switch (s.type) {
    case "string":
      return { ...base, kind: "text" };
    case "integer":
      return { ...base, kind: "integer" };
    case "number":
      return { ...base, kind: "number" };
    case "boolean":
      return { ...base, kind: "boolean" };
    default:
      return base;
  }
}

export type Parsed = { value: unknown } | { skip: true } | { error: string };

/** What a widget's raw text means: ``skip`` leaves the field to its default (an empty box),
 * ``error`` says what is wrong with it. */
export function parseValue(w: Widget, raw: string | boolean): Parsed {
  if (w.kind === "boolean") return { value: raw === true || raw === "true" };
  const text = String(raw);
  if (w.kind === "text") return text === "" ? { skip: true } : { value: text };
  if (text.trim() === "") return { skip: true };
  if (w.kind === "enum") {
    const picked = w.options.find((o) => JSON.stringify(o) === text);
    return picked === undefined ? { error: `pick one of ${w.options.map((o) => JSON.stringify(o)).join(", ")}` } : { value: picked };
  }
  if (w.kind === "integer") {
    const n = Number(text);
    return Number.isInteger(n) ? { value: n } : { error: "must be a whole number" };
  }
  if (w.kind === "number") {
    const n = Number(text);
    return Number.isFinite(n) ? { value: n } : { error: "must be a number" };
  }
  try {
    return { value: JSON.parse(text) };
  } catch (err) {
    return { error: `is not valid JSON (${(err as Error).message}); write e.g. ["a", "b"] or {"key": 1}` };
  }
}

/** The placeholder a widget shows: its default, or what to type. */
export function placeholder(w: Widget): string {
  if (w.hasDefault) return `default: ${JSON.stringify(w.fallback)}`;
  return w.kind === "json" ? "JSON, e.g. [] or {}" : "required";
}

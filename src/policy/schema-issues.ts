/**
 * Error formatting: ajv's errors become located issues that say what was
 * expected (in words, from schema.ts) and what was found, with a
 * "did you mean" for a misspelt key.
 *
 * @example
 * ```ts
 * schemaIssues(source, data, errors);
 * // [{ line: 7, column: 10, path: "reconcile.backoff.max", message: 'expected a duration like "30s", got "fast"' }]
 * ```
 */
import type { ErrorObject } from "ajv";
import type { PolicyIssue } from "./errors.ts";
import { expectedPhrase, GENERIC_HANDLER_SCHEMA, schemaNodeAt } from "./schema.ts";
import { formatKeyPath, type Segment, type SourceMap } from "./source-map.ts";
import { BUILTIN_PLUGIN_TYPES } from "./types.ts";

/** Located issues for ajv's errors on `data`. */
export function schemaIssues(source: SourceMap, data: unknown, errors: readonly ErrorObject[]): PolicyIssue[] {
  return errors
    .filter((error) => error.propertyName === undefined) // the `propertyNames` error itself says it better
    .map((error) => schemaIssue(source, data, error));
}

function schemaIssue(source: SourceMap, data: unknown, error: ErrorObject): PolicyIssue {
  const segments = pointerSegments(error.instancePath, data);
  const parentSchema = () => schemaNodeAt(error.schemaPath.slice(0, error.schemaPath.lastIndexOf("/"))) as Record<string, unknown> | undefined;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case "additionalProperties": {
      const key = String(params.additionalProperty);
      return source.lazyIssueAt([...segments, key], "key", () => {
        const known = Object.keys((parentSchema()?.properties as object | undefined) ?? {});
        const builtin = segments.length === 2 && segments[0] === "handlers" && key === "kind";
        const why = builtin ? ` (${String(segments[1])} is built in and takes no kind)` : "";
        return `expected one of the keys ${known.join(", ")}${why}, got unknown key ${describeKey(key)}${suggestion(key, known)}`;
      });
    }
    case "required": {
      const key = String(params.missingProperty);
      if (parentSchema() === GENERIC_HANDLER_SCHEMA) {
        const builtins = BUILTIN_PLUGIN_TYPES.join(", ");
        return source.lazyIssueAt(
          segments,
          "key",
          () => `expected kind: generic (${String(segments[1])} is not a built-in type: ${builtins}), got no kind`,
        );
      }
      const message = () => {
        const property = (parentSchema()?.properties as Record<string, unknown> | undefined)?.[key];
        return `expected ${expectedPhrase(property) ?? "a value"}, got no ${JSON.stringify(key)} key (it is required)`;
      };
      return source.lazyIssueAt(segments, "key", message, formatKeyPath([...segments, key]));
    }
    case "uniqueItems": {
      const first = Math.min(Number(params.i), Number(params.j));
      const again = Math.max(Number(params.i), Number(params.j));
      return source.lazyIssueAt([...segments, again], "value", () => {
        const found = valueAt(data, segments);
        const item = Array.isArray(found) ? found[again] : undefined;
        return `expected each item once, got ${describeFound(item)} again (also ${formatKeyPath([...segments, first])})`;
      });
    }
    case "propertyNames": {
      const name = String(params.propertyName);
      return source.lazyIssueAt([...segments, name], "key", () => `expected a non-empty plugin type, got ${JSON.stringify(name)}`);
    }
    default:
      return source.lazyIssueAt(segments, "value", () => {
        const found = valueAt(data, segments);
        const expected = expectedPhrase(parentSchema()) ?? `a value that ${error.message ?? "matches the schema"}`;
        const what = segments.length === 0 && found === null ? "an empty document" : describeFound(found);
        return `expected ${expected}, got ${what}`;
      });
  }
}

/** JSON pointer -> key path; list indexes become numbers by looking at the data. */
function pointerSegments(pointer: string, data: unknown): Segment[] {
  if (pointer === "") return [];
  const segments: Segment[] = [];
  let current: unknown = data;
  for (const raw of pointer.slice(1).split("/")) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(current)) {
      segments.push(Number(key));
      current = current[Number(key)];
    } else {
      segments.push(key);
      current = isRecord(current) && Object.hasOwn(current, key) ? current[key] : undefined;
    }
  }
  return segments;
}

function valueAt(data: unknown, segments: readonly Segment[]): unknown {
  let current = data;
  for (const segment of segments) {
    if (Array.isArray(current) && typeof segment === "number") current = current[segment];
    else if (isRecord(current) && Object.hasOwn(current, segment)) current = current[segment];
    else return undefined;
  }
  return current;
}

/** A found value in a few words; long strings are cut so one error stays one line. */
export function describeFound(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "string") return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (Array.isArray(value)) return value.length === 0 ? "an empty list" : "a list";
  if (value instanceof Uint8Array) return "binary data";
  if (typeof value === "object") return Object.keys(value).length === 0 ? "an empty mapping" : "a mapping";
  return String(value);
}

function describeKey(key: string): string {
  return JSON.stringify(key.length > 80 ? `${key.slice(0, 77)}...` : key);
}

/** ` (did you mean "recursive"?)` when a known key is one or two edits away, or differs only in case. */
function suggestion(key: string, known: readonly string[]): string {
  // A key far longer than every known one cannot be two edits from any: skip the quadratic distance.
  if (key.length > 40) return "";
  const allowedEdits = key.length >= 5 ? 2 : 1;
  const close = known.find(
    (candidate) =>
      candidate.toLowerCase() === key.toLowerCase() ||
      (Math.abs(candidate.length - key.length) <= allowedEdits && editDistance(candidate, key) <= allowedEdits),
  );
  return close === undefined ? "" : ` (did you mean ${JSON.stringify(close)}?)`;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    previous = row;
  }
  return previous[b.length]!;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

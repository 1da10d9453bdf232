/**
 * Test data for the interop tests: messages generated from their descriptors
 * with every field set to a distinct non-default value, and the check that the
 * data really covers every field of every message the services use.
 */
import assert from "node:assert/strict";
import { create, type DescField, type DescMessage, type DescMethod, type DescService, equals, type Message, ScalarType, toJsonString } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";

// ---------------------------------------------------------------------------
// Test data: every field of every message set, distinct values throughout.

let counter = 0;
const next = () => ++counter;

/** How many instances it takes to set every member of the message's largest oneof. */
function variantCount(desc: DescMessage): number {
  return Math.max(1, ...desc.oneofs.map((oneof) => oneof.fields.length));
}

/**
 * A message with every field set to a non-default value; `variant` picks
 * which member of each oneof is set.
 */
export function fill(desc: DescMessage, variant = 0, depth = 0): Message {
  if (depth > 8) throw new Error(`message nesting too deep at ${desc.typeName}`);
  if (desc.typeName === "google.protobuf.Timestamp") {
    const n = next();
    return create(desc, { seconds: 1_700_000_000n + BigInt(n), nanos: 1_000 * n + 1 } as never);
  }
  const init: Record<string, unknown> = {};
  for (const oneof of desc.oneofs) {
    const member = oneof.fields[variant % oneof.fields.length]!;
    init[oneof.localName] = { case: member.localName, value: fieldValue(member, variant, depth) };
  }
  for (const field of desc.fields) {
    if (field.oneof === undefined) init[field.localName] = fieldValue(field, variant, depth);
  }
  return create(desc, init as never);
}

function fieldValue(field: DescField, variant: number, depth: number): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return scalarValue(field.scalar, field.name);
    case "enum":
      return Math.max(...field.enum.values.map((v) => v.number));
    case "message":
      // protobuf-es holds wrapper fields (google.protobuf.BoolValue, ...) unboxed.
      if (isWrapperDesc(field.message)) return scalarValue(field.message.fields[0]!.scalar!, field.name);
      return fill(field.message, variant, depth + 1);
    case "list":
      return [0, 1].map((i) => {
        if (field.listKind === "scalar") return scalarValue(field.scalar, field.name);
        if (field.listKind === "enum") return field.enum.values[field.enum.values.length - 1 - i]!.number;
        return fill(field.message, variant + i, depth + 1);
      });
    case "map":
      return Object.fromEntries(
        [0, 1].map((i) => {
          const key = `${field.name}-key-${next()}`;
          if (field.mapKind === "scalar") return [key, scalarValue(field.scalar, field.name)];
          if (field.mapKind === "enum") return [key, field.enum.values[field.enum.values.length - 1]!.number];
          return [key, fill(field.message, variant + i, depth + 1)];
        }),
      );
  }
}

/** Values chosen to break a codec that loses 64-bit precision, sign or unsignedness. */
function scalarValue(scalar: ScalarType, name: string): unknown {
  const n = next();
  switch (scalar) {
    case ScalarType.STRING:
      return `${name}-${n}`;
    case ScalarType.BOOL:
      return true;
    case ScalarType.BYTES:
      return new Uint8Array([n & 0xff, 0, 0xff]);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return -n;
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return 4_000_000_000 + n;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return (n % 2 === 0 ? 1n : -1n) * (2n ** 62n + BigInt(n));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return 2n ** 64n - 1n - BigInt(n);
    default:
      return n + 0.5;
  }
}

export interface Exchange {
  method: DescMethod;
  request: Message;
  responses: Message[];
}

/** One request and its response(s) per method; server streams send several, covering every oneof case. */
export function exchangesFor(service: DescService): Map<string, Exchange> {
  const exchanges = new Map<string, Exchange>();
  for (const method of service.methods) {
    const count = method.methodKind === "server_streaming" ? Math.max(3, variantCount(method.output)) : 1;
    exchanges.set(method.name, {
      method,
      request: fill(method.input),
      responses: Array.from({ length: count }, (_, i) => fill(method.output, i)),
    });
  }
  return exchanges;
}

export function describeMismatch(schema: DescMessage, actual: Message, expected: Message): string | undefined {
  if (equals(schema, actual, expected)) return undefined;
  return `${schema.typeName} differs\n  got:      ${safeJson(schema, actual)}\n  expected: ${safeJson(schema, expected)}`;
}

export function safeJson(schema: DescMessage, message: Message): string {
  try {
    return toJsonString(schema, message);
  } catch {
    return JSON.stringify(message, (_k, v: unknown) => (typeof v === "bigint" ? `${v}n` : v));
  }
}

export function loaderMismatch(actual: unknown, expected: unknown): string | undefined {
  try {
    assert.deepStrictEqual(actual, expected);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

// ---------------------------------------------------------------------------
// The data above really sets every field of every message these services use.

export function reachableMessages(services: DescService[]): Map<string, DescMessage> {
  const found = new Map<string, DescMessage>();
  const visit = (desc: DescMessage) => {
    if (found.has(desc.typeName)) return;
    found.set(desc.typeName, desc);
    for (const field of desc.fields) {
      if (field.fieldKind === "message") visit(field.message);
      if (field.fieldKind === "list" && field.listKind === "message") visit(field.message);
      if (field.fieldKind === "map" && field.mapKind === "message") visit(field.message);
    }
  };
  for (const service of services) for (const method of service.methods) [method.input, method.output].forEach(visit);
  return found;
}

export function recordSetFields(desc: DescMessage, message: Message, seen: Map<string, Set<string>>): void {
  const r = reflect(desc, message);
  const set = seen.get(desc.typeName) ?? new Set<string>();
  seen.set(desc.typeName, set);
  const fields = message as unknown as Record<string, unknown>;
  for (const field of desc.fields) {
    if (!r.isSet(field)) continue;
    set.add(field.name);
    const value = field.oneof ? (fields[field.oneof.localName] as { value: unknown }).value : fields[field.localName];
    if (field.fieldKind === "message" && isWrapperDesc(field.message)) {
      seen.set(field.message.typeName, new Set(["value"]));
    } else if (field.fieldKind === "message") {
      recordSetFields(field.message, value as Message, seen);
    }
    if (field.fieldKind === "list" && field.listKind === "message") {
      for (const item of value as Message[]) recordSetFields(field.message, item, seen);
    }
    if (field.fieldKind === "map" && field.mapKind === "message") {
      for (const item of Object.values(value as Record<string, Message>)) recordSetFields(field.message, item, seen);
    }
  }
}

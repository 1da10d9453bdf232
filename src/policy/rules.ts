/**
 * The rules a JSON Schema cannot express, each reported as a located issue:
 * keys given twice or that are not plain scalars (looked for in the YAML
 * source, where the first occurrence is known), unique watch directories,
 * `types` naming declared handlers only, durations above 0 where a zero would
 * spin, durations at most 2^31-1 ms (the longest timer Node keeps: a longer
 * one fires after 1 ms), and backoff.initial at most backoff.max.
 *
 * Each rule looks only at values of the right shape; the schema reports the rest.
 */
import { posix } from "node:path";
import { isMap, isScalar, isSeq, type Node as YamlNode } from "yaml";
import { formatDuration, isDuration, MAX_TIMER_MS, parseDuration } from "./duration.ts";
import type { PolicyIssue } from "./errors.ts";
import { POLICY_DURATION_PATTERN, POLICY_SCHEMA } from "./schema.ts";
import { describeFound, isRecord } from "./schema-issues.ts";
import { keyText, type Segment, type SourceMap } from "./source-map.ts";

/** Duration settings whose zero would spin a loop or fail every call. */
const POSITIVE_DURATIONS: readonly Segment[][] = [
  ["reconcile", "resync"],
  ["reconcile", "backoff", "initial"],
  ["reconcile", "backoff", "max"],
  ["reconcile", "timeouts", "dial"],
  ["reconcile", "timeouts", "getInfo"],
  ["reconcile", "timeouts", "notify"],
  ["fleet", "keepalive"],
];

/** MQTT carries the keepalive in 16 bits of seconds. */
const MAX_KEEPALIVE_MS = 65_535_000;

/** Every duration setting of the schema (the properties whose pattern is the duration pattern). */
export const DURATION_SETTINGS: readonly Segment[][] = durationSettings(POLICY_SCHEMA, []);

function durationSettings(schema: Record<string, unknown>, at: Segment[]): Segment[][] {
  if (schema.pattern === POLICY_DURATION_PATTERN) return [at];
  const properties = (schema.properties ?? {}) as Record<string, Record<string, unknown>>;
  return Object.entries(properties).flatMap(([key, child]) => durationSettings(child, [...at, key]));
}

/** Keys that are not plain scalars, and keys given twice in one mapping. */
export function keyIssues(source: SourceMap): PolicyIssue[] {
  const issues: PolicyIssue[] = [];
  const walk = (node: unknown, segments: Segment[]): void => {
    if (isMap(node)) {
      const firstLine = new Map<string, number>();
      for (const pair of node.items) {
        const key = keyText(pair.key);
        const keyNode = pair.key as YamlNode;
        if (!isScalar(keyNode)) {
          const found = isSeq(keyNode) ? "a list" : isMap(keyNode) ? "a mapping" : "no key";
          issues.push(source.issueAtOffset(keyNode?.range?.[0] ?? 0, segments, `expected a plain key, got ${found} as a key`));
          continue;
        }
        // yaml's own uniqueKeys error points at the repeat only; this one also names the first line.
        const seenAt = firstLine.get(key);
        if (seenAt === undefined) {
          firstLine.set(key, source.lineOf(keyNode));
        } else {
          const shown = JSON.stringify(key.length > 80 ? `${key.slice(0, 77)}...` : key);
          const message = segments.length === 1 && segments[0] === "handlers"
            ? `expected each handler type declared once, got ${key} declared again (first at line ${seenAt})`
            : `expected each key once, got ${shown} again (first at line ${seenAt})`;
          issues.push(source.issueAtOffset(keyNode.range?.[0] ?? 0, [...segments, key], message));
        }
        walk(pair.value, [...segments, key]);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, index) => walk(item, [...segments, index]));
    }
  };
  walk(source.doc.contents, []);
  return issues;
}

/** The rules on values, checked on the data with defaults filled in. */
export function semanticIssues(source: SourceMap, data: unknown): PolicyIssue[] {
  if (!isRecord(data)) return [];
  return [...watchIssues(source, data), ...durationIssues(source, data), ...fleetIssues(source, data)];
}

function watchIssues(source: SourceMap, data: Record<string, unknown>): PolicyIssue[] {
  const issues: PolicyIssue[] = [];
  const known = isRecord(data.handlers) ? new Set(Object.keys(data.handlers)) : null;
  const watchedAt = new Map<string, number>();
  (Array.isArray(data.watch) ? data.watch : []).forEach((entry: unknown, index: number) => {
    if (!isRecord(entry)) return;
    if (typeof entry.path === "string" && entry.path.startsWith("/")) {
      const dir = normalizeDir(entry.path);
      const first = watchedAt.get(dir);
      if (first === undefined) {
        watchedAt.set(dir, index);
      } else {
        issues.push(
          source.issueAt(
            ["watch", index, "path"],
            "value",
            `expected a directory not watched already, got ${JSON.stringify(entry.path)} (the directory of watch[${first}].path)`,
          ),
        );
      }
    }
    if (known !== null && Array.isArray(entry.types)) {
      entry.types.forEach((type: unknown, typeIndex: number) => {
        if (typeof type !== "string" || type === "" || known.has(type)) return;
        issues.push(
          source.lazyIssueAt(
            ["watch", index, "types", typeIndex],
            "value",
            () => `expected a declared handler type (${declaredNames(known)}), got ${describeFound(type)}`,
          ),
        );
      });
    }
  });
  return issues;
}

/** The declared handler types for a message: the first ten, then how many more. */
function declaredNames(known: ReadonlySet<string>): string {
  const names = [...known].filter((name) => name !== "");
  if (names.length === 0) return "none declared";
  const shown = names.slice(0, 10).map((name) => (name.length > 80 ? `${name.slice(0, 77)}...` : name));
  return names.length > 10 ? `${shown.join(", ")} and ${names.length - 10} more` : shown.join(", ");
}

function durationIssues(source: SourceMap, data: Record<string, unknown>): PolicyIssue[] {
  const issues: PolicyIssue[] = [];
  const msAt = (segments: readonly Segment[]): number | undefined => {
    let value: unknown = data;
    for (const segment of segments) value = isRecord(value) ? value[segment] : undefined;
    return typeof value === "string" && isDuration(value) ? parseDuration(value) : undefined;
  };
  const given = (segments: readonly Segment[]) => {
    let value: unknown = data;
    for (const segment of segments) value = isRecord(value) ? value[segment] : undefined;
    return JSON.stringify(value);
  };
  for (const segments of DURATION_SETTINGS) {
    const ms = msAt(segments);
    if (ms !== undefined && ms > MAX_TIMER_MS) {
      issues.push(
        source.issueAt(
          segments,
          "value",
          `expected a duration of at most ${formatDuration(MAX_TIMER_MS)} (2^31-1 ms, the longest timer), got ${given(segments)}`,
        ),
      );
    }
  }
  for (const segments of POSITIVE_DURATIONS) {
    if (msAt(segments) === 0) {
      issues.push(source.issueAt(segments, "value", `expected a duration above 0, got ${given(segments)}`));
    }
  }
  const initial = ["reconcile", "backoff", "initial"];
  const max = ["reconcile", "backoff", "max"];
  const initialMs = msAt(initial);
  const maxMs = msAt(max);
  if (initialMs !== undefined && maxMs !== undefined && initialMs > maxMs) {
    issues.push(
      source.has(initial)
        ? source.issueAt(initial, "value", `expected at most reconcile.backoff.max (${formatDuration(maxMs)}), got ${given(initial)}`)
        : source.issueAt(max, "value", `expected at least reconcile.backoff.initial (${formatDuration(initialMs)}), got ${given(max)}`),
    );
  }
  return issues;
}

/** The keepalive fits MQTT's field; a client certificate comes with its key. */
function fleetIssues(source: SourceMap, data: Record<string, unknown>): PolicyIssue[] {
  const fleet = data.fleet;
  if (!isRecord(fleet)) return [];
  const issues: PolicyIssue[] = [];
  const keepalive = fleet.keepalive;
  if (typeof keepalive === "string" && isDuration(keepalive) && parseDuration(keepalive) > MAX_KEEPALIVE_MS) {
    issues.push(source.issueAt(["fleet", "keepalive"], "value", `expected a duration of at most ${formatDuration(MAX_KEEPALIVE_MS)} (65535 s, MQTT's limit), got ${JSON.stringify(keepalive)}`));
  }
  const tls = fleet.tls;
  if (isRecord(tls) && (typeof tls.cert === "string") !== (typeof tls.key === "string")) {
    const [given, missing] = typeof tls.cert === "string" ? ["cert", "key"] : ["key", "cert"];
    issues.push(source.issueAt(["fleet", "tls", given], "value", `expected fleet.tls.${missing} beside fleet.tls.${given} (a client certificate needs its key), got no ${missing}`));
  }
  return issues;
}

/** `/a//b/` and `/a/b` name one directory. */
export function normalizeDir(path: string): string {
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith("/") ? normal.slice(0, -1) : normal;
}

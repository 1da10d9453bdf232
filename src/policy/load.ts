/**
 * Policy loading: YAML text -> schema check -> semantic rules -> typed
 * {@link Policy} with every default filled in. Every problem of a file is
 * reported at once, each located at a line and column of the YAML source
 * (an unknown key at the key itself, a wrong value at the value).
 *
 * @example
 * ```ts
 * const policy = await resolvePolicy(flags.config); // throws PolicyError
 * policy.reconcile.backoff.maxMs; // 122000
 * ```
 */
import { readFile, stat } from "node:fs/promises";
import { hostname } from "node:os";
import { posix } from "node:path";
import type { ErrorObject } from "ajv";
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type Node as YamlNode } from "yaml";
import { DEFAULT_POLICY_YAML, EMBEDDED_DEFAULT_SOURCE } from "./default-policy.ts";
import { formatDuration, isDuration, parseDuration } from "./duration.ts";
import { PolicyError, type PolicyIssue } from "./errors.ts";
import { expectedPhrase, GENERIC_HANDLER_SCHEMA, policyValidator } from "./schema.ts";
import { BUILTIN_PLUGIN_TYPES, isBuiltinPluginType, type HandlerPolicy, type Policy } from "./types.ts";
import type { LogFormat, LogLevel } from "../log/logger.ts";

/** Where the policy is looked for when no `--config` is given. */
export const DEFAULT_POLICY_PATH = "/etc/edgeplug/policy.yaml";

/**
 * Parses and checks a policy. `file` names the source in error messages.
 * Throws a {@link PolicyError} listing every problem, sorted by position.
 */
export function parsePolicy(text: string, file: string): Policy {
  const lineCounter = new LineCounter();
  // Duplicate keys are found below, where the key path and the first occurrence are known.
  // logLevel "error": yaml would otherwise print its own warnings to stderr; they are reported below.
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: false, logLevel: "error" });
  const source = new SourceMap(doc, lineCounter, file);

  const syntaxProblems = [...doc.errors, ...doc.warnings];
  if (syntaxProblems.length > 0) {
    // A document that is not valid YAML has no reliable structure to check further.
    throw new PolicyError(
      sortIssues(syntaxProblems.map((problem) => source.issueAtOffset(problem.pos[0], [], `invalid YAML: ${problem.message}`))),
    );
  }

  const data: unknown = doc.toJS();
  const issues = [...keyIssues(source), ...schemaIssues(source, data), ...semanticIssues(source, data)];
  if (issues.length > 0) throw new PolicyError(sortIssues(dedupe(issues)));
  return withDefaults(data as RawPolicy, handlerOrder(source), file);
}

/**
 * Reads and parses a policy file. A file that cannot be read is a
 * {@link PolicyError} at line 0, column 0 saying "cannot read".
 */
export async function loadPolicyFile(path: string): Promise<Policy> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new PolicyError([{ file: path, line: 0, column: 0, path: "", message: `cannot read the policy file: ${reason}` }]);
  }
  return parsePolicy(text, path);
}

/**
 * The policy a command runs with: `configPath` when given, else
 * /etc/edgeplug/policy.yaml when it exists, else the embedded default
 * (source "<embedded default>"). `systemPolicyPath` is replaceable for tests.
 */
export async function resolvePolicy(
  configPath: string | undefined,
  options: { systemPolicyPath?: string } = {},
): Promise<Policy> {
  if (configPath !== undefined) return loadPolicyFile(configPath);
  const systemPath = options.systemPolicyPath ?? DEFAULT_POLICY_PATH;
  if (await exists(systemPath)) return loadPolicyFile(systemPath);
  return parsePolicy(DEFAULT_POLICY_YAML, EMBEDDED_DEFAULT_SOURCE);
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (error) {
    // Only absence falls back to the default: a policy that exists but cannot be read is an error.
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    return true;
  }
}

type Segment = string | number;

/** Renders a key path: dots between keys, `[i]` for list items, keys verbatim. */
export function formatKeyPath(segments: readonly Segment[]): string {
  let text = "";
  for (const segment of segments) {
    const key = segment === "" ? '""' : segment;
    text += typeof key === "number" ? `[${key}]` : text === "" ? key : `.${key}`;
  }
  return text;
}

interface Located {
  key: YamlNode | null;
  value: YamlNode | null;
}

/** Finds YAML nodes by key path and turns them into located issues. */
class SourceMap {
  readonly doc: Document;
  readonly lineCounter: LineCounter;
  readonly file: string;

  constructor(doc: Document, lineCounter: LineCounter, file: string) {
    this.doc = doc;
    this.lineCounter = lineCounter;
    this.file = file;
  }

  /** The key and value nodes at `segments`, or the deepest ones that exist. */
  find(segments: readonly Segment[]): Located {
    let found: Located = { key: null, value: (this.doc.contents as YamlNode | null) ?? null };
    for (const segment of segments) {
      const node = this.resolve(found.value);
      if (isMap(node)) {
        // The last pair wins, as in toJS(), so errors point at the value that was checked.
        const pair = node.items.findLast((item) => keyText(item.key) === String(segment));
        if (pair === undefined) break;
        found = { key: pair.key as YamlNode, value: (pair.value as YamlNode | null) ?? null };
      } else if (isSeq(node) && typeof segment === "number" && segment < node.items.length) {
        found = { key: null, value: node.items[segment] as YamlNode };
      } else {
        break;
      }
    }
    return found;
  }

  resolve(node: YamlNode | null): YamlNode | null {
    return isAlias(node) ? ((node.resolve(this.doc) as YamlNode | undefined) ?? null) : node;
  }

  /** An issue at the key (`"key"`) or the value (`"value"`) found at `segments`. */
  issueAt(segments: readonly Segment[], at: "key" | "value", message: string): PolicyIssue {
    const { key, value } = this.find(segments);
    const keyStart = key?.range?.[0];
    // An empty value (`key:` and nothing) has no text of its own: point at its key.
    const valueIsEmpty = isScalar(value) && value.value === null && value.range != null && value.range[0] === value.range[1];
    const valueStart = value && !valueIsEmpty ? value.range?.[0] : undefined;
    const offset = at === "key" ? (keyStart ?? valueStart) : (valueStart ?? keyStart);
    return this.issueAtOffset(offset ?? value?.range?.[0] ?? 0, segments, message);
  }

  issueAtOffset(offset: number, segments: readonly Segment[], message: string): PolicyIssue {
    const { line, col } = this.lineCounter.linePos(offset);
    return { file: this.file, line, column: col, path: formatKeyPath(segments), message };
  }

  lineOf(node: YamlNode): number {
    return this.lineCounter.linePos(node.range?.[0] ?? 0).line;
  }
}

/** A key as toJS() names it (an empty key is ""). */
function keyText(key: unknown): string {
  if (isScalar(key)) return key.value === null ? "" : String(key.value);
  return String(key);
}

function keyIssues(source: SourceMap): PolicyIssue[] {
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
        const seenAt = firstLine.get(key);
        if (seenAt === undefined) {
          firstLine.set(key, source.lineOf(keyNode));
        } else {
          const message =
            segments.length === 1 && segments[0] === "handlers"
              ? `expected each handler type declared once, got ${key} declared again (first at line ${seenAt})`
              : `expected each key once, got ${JSON.stringify(key)} again (first at line ${seenAt})`;
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

function schemaIssues(source: SourceMap, data: unknown): PolicyIssue[] {
  const validate = policyValidator();
  if (validate(data)) return [];
  return (validate.errors ?? [])
    .filter((error) => error.propertyName === undefined) // the `propertyNames` error itself says it better
    .map((error) => schemaIssue(source, data, error));
}

function schemaIssue(source: SourceMap, data: unknown, error: ErrorObject): PolicyIssue {
  const segments = pointerSegments(error.instancePath, data);
  const expected = expectedPhrase(error.parentSchema) ?? `a value that ${error.message ?? "matches the schema"}`;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case "additionalProperties": {
      const key = String(params.additionalProperty);
      const known = Object.keys((error.parentSchema?.properties as object | undefined) ?? {});
      const builtin = segments.length === 2 && segments[0] === "handlers" && key === "kind";
      const why = builtin ? ` (${String(segments[1])} is built in and takes no kind)` : "";
      return source.issueAt(
        [...segments, key],
        "key",
        `expected one of the keys ${known.join(", ")}${why}, got unknown key ${JSON.stringify(key)}${suggestion(key, known)}`,
      );
    }
    case "required": {
      const key = String(params.missingProperty);
      const issuePath = [...segments, key];
      if (error.parentSchema === GENERIC_HANDLER_SCHEMA) {
        const builtins = BUILTIN_PLUGIN_TYPES.join(", ");
        return source.issueAt(
          segments,
          "key",
          `expected kind: generic (${String(segments[1])} is not a built-in type: ${builtins}), got no kind`,
        );
      }
      const property = (error.parentSchema?.properties as Record<string, unknown> | undefined)?.[key];
      const what = expectedPhrase(property) ?? "a value";
      const issue = source.issueAt(segments, "key", `expected ${what}, got no ${JSON.stringify(key)} key (it is required)`);
      return { ...issue, path: formatKeyPath(issuePath) };
    }
    case "uniqueItems": {
      const first = Math.min(Number(params.i), Number(params.j));
      const again = Math.max(Number(params.i), Number(params.j));
      const item = (error.data as unknown[])[again];
      return source.issueAt(
        [...segments, again],
        "value",
        `expected each item once, got ${describeFound(item)} again (also ${formatKeyPath([...segments, first])})`,
      );
    }
    case "propertyNames": {
      const name = String(params.propertyName);
      return source.issueAt([...segments, name], "key", `expected a non-empty plugin type, got ${JSON.stringify(name)}`);
    }
    default: {
      const found = segments.length === 0 && error.data === null ? "an empty document" : describeFound(error.data);
      return source.issueAt(segments, "value", `expected ${expected}, got ${found}`);
    }
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
      current = isRecord(current) ? current[key] : undefined;
    }
  }
  return segments;
}

function describeFound(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "string") return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (Array.isArray(value)) return value.length === 0 ? "an empty list" : "a list";
  if (typeof value === "object") return Object.keys(value).length === 0 ? "an empty mapping" : "a mapping";
  return String(value);
}

/** ` (did you mean "recursive"?)` when a known key is one or two edits away, or differs only in case. */
function suggestion(key: string, known: readonly string[]): string {
  const allowedEdits = key.length >= 5 ? 2 : 1;
  const close = known.find(
    (candidate) => candidate.toLowerCase() === key.toLowerCase() || editDistance(candidate, key) <= allowedEdits,
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

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Rules a JSON Schema cannot express. Each looks only at values of the right shape; the schema reports the rest. */
function semanticIssues(source: SourceMap, data: unknown): PolicyIssue[] {
  if (!isRecord(data)) return [];
  const issues: PolicyIssue[] = [];
  const declared =
    data.handlers === undefined ? [...BUILTIN_PLUGIN_TYPES] : isRecord(data.handlers) ? Object.keys(data.handlers) : null;

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
    if (declared !== null && Array.isArray(entry.types)) {
      entry.types.forEach((type: unknown, typeIndex: number) => {
        if (typeof type !== "string" || type === "" || declared.includes(type)) return;
        const names = declared.filter((name) => name !== "").join(", ") || "none declared";
        issues.push(
          source.issueAt(
            ["watch", index, "types", typeIndex],
            "value",
            `expected a declared handler type (${names}), got ${JSON.stringify(type)}`,
          ),
        );
      });
    }
  });

  const reconcile = isRecord(data.reconcile) ? data.reconcile : {};
  const backoff = isRecord(reconcile.backoff) ? reconcile.backoff : {};
  const timeouts = isRecord(reconcile.timeouts) ? reconcile.timeouts : {};
  // A zero period, delay or deadline would spin or fail every call.
  const mustBePositive: [Segment[], unknown][] = [
    [["reconcile", "resync"], reconcile.resync],
    [["reconcile", "backoff", "initial"], backoff.initial],
    [["reconcile", "backoff", "max"], backoff.max],
    [["reconcile", "timeouts", "dial"], timeouts.dial],
    [["reconcile", "timeouts", "getInfo"], timeouts.getInfo],
    [["reconcile", "timeouts", "notify"], timeouts.notify],
  ];
  for (const [segments, value] of mustBePositive) {
    if (typeof value === "string" && isDuration(value) && parseDuration(value) === 0) {
      issues.push(source.issueAt(segments, "value", `expected a duration above 0, got ${JSON.stringify(value)}`));
    }
  }

  const initialMs = durationOrDefault(backoff.initial, DEFAULTS.backoffInitialMs);
  const maxMs = durationOrDefault(backoff.max, DEFAULTS.backoffMaxMs);
  if (initialMs !== undefined && maxMs !== undefined && initialMs > maxMs) {
    issues.push(
      backoff.initial !== undefined
        ? source.issueAt(
            ["reconcile", "backoff", "initial"],
            "value",
            `expected at most reconcile.backoff.max (${formatDuration(maxMs)}), got ${JSON.stringify(backoff.initial)}`,
          )
        : source.issueAt(
            ["reconcile", "backoff", "max"],
            "value",
            `expected at least reconcile.backoff.initial (${formatDuration(initialMs)}), got ${JSON.stringify(backoff.max)}`,
          ),
    );
  }
  return issues;
}

/** Milliseconds of a valid duration, the default when absent, undefined when invalid (the schema reports it). */
function durationOrDefault(value: unknown, fallbackMs: number): number | undefined {
  if (value === undefined) return fallbackMs;
  return typeof value === "string" && isDuration(value) ? parseDuration(value) : undefined;
}

/** `/a//b/` and `/a/b` name one directory. */
function normalizeDir(path: string): string {
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith("/") ? normal.slice(0, -1) : normal;
}

function dedupe(issues: PolicyIssue[]): PolicyIssue[] {
  const seen = new Set<string>();
  return issues.filter((issue) => {
    // ajv may report one bad value twice (e.g. `type` and `enum`); keep the first.
    const key = `${issue.line}:${issue.column}:${issue.path}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

function sortIssues(issues: PolicyIssue[]): PolicyIssue[] {
  return issues.sort((a, b) => a.line - b.line || a.column - b.column || a.path.localeCompare(b.path));
}

/** Handler types in the order the YAML declares them (JS objects would put integer-like keys first). */
function handlerOrder(source: SourceMap): string[] {
  const node = source.resolve(source.find(["handlers"]).value);
  return isMap(node) ? node.items.map((pair) => keyText(pair.key)) : [];
}

const DEFAULTS = {
  registrationSocket: "/var/lib/kubelet/device-plugins/kubelet.sock",
  gracePeriodMs: 5 * 60_000,
  checkpointPath: "/var/lib/edgeplug/kubelet_internal_checkpoint",
  resyncMs: 10_000,
  backoffInitialMs: 500,
  backoffMaxMs: 122_000,
  dialMs: 10_000,
  getInfoMs: 1_000,
  notifyMs: 5_000,
  maxPlugins: 1024,
  maxDevicesPerResource: 100_000,
  apiSocket: "/run/edgeplug/api.sock",
  logLevel: "info" as LogLevel,
  logFormat: "json" as LogFormat,
};

interface RawHandler {
  kind?: "generic";
  versions?: string[];
  allow?: string[];
  deny?: string[];
}

/** The YAML as the schema guarantees it. */
interface RawPolicy {
  version: 1;
  nodeName?: string;
  watch: { path: string; recursive?: boolean; types?: string[] }[];
  handlers?: Record<string, RawHandler | null>;
  devicePlugins?: { registrationSocket?: string | null; gracePeriod?: string };
  checkpoint?: { path?: string };
  reconcile?: {
    resync?: string;
    backoff?: { initial?: string; max?: string };
    timeouts?: { dial?: string; getInfo?: string; notify?: string };
  };
  security?: { socketOwners?: number[]; maxPlugins?: number; maxDevicesPerResource?: number };
  api?: { socket?: string | null; socketGroup?: string | null; metrics?: string | null };
  log?: { level?: LogLevel; format?: LogFormat };
}

function withDefaults(raw: RawPolicy, declaredOrder: string[], source: string): Policy {
  const ms = (value: string | undefined, fallback: number) => (value === undefined ? fallback : parseDuration(value));
  const handlers = new Map<string, HandlerPolicy>();
  const rawHandlers = raw.handlers ?? Object.fromEntries(BUILTIN_PLUGIN_TYPES.map((type) => [type, {}]));
  const order = raw.handlers === undefined ? [...BUILTIN_PLUGIN_TYPES] : declaredOrder;
  for (const type of order) {
    const spec: RawHandler = rawHandlers[type] ?? {};
    handlers.set(type, {
      type,
      kind: isBuiltinPluginType(type) ? "builtin" : "generic",
      versions: spec.versions ? [...spec.versions] : null,
      allow: spec.allow ? [...spec.allow] : ["*"],
      deny: spec.deny ? [...spec.deny] : [],
    });
  }
  const { reconcile = {}, security = {}, api = {}, devicePlugins = {} } = raw;
  return {
    version: 1,
    // The kubelet's node name from the host name: trimmed and lower-cased.
    nodeName: raw.nodeName ?? hostname().trim().toLowerCase(),
    watch: raw.watch.map((entry) => ({
      path: normalizeDir(entry.path),
      recursive: entry.recursive ?? true,
      types: entry.types ? [...entry.types] : null,
    })),
    handlers,
    devicePlugins: {
      registrationSocket:
        devicePlugins.registrationSocket === undefined ? DEFAULTS.registrationSocket : devicePlugins.registrationSocket,
      gracePeriodMs: ms(devicePlugins.gracePeriod, DEFAULTS.gracePeriodMs),
    },
    checkpoint: { path: raw.checkpoint?.path ?? DEFAULTS.checkpointPath },
    reconcile: {
      resyncMs: ms(reconcile.resync, DEFAULTS.resyncMs),
      backoff: {
        initialMs: ms(reconcile.backoff?.initial, DEFAULTS.backoffInitialMs),
        maxMs: ms(reconcile.backoff?.max, DEFAULTS.backoffMaxMs),
      },
      timeouts: {
        dialMs: ms(reconcile.timeouts?.dial, DEFAULTS.dialMs),
        getInfoMs: ms(reconcile.timeouts?.getInfo, DEFAULTS.getInfoMs),
        notifyMs: ms(reconcile.timeouts?.notify, DEFAULTS.notifyMs),
      },
    },
    security: {
      socketOwners: security.socketOwners ? [...security.socketOwners] : defaultSocketOwners(),
      maxPlugins: security.maxPlugins ?? DEFAULTS.maxPlugins,
      maxDevicesPerResource: security.maxDevicesPerResource ?? DEFAULTS.maxDevicesPerResource,
    },
    api: {
      socket: api.socket === undefined ? DEFAULTS.apiSocket : api.socket,
      socketGroup: api.socketGroup ?? null,
      metrics: api.metrics ?? null,
    },
    log: { level: raw.log?.level ?? DEFAULTS.logLevel, format: raw.log?.format ?? DEFAULTS.logFormat },
    source,
  };
}

/** root and the agent's own uid (one entry when the agent runs as root). */
function defaultSocketOwners(): number[] {
  const own = process.getuid?.() ?? 0;
  return own === 0 ? [0] : [0, own];
}

/**
 * Policy loading: a bounded read, a bounded YAML scan (yaml-scan.ts: tokens,
 * nodes and nesting), composition, schema check (defaults filled in from
 * the schema) -> the rules a schema cannot express -> typed {@link Policy}.
 * Every problem of a file is reported at once (the first 100, then a count),
 * each located at a line and column of the YAML source.
 *
 * The work is bounded so that a SIGHUP reload never holds the agent's event
 * loop for long: files over {@link MAX_POLICY_BYTES} are refused before they
 * are parsed; the scan, whose cost grows with the file, runs in slices of a
 * few milliseconds ({@link loadPolicyFile}); what follows it, in one piece,
 * sees at most MAX_YAML_NODES nodes nested at most MAX_NESTING_DEPTH deep;
 * aliases may expand to at most {@link MAX_ALIAS_COUNT} nodes, and
 * collecting and locating errors is linear in their number (no recursion or
 * argument spread over input-sized lists).
 *
 * @example
 * ```ts
 * const policy = await resolvePolicy(flags.config); // throws PolicyError
 * policy.reconcile.backoff.maxMs; // 122000
 * ```
 */
import { Buffer } from "node:buffer";
import fs from "node:fs";
import { promisify } from "node:util";
import { Composer, type CST, type Document, isAlias, isMap, LineCounter, visit, YAMLParseError } from "yaml";
import { messageOf } from "../log/error-message.ts";
import { defaultPolicyData, EMBEDDED_DEFAULT_SOURCE } from "./default-policy.ts";
import { type FilledPolicy, toPolicy } from "./effective.ts";
import { PolicyError, type PolicyIssue } from "./errors.ts";
import { keyIssues, semanticIssues } from "./rules.ts";
import { schemaIssues } from "./schema-issues.ts";
import { keyText, SourceMap } from "./source-map.ts";
import type { Policy } from "./types.ts";
import { validatePolicyData } from "./validator.ts";
import { inSlices, inSlicesSync, type ScanResult, scanYaml } from "./yaml-scan.ts";

export { MAX_NESTING_DEPTH, MAX_YAML_NODES, MAX_YAML_TOKENS } from "./yaml-scan.ts";

/** Where the policy is looked for when no `--config` is given. */
export const DEFAULT_POLICY_PATH = "/etc/edgeplug/policy.yaml";
/** The largest policy file read (a real one is a few KiB); larger ones are refused unparsed. */
export const MAX_POLICY_BYTES = 1024 * 1024;
/** How many nodes aliases may expand to in all (yaml's `maxAliasCount`): alias bombs are refused. */
export const MAX_ALIAS_COUNT = 100;

/**
 * Parses and checks a policy at once (for `validate`, `policy show` and
 * tests). `file` names the source in error messages. Throws a
 * {@link PolicyError} listing every problem, sorted by position.
 */
export function parsePolicy(text: string, file: string): Policy {
  checkSize(text, file);
  const lineCounter = new LineCounter();
  return checkScanned(text, file, lineCounter, inSlicesSync(scanYaml(text, lineCounter)));
}

/** Like {@link parsePolicy}, with the YAML scan run in slices that let the event loop serve other work in between. */
export async function parsePolicyInSlices(text: string, file: string): Promise<Policy> {
  checkSize(text, file);
  const lineCounter = new LineCounter();
  return checkScanned(text, file, lineCounter, await inSlices(scanYaml(text, lineCounter)));
}

function checkSize(text: string, file: string): void {
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_POLICY_BYTES) throw tooLarge(file, size);
}

function checkScanned(text: string, file: string, lineCounter: LineCounter, scan: ScanResult): Policy {
  if ("limit" in scan) {
    const { line, col } = lineCounter.linePos(scan.limit.offset);
    throw new PolicyError([{ file, line, column: col, path: "", message: scan.limit.message }]);
  }
  const doc = compose(scan.tokens, text.length);
  const source = new SourceMap(doc, lineCounter, file);
  const syntaxProblems = [...doc.errors, ...doc.warnings];
  if (syntaxProblems.length > 0) {
    // A document that is not valid YAML has no reliable structure to check further.
    throw new PolicyError(
      sortIssues(syntaxProblems.map((problem) => source.issueAtOffset(problem.pos[0], [], `invalid YAML: ${problem.message}`))),
    );
  }
  const data = toData(doc, source);
  const issues = keyIssues(source);
  append(issues, schemaIssues(source, data, validatePolicyData(data)));
  append(issues, semanticIssues(source, data));
  if (issues.length > 0) throw new PolicyError(sortIssues(dedupe(issues)));
  return toPolicy(data as FilledPolicy, handlerOrder(source), file);
}

/** The one document of the CST (yaml's parseDocument, on tokens already scanned). */
function compose(tokens: CST.Token[], length: number): Document {
  // Duplicate keys are found in rules.ts, where the key path and the first occurrence are known.
  // logLevel "error": yaml would otherwise print its own warnings to stderr; they are reported here.
  const composer = new Composer({ prettyErrors: false, uniqueKeys: false, logLevel: "error" });
  let doc: Document | undefined;
  for (const next of composer.compose(tokens, true, length)) {
    if (doc === undefined) {
      doc = next;
      continue;
    }
    doc.errors.push(new YAMLParseError([next.range[0], next.range[1]], "MULTIPLE_DOCS", "Source contains multiple documents; please use YAML.parseAllDocuments()"));
    break;
  }
  return doc!;
}

/** Appends `items` one by one: a spread into push() overflows the stack past about 100k items. */
function append<T>(target: T[], items: readonly T[]): void {
  for (const item of items) target.push(item);
}

/** What loading a policy file may tell on the way (a SIGHUP reload logs it). */
export interface LoadObserver {
  /** The file was read, `bytes` long; checking it starts now. */
  read?(path: string, bytes: number): void;
}

/**
 * Reads and parses a policy file, reading at most {@link MAX_POLICY_BYTES}
 * (+1 to tell a larger file). Only a regular file is read: a FIFO, a device
 * or a socket is refused without waiting on it (a FIFO with no writer would
 * otherwise hold the open, and with it a reload, a stop or `validate`, until
 * something writes to it).
 * A file that cannot be read is a {@link PolicyError} of the whole file.
 * The YAML scan runs in slices ({@link parsePolicyInSlices}).
 */
export async function loadPolicyFile(path: string, observer: LoadObserver = {}): Promise<Policy> {
  if (path === "") {
    throw new PolicyError([fileIssue("--config", "expected the path of a policy file, got an empty string")]);
  }
  let bytes: Buffer;
  try {
    bytes = await readBounded(path);
  } catch (error) {
    const reason = messageOf(error);
    throw new PolicyError([fileIssue(path, `cannot read the policy file: ${reason}`)]);
  }
  if (bytes.length > MAX_POLICY_BYTES) throw tooLarge(path, undefined);
  observer.read?.(path, bytes.length);
  return parsePolicyInSlices(bytes.toString("utf8"), path);
}

/** The embedded default policy (no YAML to parse): its `source` is "<embedded default>". */
export function loadDefaultPolicy(): Policy {
  const data = defaultPolicyData();
  const errors = validatePolicyData(data);
  if (errors.length > 0) throw new Error(`the embedded default policy is invalid: ${JSON.stringify(errors)}`);
  return toPolicy(data as unknown as FilledPolicy, [], EMBEDDED_DEFAULT_SOURCE);
}

/**
 * The policy a command runs with: `configPath` when given, else
 * /etc/edgeplug/policy.yaml when it exists, else the embedded default
 * (source "<embedded default>"). `systemPolicyPath` is replaceable for tests.
 */
export async function resolvePolicy(
  configPath: string | undefined,
  options: { systemPolicyPath?: string; observer?: LoadObserver } = {},
): Promise<Policy> {
  if (configPath !== undefined) return loadPolicyFile(configPath, options.observer);
  const systemPath = options.systemPolicyPath ?? DEFAULT_POLICY_PATH;
  if (await exists(systemPath)) return loadPolicyFile(systemPath, options.observer);
  return loadDefaultPolicy();
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

/** Opening never waits (a FIFO's open does without O_NONBLOCK) and never makes a terminal the agent's. */
const OPEN_FLAGS = fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK ?? 0) | (fs.constants.O_NOCTTY ?? 0);

async function readBounded(path: string): Promise<Buffer> {
  const fd = await open(path, OPEN_FLAGS);
  try {
    const kind = fileKind(await fstat(fd));
    if (kind !== "a regular file") throw new Error(`expected a regular file, got ${kind}`);
    const buffer = Buffer.alloc(MAX_POLICY_BYTES + 1);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await read(fd, buffer, filled, buffer.length - filled, null);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return buffer.subarray(0, filled);
  } finally {
    await close(fd);
  }
}

/**
 * node:fs's callbacks, promisified, not node:fs/promises: that module loads
 * Node's file watchers and readline with it into every command reading a
 * policy (docs/performance.md, "Costs behind choices in the code").
 */
const stat = promisify(fs.stat);
const open = promisify(fs.open);
const fstat = promisify(fs.fstat);
const read = promisify(fs.read);
const close = promisify(fs.close);

function fileKind(stats: fs.Stats): string {
  if (stats.isFile()) return "a regular file";
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isCharacterDevice()) return "a character device";
  if (stats.isBlockDevice()) return "a block device";
  if (stats.isSocket()) return "a socket";
  if (stats.isDirectory()) return "a directory";
  return "a special file";
}

function fileIssue(file: string, message: string): PolicyIssue {
  return { file, line: 0, column: 0, path: "", message };
}

function tooLarge(file: string, size: number | undefined): PolicyError {
  const found = size === undefined ? "a larger file" : `${size} bytes`;
  return new PolicyError([fileIssue(file, `expected a policy file of at most ${MAX_POLICY_BYTES} bytes (1 MiB), got ${found}`)]);
}

/** The document as plain data; an alias without an anchor, or aliases expanding too far, are located errors. */
function toData(doc: Document, source: SourceMap): unknown {
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (error) {
    if (!(error instanceof ReferenceError)) throw error;
    let issue: PolicyIssue | undefined;
    visit(doc, {
      Alias: (_key, node) => {
        const missing = source.resolve(node) === null;
        if (!missing && issue !== undefined) return undefined;
        const message = missing ? `invalid YAML: alias *${node.source} has no anchor &${node.source} before it` : `invalid YAML: aliases expand to more than ${MAX_ALIAS_COUNT} nodes (an alias bomb?)`;
        issue = source.issueAtOffset(node.range?.[0] ?? 0, [], message);
        return missing ? visit.BREAK : undefined;
      },
    });
    throw new PolicyError([issue ?? source.issueAtOffset(0, [], `invalid YAML: ${error.message}`)]);
  }
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
  if (!source.has(["handlers"])) return [];
  const node = source.resolve(source.find(["handlers"]).value);
  return isMap(node) && !isAlias(node) ? node.items.map((pair) => keyText(pair.key)) : [];
}

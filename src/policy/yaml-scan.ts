/**
 * The bounded first pass over a policy's YAML: yaml's lexer and CST parser,
 * driven one token at a time, stop at the first of three limits, before
 * anything is composed or checked, so that the later passes (composition,
 * schema, rules, locating errors) only ever see a document of bounded size:
 *
 * - {@link MAX_YAML_TOKENS} lexical tokens of any kind (spaces, line breaks
 *   and comments included): the lexer and parser cost per token;
 * - {@link MAX_YAML_NODES} nodes (scalars, aliases, list items and flow
 *   collections): composing and checking cost per node;
 * - {@link MAX_NESTING_DEPTH} lists and mappings nested in one another: the
 *   composer and yaml's `toJS()` recurse per level.
 *
 * The scan is a generator that pauses every few hundred tokens, so a reload
 * can run it in slices between the agent's other work ({@link inSlices}).
 *
 * @example
 * ```ts
 * const scan = inSlicesSync(scanYaml(text, lineCounter)); // or: await inSlices(scanYaml(...))
 * if ("limit" in scan) refuse(scan.limit.offset, scan.limit.message);
 * ```
 */
import process from "node:process";
import { setImmediate as nextTurn } from "node:timers/promises";
import { CST, Lexer, type LineCounter, Parser } from "yaml";

/** Lexical tokens of any kind a policy may have; a real one has a few thousand. */
export const MAX_YAML_TOKENS = 100_000;
/** Scalars (keys included), aliases, list items and flow collections a policy may have; a real one has a few hundred. */
export const MAX_YAML_NODES = 5000;
/** Lists and mappings nested in one another, the top-level mapping included. */
export const MAX_NESTING_DEPTH = 64;

/** Tokens between two pauses of the scan. */
const PAUSE_EVERY = 256;
/** How long one slice of the scan may hold the event loop before it lets other work run. */
const SLICE_MS = 4;

/** A limit the document went past, at the offset of the token that went past it. */
export interface ScanLimit {
  offset: number;
  message: string;
}

export type ScanResult = { tokens: CST.Token[] } | { limit: ScanLimit };

const NODE_TOKENS: ReadonlySet<string> = new Set(["scalar", "alias", "seq-item-ind", "flow-map-start", "flow-seq-start", "explicit-key-ind"]);
const COLLECTIONS: ReadonlySet<string> = new Set(["block-map", "block-seq", "flow-collection"]);
/** The lexer's markers that stand for no source text (start of a document, end of flow, "a scalar follows"). */
const MARKERS: ReadonlySet<string> = new Set([CST.DOCUMENT, CST.FLOW_END, CST.SCALAR]);

/**
 * Lexes and parses `text` into yaml's CST tokens (what `Composer` takes),
 * recording line starts in `lineCounter`; stops at the first limit passed.
 * Yields (nothing) every {@link PAUSE_EVERY} tokens.
 */
export function* scanYaml(text: string, lineCounter: LineCounter): Generator<void, ScanResult> {
  const parser = new Parser(lineCounter.addNewLine);
  lineCounter.addNewLine(0);
  const tokens: CST.Token[] = [];
  let lexemes = 0;
  let nodes = 0;
  let offset = 0;
  for (const lexeme of new Lexer().lex(text)) {
    if (++lexemes > MAX_YAML_TOKENS) {
      return { limit: { offset, message: `expected a policy of at most ${MAX_YAML_TOKENS} YAML tokens (words, indicators, spaces, line breaks, comments), got more` } };
    }
    if (NODE_TOKENS.has(CST.tokenType(lexeme) ?? "") && ++nodes > MAX_YAML_NODES) {
      return { limit: { offset, message: `expected a policy of at most ${MAX_YAML_NODES} YAML nodes (scalars, aliases, list items), got more` } };
    }
    for (const token of parser.next(lexeme)) tokens.push(token);
    // The parser's stack holds the collections open around this token (and the document, and a scalar being read).
    if (parser.stack.length > MAX_NESTING_DEPTH && nestingOf(parser.stack) > MAX_NESTING_DEPTH) {
      return { limit: { offset, message: `expected lists and mappings nested at most ${MAX_NESTING_DEPTH} deep, got deeper` } };
    }
    if (!MARKERS.has(lexeme)) offset += lexeme.length;
    if (lexemes % PAUSE_EVERY === 0) yield;
  }
  for (const token of parser.end()) tokens.push(token);
  return { tokens };
}

function nestingOf(stack: readonly CST.Token[]): number {
  let depth = 0;
  for (const token of stack) if (COLLECTIONS.has(token.type)) depth++;
  return depth;
}

/** Runs `steps` to the end at once (`validate`, tests). */
export function inSlicesSync<T>(steps: Generator<void, T>): T {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** Runs `steps` to the end, letting the event loop run other work every {@link SLICE_MS} ms. */
export async function inSlices<T>(steps: Generator<void, T>): Promise<T> {
  let sliceEnd = nowMs() + SLICE_MS;
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    if (nowMs() < sliceEnd) continue;
    await nextTurn();
    sliceEnd = nowMs() + SLICE_MS;
  }
}

/** A monotonic clock without the global `performance`, whose first use loads Node's perf_hooks into every command's start (docs/performance.md, "Costs behind choices in the code"). */
function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

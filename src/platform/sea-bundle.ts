/**
 * How the single executable carries its bundle: as an asset, wrapped in a
 * function, run by the executable's main script (src/sea-loader.ts) with V8's
 * code cache made by scripts/code-cache.ts. scripts/build.ts, the loader and
 * the cache maker share these names, so what one writes the others find.
 */
import { Buffer } from "node:buffer";
import process from "node:process";

/**
 * Groups of commands, each with a bundle of its own (only its commands and
 * `version`, which scripts/code-cache.ts runs first) and a V8 code cache made
 * after only that group ran. Every start decodes its bundle into a fresh
 * string (a page fault per 4 KiB, each dear on a VM whose host hands memory
 * back) and deserializes its whole cache (one cache for every command made
 * `version` pay for every command's code; docs/performance.md, "Command
 * start-up"), so a command loads what its group runs. `base`: the whole bundle, with the
 * cache of the top level, the entry and `version`, for every command not
 * named here (`run` and `help` included, and any argv that starts with an
 * option).
 */
export const CODE_CACHE_COMMANDS = {
  base: [],
  policy: ["validate", "policy"],
  status: ["status", "allocate", "release"],
  probe: ["probe"],
  fleet: ["fleet"],
} as const satisfies Record<string, readonly string[]>;
export type CodeCacheName = keyof typeof CODE_CACHE_COMMANDS;
export const CODE_CACHE_NAMES = Object.keys(CODE_CACHE_COMMANDS) as CodeCacheName[];

/** `base` runs the whole bundle. */
export function bundleAsset(name: CodeCacheName): string {
  return name === "base" ? "edgeplug.cjs" : `edgeplug.${name}.cjs`;
}

/** The commands the bundle of the group `name` holds: its own and `version`. */
export function groupBundleCommands(name: Exclude<CodeCacheName, "base">): ReadonlySet<string> {
  return new Set([...CODE_CACHE_COMMANDS[name], "version"]);
}

export function codeCacheAsset(name: CodeCacheName): string {
  return `edgeplug.cjs.${name}.code-cache`;
}

/** The cache for the command `argv` (the executable's arguments) names; a wrong guess costs only start-up time. */
export function codeCacheFor(argv: readonly string[]): CodeCacheName {
  const command = argv[0];
  for (const name of CODE_CACHE_NAMES) {
    if ((CODE_CACHE_COMMANDS[name] as readonly string[]).includes(command ?? "")) return name;
  }
  return "base";
}

/** What the bundle is told of its code cache (src/platform/build-info.ts reads it). */
export type CodeCacheState = "accepted" | "rejected" | "absent";

/** The bundle as it is stored: a function of the CommonJS values a main script gets, and its code cache's state. */
export type WrappedBundle = (
  require: (id: string) => unknown,
  module: { exports: Record<string, unknown> },
  exports: Record<string, unknown>,
  filename: string,
  dirname: string,
  codeCache: CodeCacheState,
) => void;

/**
 * The bundle's source as stored. The parameter EDGEPLUG_CODE_CACHE is the
 * free name build-info.ts declares; the source must be compiled exactly
 * like this both when the cache is made and when it is used.
 */
export function wrapBundle(source: string): string {
  return `(function (require, module, exports, __filename, __dirname, EDGEPLUG_CODE_CACHE) {${source}\n})`;
}

/**
 * The wrapped bundle's bytes as stored: one byte a character (latin1), so that
 * the loader turns them into V8's one-byte string with a copy and no UTF-8
 * decoding. esbuild escapes all but a few characters (a `µ` in a regular
 * expression); one past U+00FF is refused here, at build time.
 */
export function encodeBundle(wrapped: string): Buffer {
  const wide = [...wrapped].find((character) => character.charCodeAt(0) > 0xff);
  if (wide !== undefined) throw new Error(`the bundle holds ${JSON.stringify(wide)}, which latin1 cannot store`);
  return Buffer.from(wrapped, "latin1");
}

/** The inverse of {@link encodeBundle}. */
export function decodeBundle(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1");
}

/** The bundle needs nothing but Node's built-in modules: everything else is bundled. */
export function builtinRequire(id: string): unknown {
  const builtin = process.getBuiltinModule(id);
  if (builtin === undefined) throw new Error(`edgeplug: the bundle asked for ${JSON.stringify(id)}, which is not a built-in module`);
  return builtin;
}

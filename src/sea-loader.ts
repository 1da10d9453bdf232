/**
 * The single executable's main script (scripts/build.ts). It runs a bundle
 * of src/sea-main.ts, which the executable carries as assets: the one of the
 * command's group (CODE_CACHE_COMMANDS), with V8's code cache of that bundle
 * made after the build had it run the group's commands
 * (scripts/code-cache.ts). The cache Node makes for a SEA's main
 * script holds only what V8 compiles before the script runs, its top level,
 * so every function a command called was compiled from source on every
 * start; from these caches (one per group of commands: CODE_CACHE_COMMANDS)
 * the functions of `version`, `validate`, `policy show`, `status` and
 * `probe` come compiled. A cache V8 rejects (other V8
 * flags, through the `--node-options` debug switch) costs only start-up
 * time; `version --verbose` says which happened.
 *
 * Before any of that, the environment is made edgeplug's alone
 * (src/platform/clean-start.ts): that may replace this process.
 */
import { Buffer } from "node:buffer";
import path from "node:path";
import process from "node:process";
import { getAssetKeys, getRawAsset } from "node:sea";
import { Script } from "node:vm";
import { builtinRequire, bundleAsset, codeCacheAsset, codeCacheFor, type CodeCacheState, decodeBundle, type WrappedBundle } from "./platform/sea-bundle.ts";
import { startWithCleanEnvironment } from "./platform/clean-start.ts";

startWithCleanEnvironment();

const group = codeCacheFor(process.argv.slice(2));
const bundle = bundleAsset(group);
const cacheAsset = codeCacheAsset(group);
// Views of the executable's own bytes, not copies (getAsset copies, and decoding UTF-8 was a measurable part of every start: docs/performance.md, "Costs behind choices in the code").
const cachedData = getAssetKeys().includes(cacheAsset) ? Buffer.from(getRawAsset(cacheAsset)) : undefined;
const script = new Script(decodeBundle(new Uint8Array(getRawAsset(bundle))), { filename: bundle, cachedData });
const state: CodeCacheState = cachedData === undefined ? "absent" : script.cachedDataRejected === true ? "rejected" : "accepted";
const module = { exports: {} };
(script.runInThisContext() as WrappedBundle)(builtinRequire, module, module.exports, process.execPath, path.dirname(process.execPath), state);

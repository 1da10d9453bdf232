/**
 * Builds an edgeplug executable, a Node single-executable application (SEA),
 * for one target (`--target linux-x64|linux-arm64`, default: this machine):
 *   1. esbuild bundles src/sea-main.ts into one CommonJS file (an ESM bundle
 *      breaks on @grpc/grpc-js-style dynamic requires),
 *      with the commit, target and runtime defined in, stored wrapped in a
 *      function (src/platform/sea-bundle.ts), and once more per group of
 *      commands with only that group's commands and `version` (the others'
 *      modules replaced by a stub that throws), and src/sea-loader.ts, the
 *      executable's main script, which runs the bundle of the command's group;
 *   2. the target's own pinned Node binary (scripts/node-runtime.ts), natively
 *      or for another architecture under qemu user emulation, runs the bundle's
 *      short commands and makes V8's code cache of it (scripts/code-cache.ts),
 *      then the SEA blob (configuration: scripts/sea-config.ts) with the
 *      bundle and that cache as assets. Without qemu the blob is made by the
 *      host's Node of the same version without a code cache (V8's code cache
 *      does not carry across architectures);
 *      The process-exit watcher native/pidfd.c is compiled for the target
 *      (scripts/native.ts) and added as one more asset;
 *   3. that target binary is copied, stripped (the target's binutils strip)
 *      and gets the blob injected with postject;
 *   4. the result runs `--version` (natively or under qemu), or, where it
 *      cannot run, its ELF header must name the target's machine.
 * Output: dist/edgeplug without --target, dist/edgeplug-TARGET with it.
 * Run by `npm run build [-- --target T]` after code generation and the typecheck.
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { build, type PluginBuild } from "esbuild";
import { nodeRuntime } from "./node-runtime.ts";
import { COMMANDS } from "../src/cli/cli.ts";
import { bundleAsset, CODE_CACHE_NAMES, codeCacheAsset, type CodeCacheName, encodeBundle, groupBundleCommands, wrapBundle } from "../src/platform/sea-bundle.ts";
import { SEA_V8_FLAGS, seaConfig } from "./sea-config.ts";
import { buildPidfdModule, compilerFor, missingCompilerHint } from "./native.ts";
import { PIDFD_MODULE_ASSET } from "../src/platform/process-watch.ts";
import { elfMachine, hostTarget, missingRunnerHint, runnerFor, runTargetBinary, stripFor, type Target, targetByName } from "./targets.ts";

const root = path.resolve(import.meta.dirname, "..");
const dist = path.join(root, "dist");
/** The fuse Node looks for to know a blob was injected (Node's SEA documentation). */
const SEA_FUSE = "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2";

const started = performance.now();
function step(name: string, detail: string, since: number): void {
  process.stdout.write(`build: ${name.padEnd(8)} ${detail} (${Math.round(performance.now() - since)} ms)\n`);
}
function note(text: string): void {
  process.stdout.write(`build: ${text}\n`);
}

function shortCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "unknown";
  }
}

/**
 * Injects the blob with postject's CLI. Its ELF library prints harmless
 * "Can't find string offset for section name" warnings for Node's notes;
 * the output is shown only when injection fails.
 */
function inject(file: string, blob: string): void {
  const cli = path.join(root, "node_modules", "postject", "dist", "cli.js");
  const result = spawnSync(process.execPath, [cli, file, "NODE_SEA_BLOB", blob, "--sentinel-fuse", SEA_FUSE], {
    encoding: "utf8",
  });
  if (result.status !== 0) {
    throw new Error(`postject failed with status ${result.status}:\n${result.stdout}${result.stderr}`);
  }
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

interface BuildOptions {
  target: Target;
  executable: string;
  /** false: the blob carries no code cache even when the target's node could make one (bit-reproducible blob). */
  codeCache: boolean;
}

function parseOptions(): BuildOptions {
  const { values } = parseArgs({
    options: { target: { type: "string" }, "no-code-cache": { type: "boolean" } },
    strict: true,
  });
  const target = values.target === undefined ? hostTarget() : targetByName(values.target);
  const executable = path.join(dist, values.target === undefined ? "edgeplug" : `edgeplug-${target.name}`);
  return { target, executable, codeCache: values["no-code-cache"] !== true };
}

async function main(): Promise<void> {
  const { target, executable, codeCache } = parseOptions();
  const work = path.join(dist, `build-${target.name}`);
  fs.mkdirSync(work, { recursive: true });
  const bundleFile = (group: CodeCacheName) => path.join(work, bundleAsset(group));
  const wrappedFile = (group: CodeCacheName) => path.join(work, bundleAsset(group).replace(/\.cjs$/, ".wrapped.cjs"));
  const loaderFile = path.join(work, "loader.cjs");
  const blobFile = path.join(work, "edgeplug.blob");
  const seaConfigFile = path.join(work, "sea-config.json");
  /** Built under another name and renamed at the end: an interrupted build never leaves a bare node called edgeplug. */
  const unfinished = `${executable}.partial`;

  let since = performance.now();
  const runtime = nodeRuntime(target, { log: note });
  if (!/^24\./.test(runtime.version)) throw new Error(`${runtime.packageSpec}: the executable embeds Node 24 (scripts/node-runtimes.json)`);
  const runner = runnerFor(target);
  const blobMaker = runner && codeCache ? { command: [...runner.prefix, runtime.binary], useCodeCache: true, how: `${runtime.packageSpec} (${runner.description}), code cache on` } : {
    command: [nodeRuntime(hostTarget(), { log: note }).binary],
    useCodeCache: false,
    how: `host node v${runtime.version}, code cache off${codeCache ? `: ${missingRunnerHint(target)}` : " (--no-code-cache)"}`,
  };
  step("runtime", `${target.name}: ${runtime.packageSpec} ${path.relative(root, runtime.binary)}`, since);

  since = performance.now();
  const commit = shortCommit();
  const common = {
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node24",
    // Minifying saves 0.3 MiB of a 104 MiB file and no measurable startup time
    // (code cache); readable stack traces from the field are worth more.
    minify: false,
    // An empty import.meta in the bundle is a silent bug (a guard on import.meta.main never fires).
    logOverride: { "empty-import-meta": "error" },
    logLevel: "warning",
  } as const;
  const results = await Promise.all([
    ...CODE_CACHE_NAMES.map((group) =>
      build({
        ...common,
        entryPoints: [path.join(root, "src", "sea-main.ts")],
        outfile: bundleFile(group),
        define: {
          EDGEPLUG_BUILD_COMMIT: JSON.stringify(commit),
          EDGEPLUG_BUILD_TARGET: JSON.stringify(target.name),
          EDGEPLUG_BUILD_RUNTIME: JSON.stringify(runtime.packageSpec),
        },
        plugins: group === "base" ? [withoutSocks, mqttDependenciesFromNode] : [withoutSocks, mqttDependenciesFromNode, onlyCommands(group)],
      })
    ),
    build({ ...common, entryPoints: [path.join(root, "src", "sea-loader.ts")], outfile: loaderFile }),
  ]);
  const warnings = results.reduce((sum, result) => sum + result.warnings.length, 0);
  if (warnings > 0) throw new Error(`esbuild reported ${warnings} warning(s)`);
  for (const group of CODE_CACHE_NAMES) fs.writeFileSync(wrappedFile(group), encodeBundle(wrapBundle(fs.readFileSync(bundleFile(group), "utf8"))));
  const sizes = CODE_CACHE_NAMES.map((group) => `${bundleAsset(group)} ${mib(fs.statSync(bundleFile(group)).size)}`);
  step("bundle", `${sizes.join(", ")}, commit ${commit}`, since);

  const [maker, ...makerArgs] = blobMaker.command;
  const assets: Record<string, string> = Object.fromEntries(CODE_CACHE_NAMES.map((group) => [bundleAsset(group), wrappedFile(group)]));

  since = performance.now();
  const pidfdModule = path.join(work, PIDFD_MODULE_ASSET);
  fs.rmSync(pidfdModule, { force: true });
  if (compilerFor(target) === null) {
    note(`${target.name}: built without its pidfd module, so allocate --owner-pid is refused: ${missingCompilerHint(target)}`);
  } else {
    buildPidfdModule(target, pidfdModule, note);
    assets[PIDFD_MODULE_ASSET] = pidfdModule;
    step("native", `${path.relative(root, pidfdModule)} ${(fs.statSync(pidfdModule).size / 1024).toFixed(1)} KiB by ${path.basename(compilerFor(target)!)}`, since);
  }
  if (blobMaker.useCodeCache) {
    since = performance.now();
    const sizes: string[] = [];
    for (const name of CODE_CACHE_NAMES) {
      const file = path.join(work, codeCacheAsset(name));
      fs.rmSync(file, { force: true });
      // Made under the same V8 flags as the executable runs with: V8 rejects a
      // cache made under other flags, and every function is compiled from source.
      execFileSync(maker!, [...makerArgs, ...SEA_V8_FLAGS, path.join(root, "scripts", "code-cache.ts"), wrappedFile(name), name, file], {
        stdio: ["ignore", "pipe", "pipe"],
      });
      assets[codeCacheAsset(name)] = file;
      sizes.push(`${name} ${mib(fs.statSync(file).size)}`);
    }
    step("cache", `code caches after each group of commands ran: ${sizes.join(", ")}`, since);
  }

  since = performance.now();
  const config = seaConfig({ main: loaderFile, assets, blob: blobFile, useCodeCache: blobMaker.useCodeCache });
  fs.writeFileSync(seaConfigFile, JSON.stringify(config, null, 2) + "\n");
  execFileSync(maker!, [...makerArgs, ...SEA_V8_FLAGS, "--experimental-sea-config", seaConfigFile], { stdio: ["ignore", "pipe", "pipe"] });
  step("blob", `${path.relative(root, blobFile)} ${mib(fs.statSync(blobFile).size)} by ${blobMaker.how}`, since);

  since = performance.now();
  fs.rmSync(unfinished, { force: true });
  fs.copyFileSync(runtime.binary, unfinished);
  fs.chmodSync(unfinished, 0o755);
  const strip = stripFor(target);
  if (strip === null) {
    note(`no strip for ${target.triple} (Debian: binutils-${target.triple}): the executable keeps Node's symbols (about 18 MiB more)`);
  } else {
    const stripped = spawnSync(strip, [unfinished], { stdio: ["ignore", "ignore", "inherit"] });
    if (stripped.status !== 0) throw new Error(`${strip} failed with status ${stripped.status}`);
  }
  step("copy", `node ${mib(fs.statSync(unfinished).size)}${strip === null ? "" : ` stripped by ${path.basename(strip)}`}`, since);

  since = performance.now();
  inject(unfinished, blobFile);
  // postject writes the file in large chunks, which leaves it in the page cache
  // as large folios that the kernel maps whole when the program runs: about
  // 15 MiB more resident than the same bytes read from disk. A copy is cached
  // page by page, like an installed executable, so measurements of dist/edgeplug
  // show what a node sees.
  const copied = `${unfinished}.copy`;
  fs.copyFileSync(unfinished, copied);
  fs.rmSync(unfinished);
  fs.renameSync(copied, executable); // rename, not overwrite: a running executable keeps its old inode
  step("inject", `${path.relative(root, executable)} ${mib(fs.statSync(executable).size)}`, since);

  since = performance.now();
  const machine = elfMachine(executable);
  if (machine !== target.elfMachine) {
    throw new Error(`${path.relative(root, executable)}: ELF machine ${machine} is not ${target.elfMachineName} (${target.elfMachine})`);
  }
  if (runner === null) {
    step("check", `ELF machine ${target.elfMachineName}; not run: ${missingRunnerHint(target)}`, since);
  } else {
    const check = runTargetBinary(runner, executable, ["--version"]);
    const line = check.stdout.trim();
    if (check.status !== 0 || !line.startsWith("edgeplug ") || !line.includes(` ${target.name} `)) {
      throw new Error(`${path.relative(root, executable)} --version failed (status ${check.status}): ${check.stderr || check.stdout}`);
    }
    // Anything on stderr here (e.g. "Code cache data rejected") would greet every user of every command.
    if (check.stderr !== "") throw new Error(`${path.relative(root, executable)} --version wrote to stderr: ${check.stderr}`);
    if (blobMaker.useCodeCache) {
      const verbose = runTargetBinary(runner, executable, ["version", "--verbose"]);
      if (!verbose.stdout.split("\n").includes("code cache: on")) {
        throw new Error(`${path.relative(root, executable)}: V8 did not take the bundle's code cache (version --verbose: ${verbose.stdout}${verbose.stderr})`);
      }
    }
    step("check", `${line}${runner.prefix.length > 0 ? ` (${runner.description})` : ""}`, since);
  }
  note(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * For a group's bundle: src/cli/cli.ts's lazy imports of other commands'
 * modules (its command table's `import("./NAME.ts")`) load a stub that
 * throws, so that esbuild leaves those commands and what only they use out.
 * The loader starts a group's bundle only for its own commands, whose code
 * never asks for another command's.
 */
function onlyCommands(group: Exclude<CodeCacheName, "base">) {
  const kept = groupBundleCommands(group);
  for (const name of kept) {
    if (!(name in COMMANDS) || !fs.existsSync(path.join(root, "src", "cli", `${name}.ts`))) throw new Error(`group ${group}: no command module src/cli/${name}.ts`);
  }
  return {
    name: "only-commands",
    setup(plugin: PluginBuild) {
      plugin.onResolve({ filter: /^\.\/[a-z-]+\.ts$/ }, (args) => {
        const name = args.path.slice(2, -3);
        if (args.kind !== "dynamic-import" || args.importer !== path.join(root, "src", "cli", "cli.ts") || kept.has(name)) return undefined;
        return { path: name, namespace: "left-out-command" };
      });
      plugin.onLoad({ filter: /.*/, namespace: "left-out-command" }, (args) => ({
        contents: `throw new Error(${JSON.stringify(`edgeplug: the ${args.path} command is not in the bundle of the ${group} commands (src/platform/sea-bundle.ts)`)});`,
        loader: "js",
      }));
    },
  };
}

/**
 * mqtt.js (the fleet link) dials through a SOCKS proxy when MQTTJS_SOCKS_PROXY
 * names one, with the `socks` package. The fleet link refuses to start under
 * that variable (src/fleet/link.ts), so the package is left out of the bundle
 * for a stub whose client fails the way a failed proxy does.
 */
const withoutSocks = {
  name: "without-socks",
  setup(plugin: PluginBuild) {
    plugin.onResolve({ filter: /^socks$/ }, () => ({ path: "socks", namespace: "without-socks" }));
    plugin.onLoad({ filter: /.*/, namespace: "without-socks" }, () => ({
      contents: 'exports.SocksClient = class { constructor() { throw new Error("edgeplug: SOCKS proxies are not supported"); } };',
      loader: "js",
    }));
  },
};

/**
 * mqtt.js's dependencies that Node carries already or that only browsers
 * use: `readable-stream` (a copy of Node's streams, 190 KB of source, the
 * same API as node:stream, which it defers to under READABLE_STREAM=disable)
 * becomes node:stream, and `worker-timers` (for the `worker` timer variant,
 * which the fleet link never asks for) a stub that throws. Loaded with the
 * fleet link, they cost the agent memory for nothing.
 */
const mqttDependenciesFromNode = {
  name: "mqtt-dependencies-from-node",
  setup(plugin: PluginBuild) {
    plugin.onResolve({ filter: /^(readable-stream|worker-timers)$/ }, (args) => ({ path: args.path, namespace: "mqtt-dependencies-from-node" }));
    plugin.onLoad({ filter: /.*/, namespace: "mqtt-dependencies-from-node" }, (args) => ({
      contents: args.path === "readable-stream"
        ? 'module.exports = require("node:stream");'
        : 'exports.setInterval = exports.clearInterval = () => { throw new Error("edgeplug: worker timers are not in the bundle"); };',
      loader: "js",
    }));
  },
};

main().catch((error: unknown) => {
  process.stderr.write(`build failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});

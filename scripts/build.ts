/**
 * Builds dist/edgeplug, a Node single-executable application (SEA):
 *   1. esbuild bundles src/sea-main.ts into one CommonJS file (an ESM bundle
 *      breaks on @grpc/grpc-js-style dynamic requires; see runtime-notes.md),
 *      with the git commit defined in;
 *   2. the SEA blob is made, code cache on, by the npm `node` package's binary;
 *   3. that SAME binary is copied, stripped and gets the blob injected
 *      (a blob made by another Node version breaks the executable).
 * Run by `npm run build` after code generation and the typecheck.
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { build } from "esbuild";

const root = path.resolve(import.meta.dirname, "..");
const dist = path.join(root, "dist");
const nodeBinary = path.join(root, "node_modules", "node", "bin", "node");
const bundleFile = path.join(dist, "edgeplug.cjs");
const blobFile = path.join(dist, "edgeplug.blob");
const seaConfigFile = path.join(dist, "sea-config.json");
const executable = path.join(dist, "edgeplug");
/** Built under another name and renamed at the end: an interrupted build never leaves a bare node called edgeplug. */
const unfinished = path.join(dist, "edgeplug.partial");
/** The fuse Node looks for to know a blob was injected (Node's SEA documentation). */
const SEA_FUSE = "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2";

/**
 * V8 flags the executable always runs with, chosen for a small, flat RSS
 * (`npm run bench -- registration`, README "Memory"): an agent that mostly
 * waits needs neither a 16 MiB young generation nor optimising compilers.
 * - `--max-semi-space-size=2`: young generation of 2 MiB semi-spaces
 *   instead of up to 16 MiB (1 MiB saved no more and made a 100-socket
 *   registration burst cost about twice the CPU in scavenges);
 * - `--optimize-for-size`: slower heap growth and an eager memory reducer,
 *   which keeps RSS flat over plugin churn instead of growing to 250+ MiB;
 * - `--no-opt --no-maglev`: interpreter and Sparkplug only, so the compilers'
 *   code pages and optimised code never become resident.
 */
const SEA_V8_FLAGS = ["--max-semi-space-size=2", "--optimize-for-size", "--no-opt", "--no-maglev"];

const started = performance.now();
function step(name: string, detail: string, since: number): void {
  process.stdout.write(`build: ${name.padEnd(8)} ${detail} (${Math.round(performance.now() - since)} ms)\n`);
}

function shortCommit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim();
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

async function main(): Promise<void> {
  const nodeVersion = execFileSync(nodeBinary, ["--version"], { encoding: "utf8" }).trim();
  if (!/^v24\./.test(nodeVersion)) {
    throw new Error(`${nodeBinary} is ${nodeVersion}; the executable embeds Node 24 (run npm ci)`);
  }
  fs.mkdirSync(dist, { recursive: true });

  let since = performance.now();
  const commit = shortCommit();
  const result = await build({
    entryPoints: [path.join(root, "src", "sea-main.ts")],
    outfile: bundleFile,
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node24",
    // Minifying saves 0.3 MiB of a 104 MiB file and no measurable startup time
    // (code cache); readable stack traces from the field are worth more.
    minify: false,
    define: { EDGEPLUG_BUILD_COMMIT: JSON.stringify(commit) },
    // An empty import.meta in the bundle is a silent bug (a guard on import.meta.main never fires).
    logOverride: { "empty-import-meta": "error" },
    logLevel: "warning",
  });
  if (result.warnings.length > 0) throw new Error(`esbuild reported ${result.warnings.length} warning(s)`);
  step("bundle", `${path.relative(root, bundleFile)} ${mib(fs.statSync(bundleFile).size)}, commit ${commit}`, since);

  since = performance.now();
  const seaConfig = {
    main: bundleFile,
    output: blobFile,
    disableExperimentalSEAWarning: true,
    useCodeCache: true,
    useSnapshot: false,
    execArgv: ["--disable-sigusr1", ...SEA_V8_FLAGS],
    execArgvExtension: "cli",
  };
  fs.writeFileSync(seaConfigFile, JSON.stringify(seaConfig, null, 2) + "\n");
  // The code cache is made under the same V8 flags as the executable runs with:
  // V8 rejects a cache made under other flags (a warning on every start, and
  // every function compiled from source).
  execFileSync(nodeBinary, [...SEA_V8_FLAGS, "--experimental-sea-config", seaConfigFile], { stdio: ["ignore", "pipe", "pipe"] });
  step("blob", `${path.relative(root, blobFile)} ${mib(fs.statSync(blobFile).size)} by node ${nodeVersion}`, since);

  since = performance.now();
  fs.rmSync(unfinished, { force: true });
  fs.copyFileSync(nodeBinary, unfinished);
  fs.chmodSync(unfinished, 0o755);
  const stripped = spawnSync("strip", [unfinished], { stdio: ["ignore", "ignore", "inherit"] });
  const stripMissing = (stripped.error as NodeJS.ErrnoException | undefined)?.code === "ENOENT";
  if (stripMissing) {
    process.stdout.write("build: strip not found (binutils): the executable keeps Node's debug symbols (about 17 MiB more)\n");
  } else if (stripped.status !== 0) {
    throw new Error(`strip failed with status ${stripped.status}`);
  }
  step("copy", `node ${mib(fs.statSync(unfinished).size)}${stripMissing ? "" : " stripped"}`, since);

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
  fs.renameSync(copied, executable); // rename, not overwrite: a running dist/edgeplug keeps its old inode
  step("inject", `${path.relative(root, executable)} ${mib(fs.statSync(executable).size)}`, since);

  since = performance.now();
  const check = spawnSync(executable, ["--version"], { encoding: "utf8", env: {} });
  if (check.status !== 0 || !check.stdout.startsWith("edgeplug ")) {
    throw new Error(`dist/edgeplug --version failed (status ${check.status}): ${check.stderr || check.stdout}`);
  }
  // Anything on stderr here (e.g. "Code cache data rejected") would greet every user of every command.
  if (check.stderr !== "") throw new Error(`dist/edgeplug --version wrote to stderr: ${check.stderr}`);
  step("check", check.stdout.trim(), since);
  process.stdout.write(`build: done in ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`build failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});

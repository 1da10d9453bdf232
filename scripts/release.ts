/**
 * `npm run release`: builds every target (scripts/build.ts --target T) and
 * writes dist/release/:
 *   edgeplug-VERSION-linux-ARCH            the executable
 *   edgeplug-VERSION-linux-ARCH.tar.gz     edgeplug-VERSION-linux-ARCH/ holding the executable,
 *                                          edgeplug.service, policy.yaml (config/default.yaml),
 *                                          INSTALL and LICENSE.node (the embedded Node's license)
 *   SHA256SUMS                             sha256sum -c format, every file above
 * The tarballs are reproducible for the same inputs: entries sorted, one
 * mtime (SOURCE_DATE_EPOCH, else the commit's time), owner 0:0 with no
 * names, fixed modes, gzip without name or time (scripts/tar.ts). The
 * executables themselves differ between builds only by V8's code cache,
 * which is not deterministic; `--no-code-cache` makes them identical too.
 *
 * A release is never degraded quietly: when a target's executable would be
 * built without its code cache (no qemu for a foreign architecture) or
 * unstripped (no strip for its ELF files), the release fails before building
 * anything, naming what to install, unless `--allow-degraded` (or
 * EDGEPLUG_RELEASE_ALLOW_DEGRADED=1) asks for it; then each is a warning.
 *
 *   npm run release [-- --target linux-arm64] [-- --no-code-cache] [-- --allow-degraded]
 */
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import packageJson from "../package.json" with { type: "json" };
import { nodeRuntime } from "./node-runtime.ts";
import { type TarInput, writeTarGz } from "./tar.ts";
import { releaseDegradations, type Target, targetByName, TARGETS } from "./targets.ts";

const root = path.resolve(import.meta.dirname, "..");
const releaseDir = path.join(root, "dist", "release");
const version = packageJson.version;

function git(...args: string[]): string | null {
  try {
    return execFileSync("git", args, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return null;
  }
}

/** Every entry's mtime: SOURCE_DATE_EPOCH (the reproducible-builds convention), else the commit's time, else 0. */
function releaseTime(): number {
  const fromEnv = process.env.SOURCE_DATE_EPOCH;
  if (fromEnv !== undefined && fromEnv !== "") {
    if (!/^\d{1,12}$/.test(fromEnv)) throw new Error(`SOURCE_DATE_EPOCH must be whole seconds since 1970, got ${JSON.stringify(fromEnv)}`);
    return Number(fromEnv);
  }
  const commitTime = git("log", "-1", "--format=%ct");
  return commitTime !== null && /^\d+$/.test(commitTime) ? Number(commitTime) : 0;
}

function sha256(file: string): string {
  return crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** The tarball's entries for `target`, in name order: the directory first, then its files. */
function tarballEntries(target: Target, executable: string, license: string, commit: string): TarInput[] {
  const dir = `edgeplug-${version}-${target.name}`;
  const install = fs
    .readFileSync(path.join(root, "packaging", "INSTALL"), "utf8")
    .replaceAll("@VERSION@", version)
    .replaceAll("@TARGET@", target.name)
    .replaceAll("@COMMIT@", commit);
  const files: Array<[name: string, mode: number, data: Buffer]> = [
    ["INSTALL", 0o644, Buffer.from(install)],
    ["LICENSE.node", 0o644, fs.readFileSync(license)],
    ["edgeplug", 0o755, fs.readFileSync(executable)],
    ["edgeplug.service", 0o644, fs.readFileSync(path.join(root, "packaging", "edgeplug.service"))],
    ["policy.yaml", 0o644, fs.readFileSync(path.join(root, "config", "default.yaml"))],
  ];
  files.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return [
    { name: dir, type: "directory", mode: 0o755 },
    ...files.map(([name, mode, data]): TarInput => ({ name: `${dir}/${name}`, type: "file", mode, data })),
  ];
}

function main(): void {
  const { values } = parseArgs({
    options: { target: { type: "string", multiple: true }, "no-code-cache": { type: "boolean" }, "allow-degraded": { type: "boolean" } },
    strict: true,
  });
  const targets = values.target === undefined ? TARGETS : values.target.map(targetByName);
  const degradations = targets.flatMap((target) => releaseDegradations(target, values["no-code-cache"] !== true));
  const allowDegraded = values["allow-degraded"] === true || process.env.EDGEPLUG_RELEASE_ALLOW_DEGRADED === "1";
  if (degradations.length > 0 && !allowDegraded) {
    throw new Error(
      `the release would be degraded, so nothing was built:\n${degradations.map((line) => `  ${line}\n`).join("")}` +
        "install what is named, or ask for it with --allow-degraded (or EDGEPLUG_RELEASE_ALLOW_DEGRADED=1)",
    );
  }
  for (const line of degradations) process.stdout.write(`release: warning: degraded, as asked (--allow-degraded): ${line}\n`);
  const mtime = releaseTime();
  const commit = git("rev-parse", "--short", "HEAD") ?? "unknown";
  const dirty = git("status", "--porcelain", "--untracked-files=no");
  if (dirty) process.stdout.write(`release: warning: the checkout has uncommitted changes; the executables say commit ${commit}\n`);

  fs.rmSync(releaseDir, { recursive: true, force: true });
  fs.mkdirSync(releaseDir, { recursive: true });
  const artifacts: string[] = [];
  for (const target of targets) {
    execFileSync(
      process.execPath,
      [path.join(root, "scripts", "build.ts"), "--target", target.name, ...(values["no-code-cache"] ? ["--no-code-cache"] : [])],
      { stdio: "inherit" },
    );
    const license = nodeRuntime(target, { withLicense: true }).license;
    if (license === null) throw new Error(`no LICENSE for ${target.name}'s Node runtime`);
    const built = path.join(root, "dist", `edgeplug-${target.name}`);
    const executable = path.join(releaseDir, `edgeplug-${version}-${target.name}`);
    fs.copyFileSync(built, executable);
    fs.chmodSync(executable, 0o755);
    const tarball = `${executable}.tar.gz`;
    fs.writeFileSync(tarball, writeTarGz(tarballEntries(target, built, license, commit), mtime));
    artifacts.push(executable, tarball);
  }
  const sums = artifacts
    .map((file) => `${sha256(file)}  ${path.basename(file)}\n`)
    .sort((a, b) => (a.slice(66) < b.slice(66) ? -1 : 1))
    .join("");
  fs.writeFileSync(path.join(releaseDir, "SHA256SUMS"), sums);
  for (const file of artifacts) {
    process.stdout.write(`release: ${path.relative(root, file)} ${mib(fs.statSync(file).size)}\n`);
  }
  process.stdout.write(`release: ${path.relative(root, path.join(releaseDir, "SHA256SUMS"))} (${artifacts.length} files, mtime ${mtime})\n`);
}

try {
  main();
} catch (error) {
  process.stderr.write(`release failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}

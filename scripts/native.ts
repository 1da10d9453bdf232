/**
 * Builds native/pidfd.c, edgeplug's one native module (the process-exit
 * watcher, src/platform/process-watch.ts), for a target: a Node-API shared
 * object compiled with the machine's C compiler (the host's gcc, or Debian's
 * gcc-TRIPLE cross compiler with libc6-dev-ARCH-cross), against the headers
 * of the pinned Node runtime (scripts/node-runtime.ts), stripped. Node-API
 * is ABI-stable, so the module does not depend on Node's exact version; it
 * uses libuv's poll handle, whose ABI is fixed within libuv 1.x.
 * scripts/build.ts embeds the result in the executable as an asset.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { nodeHeaders } from "./node-runtime.ts";
import { findOnPath, hostTarget, stripFor, type Target } from "./targets.ts";

const root = path.resolve(import.meta.dirname, "..");
export const PIDFD_SOURCE = path.join(root, "native", "pidfd.c");

/** The C compiler for `target`: the host's gcc (or cc), or gcc-TRIPLE's; null when none is installed. */
export function compilerFor(target: Target): string | null {
  if (target.name === hostTarget().name) return findOnPath("gcc") ?? findOnPath("cc");
  return findOnPath(`${target.triple}-gcc`);
}

/** What to install for `target`'s compiler (Debian). */
export function missingCompilerHint(target: Target): string {
  if (target.name === hostTarget().name) return "no C compiler (Debian: apt-get install gcc)";
  const arch = target.triple.startsWith("aarch64") ? "arm64" : "amd64";
  return `no ${target.triple}-gcc (Debian: apt-get install gcc-${target.triple} libc6-dev-${arch}-cross)`;
}

/** Compiles the module for `target` into `output`; throws with the compiler's output when it fails, or naming what to install. */
export function buildPidfdModule(target: Target, output: string, log: (line: string) => void): void {
  const compiler = compilerFor(target);
  if (compiler === null) throw new Error(`cannot build native/pidfd.c for ${target.name}: ${missingCompilerHint(target)}`);
  const include = nodeHeaders({ log });
  const args = [
    "-shared",
    "-fPIC",
    "-O2",
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fvisibility=hidden",
    "-Wl,-z,max-page-size=4096",
    "-Wl,-z,relro,-z,now",
    "-I",
    include,
    "-o",
    output,
    PIDFD_SOURCE,
  ];
  const compiled = spawnSync(compiler, args, { encoding: "utf8" });
  if (compiled.status !== 0) throw new Error(`${path.basename(compiler)} failed on native/pidfd.c (status ${compiled.status}):\n${compiled.stdout}${compiled.stderr}`);
  const strip = stripFor(target);
  if (strip !== null) {
    const stripped = spawnSync(strip, ["--strip-unneeded", output], { encoding: "utf8" });
    if (stripped.status !== 0) throw new Error(`${strip} failed on ${output}: ${stripped.stderr}`);
  }
  if (!fs.statSync(output).isFile()) throw new Error(`${output} was not made`);
}

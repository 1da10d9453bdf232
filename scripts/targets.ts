/**
 * The platforms edgeplug executables are built for, and the host tools that
 * handle each one: which strip understands its ELF files and how to run one
 * of its binaries here (natively, or under qemu user emulation with a
 * Debian cross sysroot for its dynamic loader and libraries).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";

export interface Target {
  /** `linux-x64`, as `process.platform-process.arch` spell it and as edgeplug version prints it. */
  name: string;
  arch: "x64" | "arm64";
  /** GNU triple of the binutils and cross libraries (Debian: binutils-TRIPLE, libc6-ARCH-cross). */
  triple: string;
  /** e_machine of the target's ELF header. */
  elfMachine: number;
  /** Human name of that machine, as `file` prints it. */
  elfMachineName: string;
  /** qemu user emulator names, most specific first. */
  qemu: readonly string[];
}

export const TARGETS: readonly Target[] = [
  { name: "linux-x64", arch: "x64", triple: "x86_64-linux-gnu", elfMachine: 62, elfMachineName: "x86-64", qemu: ["qemu-x86_64-static", "qemu-x86_64"] },
  { name: "linux-arm64", arch: "arm64", triple: "aarch64-linux-gnu", elfMachine: 183, elfMachineName: "aarch64", qemu: ["qemu-aarch64-static", "qemu-aarch64"] },
];

/** The target named `name`; throws naming the known ones. */
export function targetByName(name: string): Target {
  const target = TARGETS.find((candidate) => candidate.name === name);
  if (!target) throw new Error(`unknown target ${JSON.stringify(name)}: expected one of ${TARGETS.map((t) => t.name).join(", ")}`);
  return target;
}

/** The target this machine runs natively. */
export function hostTarget(): Target {
  return targetByName(`${process.platform}-${process.arch}`);
}

/** The absolute path of `command` on PATH, or null. */
export function findOnPath(command: string): string | null {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    if (dir === "") continue;
    const candidate = path.join(dir, command);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** The strip that understands `target`'s ELF files: the host's own, or binutils-TRIPLE's; null when none is installed. */
export function stripFor(target: Target): string | null {
  return target.name === hostTarget().name ? findOnPath("strip") : findOnPath(`${target.triple}-strip`);
}

/** How to run a `target` binary on this machine: a command prefix (empty when native), or null when it cannot run here. */
export interface Runner {
  prefix: string[];
  description: string;
}

/**
 * Native for the host target; otherwise qemu user emulation pointed at the
 * Debian cross sysroot /usr/TRIPLE (dynamic loader, libc, libstdc++), which
 * must hold the loader the executable asks for. binfmt_misc is not needed:
 * qemu is invoked directly, which also works in unprivileged CI containers.
 */
export function runnerFor(target: Target): Runner | null {
  if (target.name === hostTarget().name) return { prefix: [], description: "native" };
  const sysroot = `/usr/${target.triple}`;
  if (!fs.existsSync(path.join(sysroot, "lib"))) return null;
  for (const name of target.qemu) {
    const qemu = findOnPath(name);
    if (qemu) return { prefix: [qemu, "-L", sysroot], description: `${name} -L ${sysroot}` };
  }
  return null;
}

/** Why runnerFor(target) is null, and what to install (Debian package names). */
export function missingRunnerHint(target: Target): string {
  const arch = target.triple.split("-")[0] === "aarch64" ? "arm64" : "amd64";
  return `no qemu user emulator with a ${target.triple} sysroot (Debian: apt-get install qemu-user-static libc6-${arch}-cross libstdc++6-${arch}-cross libgcc-s1-${arch}-cross)`;
}

/** The e_machine of an ELF file, or null when it is not a 64-bit little-endian ELF file. */
export function elfMachine(file: string): number | null {
  const header = Buffer.alloc(20);
  const fd = fs.openSync(file, "r");
  try {
    fs.readSync(fd, header, 0, header.length, 0);
  } finally {
    fs.closeSync(fd);
  }
  const isElf64Le = header.subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46])) && header[4] === 2 && header[5] === 1;
  return isElf64Le ? header.readUInt16LE(18) : null;
}

/** Runs `file args` for `target` through `runner`; stdout, stderr and status. */
export function runTargetBinary(runner: Runner, file: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const [command, ...prefixArgs] = [...runner.prefix, file];
  return spawnSync(command!, [...prefixArgs, ...args], { encoding: "utf8", env, timeout: 120_000 });
}

/**
 * What would make `target`'s executable worse than a release should be, and
 * why: no code cache (no way to run the target's node, unless `codeCache` is
 * false: --no-code-cache asked for none) and not stripped (no strip for its
 * ELF files), and without the pidfd module (no C compiler for it). Empty
 * when it can be built whole.
 */
export function releaseDegradations(target: Target, codeCache: boolean): string[] {
  const degradations: string[] = [];
  if (codeCache && runnerFor(target) === null) degradations.push(`${target.name}: without V8's code cache (slower starts): ${missingRunnerHint(target)}`);
  if (stripFor(target) === null) {
    const binutils = target.name === hostTarget().name ? "binutils" : `binutils-${target.triple}`;
    degradations.push(`${target.name}: not stripped (about 18 MiB larger): no strip for ${target.triple} (Debian: apt-get install ${binutils})`);
  }
  if (findOnPath(target.name === hostTarget().name ? "gcc" : `${target.triple}-gcc`) === null && (target.name !== hostTarget().name || findOnPath("cc") === null)) {
    const arch = target.triple.startsWith("aarch64") ? "arm64" : "amd64";
    const packages = target.name === hostTarget().name ? "gcc" : `gcc-${target.triple} libc6-dev-${arch}-cross`;
    degradations.push(`${target.name}: without its pidfd module (allocate --owner-pid refused): no C compiler for ${target.triple} (Debian: apt-get install ${packages})`);
  }
  return degradations;
}

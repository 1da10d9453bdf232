/**
 * The few facts that differ between Node, Deno and the Node single executable
 * (SEA): which runtime runs us, its version, and whether we are the SEA.
 * Everything else in edgeplug uses `node:` APIs that both runtimes provide.
 */
import process from "node:process";

export type RuntimeName = "node" | "deno";

interface DenoGlobal {
  version: { deno: string };
}

function denoGlobal(): DenoGlobal | undefined {
  const candidate = (globalThis as { Deno?: DenoGlobal }).Deno;
  return typeof candidate?.version?.deno === "string" ? candidate : undefined;
}

/**
 * The JavaScript runtime executing edgeplug. Deno also defines `process`,
 * so the Deno global is checked first.
 */
export function runtimeName(): RuntimeName {
  return denoGlobal() ? "deno" : "node";
}

/** The runtime's own version with a leading `v`, e.g. `v24.21.0` or `v2.9.6`. */
export function runtimeVersion(): string {
  const deno = denoGlobal();
  return `v${deno ? deno.version.deno : process.versions.node}`;
}

/** `<os>-<arch>` as Node spells them, e.g. `linux-x64`, `linux-arm64`. */
export function platformTag(): string {
  return `${process.platform}-${process.arch}`;
}

/**
 * True inside the single executable. `node:sea` is looked up through
 * `process.getBuiltinModule` rather than imported, because Deno has no such
 * module and a static import would fail there before any code runs.
 */
export function isSingleExecutable(): boolean {
  try {
    const sea = process.getBuiltinModule?.("node:sea") as { isSea?: () => boolean } | undefined;
    return sea?.isSea?.() === true;
  } catch {
    return false;
  }
}

/** Path of the file the OS started: the `edgeplug` executable, or the node/deno binary in dev. */
export function executablePath(): string {
  return process.execPath;
}

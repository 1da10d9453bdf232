/**
 * Version and commit of this build. The single executable gets both from
 * scripts/build.ts (the package.json import is inlined by esbuild, the commit
 * is an esbuild `define`); run from source, the commit comes from git.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";
import process from "node:process";
import packageJson from "../../package.json" with { type: "json" };

/** Replaced by scripts/build.ts with the short commit; undeclared when run from source. */
declare const EDGEPLUG_BUILD_COMMIT: string | undefined;

/** edgeplug's own version, from package.json. */
export const EDGEPLUG_VERSION: string = packageJson.version;

let devCommit: string | undefined;

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

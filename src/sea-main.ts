/**
 * Entry of the single executable's CommonJS bundle (scripts/build.ts), which
 * src/sea-loader.ts runs. A
 * CommonJS bundle rejects top-level await and sees an empty `import.meta`,
 * so this file uses neither: a `import.meta.main` guard would make the
 * executable silently do nothing. Inside the SEA, process.argv[1] repeats
 * the executable's path, so the arguments start at index 2 as in dev.
 */
import process from "node:process";
import { runAsProcess } from "./cli/entry.ts";

/** For scripts/code-cache.ts: it runs commands through main so that their code is compiled before it makes the code cache. */
export { main } from "./cli/cli.ts";

// The executable ignores NODE_OPTIONS and SIGUSR1 (its SEA configuration), and Node's
// other environment variables (src/platform/clean-start.ts, which the loader runs first);
// only the debug switch `--node-options=...` as first argument can open an inspector. A root
// agent with an open inspector runs code for anyone who reaches the port: say so.
if (process.execArgv.some((arg) => /^--inspect(-brk|-wait)?(=|$)/.test(arg))) {
  process.stderr.write("edgeplug: warning: the Node inspector is open (debug switch --node-options): do not run so in production\n");
}

void runAsProcess(process.argv.slice(2));

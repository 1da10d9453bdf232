/**
 * The V8 flags the daemon runs with once it has started, chosen for a small,
 * flat RSS that does not cost the large device lists their speed
 * (`npm run bench -- registration` and `-- devices`, docs/performance.md, "Memory"):
 * `--heap-growing-percent=10` lets the heap grow by 10 % between full
 * collections instead of V8's default factor (up to 4), which keeps RSS flat
 * over plugin churn, where the default kept growing. It replaces
 * `--optimize-for-size`, which held the heap a little smaller but slowed the
 * largest device lists and the churn itself by a third or more (the figures:
 * docs/performance.md, "Memory").
 *
 * Set at run time rather than baked into the executable with the others
 * (scripts/sea-config.ts): V8 keeps a code cache only for the flags it was
 * made under, so under a flag from the start Node compiled every built-in
 * module it loads from source, a large part of each command's start. Set after
 * the start, it costs only the modules loaded later, which are few.
 */
import process from "node:process";
import { setFlagsFromString } from "node:v8";

export const DAEMON_V8_FLAGS: readonly string[] = ["--heap-growing-percent=10"];

/** The flags to set: each of DAEMON_V8_FLAGS unless `--node-options` (the debug switch) gave that flag a value of its own. */
export function daemonV8Flags(execArgv: readonly string[]): string[] {
  const nameOf = (flag: string) => flag.replace(/^--(no-)?/, "").replace(/=.*$/, "").replaceAll("_", "-");
  return DAEMON_V8_FLAGS.filter((flag) => !execArgv.some((given) => given.startsWith("--") && nameOf(given) === nameOf(flag)));
}

export function applyDaemonV8Flags(): void {
  for (const flag of daemonV8Flags(process.execArgv)) setFlagsFromString(flag);
}

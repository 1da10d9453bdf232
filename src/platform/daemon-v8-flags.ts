/**
 * The V8 flags the daemon runs with once it has started, chosen for a small,
 * flat RSS (`npm run bench -- registration`, README "Memory"):
 * `--optimize-for-size`, slower heap growth and an eager memory reducer,
 * which keeps RSS flat over plugin churn instead of growing past 280 MB.
 *
 * Set at run time rather than baked into the executable with the others
 * (scripts/sea-config.ts): V8 keeps a code cache only for the flags it was
 * made under, so under this flag from the start Node compiled every built-in
 * module it loads from source, 15 to 20 ms of each command's start. Set after
 * the start, it costs only the modules loaded later, which are few.
 */
import process from "node:process";
import { setFlagsFromString } from "node:v8";

export const DAEMON_V8_FLAGS: readonly string[] = ["--optimize-for-size"];

/** The flags to set: each of DAEMON_V8_FLAGS unless its opposite was given (`--node-options=--no-optimize-for-size`, the debug switch). */
export function daemonV8Flags(execArgv: readonly string[]): string[] {
  return DAEMON_V8_FLAGS.filter((flag) => !execArgv.includes(flag.replace(/^--/, "--no-")));
}

export function applyDaemonV8Flags(): void {
  for (const flag of daemonV8Flags(process.execArgv)) setFlagsFromString(flag);
}

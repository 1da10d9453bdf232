/**
 * The executable's first step (src/sea-loader.ts): it carries on only with
 * an environment that configures edgeplug and nothing inside it
 * (src/platform/runtime-environment.ts). Variables read by bundled libraries
 * are deleted. Variables the runtime read as it started are past deleting,
 * so the executable replaces itself (execve: same PID for systemd, same
 * descriptors 0-2, same arguments; an IPC channel's descriptor closes) with
 * a runtime started without them. Without any of them this costs a few
 * environment look-ups.
 */
import fs from "node:fs";
import process from "node:process";
import { CLEAN_RESTART_MARKER, ignoredWarning, planEnvironment } from "./runtime-environment.ts";

/** The start-up failure exit code of `run` and of every other command (docs/commands.md). */
const EXIT_CANNOT_START = 1;

export function startWithCleanEnvironment(): void {
  const ipcChannel = process.channel !== undefined;
  // Node's own signs of NODE_UNIQUE_ID, which it deletes: a cluster worker listens for
  // 'internalMessage' (an IPC channel alone adds one listener). Loading node:cluster to
  // ask would cost every start its load time (docs/performance.md, "Costs behind choices in the code").
  const clusterWorker = process.listenerCount("internalMessage") > (ipcChannel ? 1 : 0);
  const plan = planEnvironment(process.env, { ipcChannel, clusterWorker });
  if (CLEAN_RESTART_MARKER in process.env) delete process.env[CLEAN_RESTART_MARKER];
  switch (plan.action) {
    case "run":
      return;
    case "strip":
      for (const name of plan.ignored) delete process.env[name];
      writeStderr(ignoredWarning(plan.ignored));
      return;
    case "refuse":
      dropStartedCoverage(plan.ignored);
      cannotStart(`${plan.ignored.join(", ")} still set after restarting without them`);
      return;
    case "restart":
      writeStderr(ignoredWarning(plan.ignored));
      restart(plan.env, plan.ignored);
  }
}

/**
 * Runs this same executable file again, even when it was replaced on disk
 * since it started (an upgrade renames a new file over it): /proc/self/exe
 * is the running inode. The arguments are the original ones, from
 * /proc/self/cmdline: Node has taken the debug switch `--node-options=...`
 * out of process.argv. Node 24 aborts the process when execve fails instead
 * of throwing, so the file is checked first.
 */
function restart(env: Record<string, string>, ignored: readonly string[]): never {
  dropStartedCoverage(ignored);
  const without = `restarting without ${ignored.join(", ")}`;
  if (process.execve === undefined) return cannotStart(`${without} needs process.execve, which this runtime lacks`);
  let args: string[];
  try {
    args = originalArguments();
  } catch (error) {
    return cannotStart(`${without}: cannot read this process's arguments: ${describe(error)}`);
  }
  const file = ["/proc/self/exe", process.execPath].find(isExecutable);
  if (file === undefined) return cannotStart(`${without}: neither /proc/self/exe nor ${process.execPath} can be executed`);
  process.execve(file, args, env);
  return cannotStart(without);
}

/**
 * Node writes the coverage NODE_V8_COVERAGE started from its native exit
 * hooks, which run on exit and, in Node 24, before execve too. Stopped, it
 * is dropped unwritten; Node then says on stderr that it found no coverage
 * to take ("Failed to get 'result' from coverage profile response").
 */
function dropStartedCoverage(ignored: readonly string[]): void {
  // Looked up only here: importing node:v8 (and the heap utilities it loads) would cost every start its load time (docs/performance.md, "Costs behind choices in the code").
  if (ignored.includes("NODE_V8_COVERAGE")) (process.getBuiltinModule("node:v8") as typeof import("node:v8")).stopCoverage();
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function originalArguments(): string[] {
  const raw = fs.readFileSync("/proc/self/cmdline");
  const args = raw.toString("utf8").split("\0");
  // Every argument ends with a NUL, so the split leaves one empty string after the last.
  if (args.at(-1) === "") args.pop();
  if (args.length === 0) throw new Error("/proc/self/cmdline is empty");
  return args;
}

function cannotStart(reason: string): never {
  writeStderr(`edgeplug: cannot start: ${reason}\n`);
  process.exit(EXIT_CANNOT_START);
}

/** Synchronous: the warning must be out before execve replaces the process. */
function writeStderr(text: string): void {
  try {
    fs.writeSync(2, text);
  } catch {
    // no stderr to tell
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

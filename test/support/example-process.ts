/**
 * Runs one of the repository's examples (examples/*.ts) as its own process,
 * as a user would, and waits for the lines it prints: each example says
 * what it does ("serving PATH", "registered", "Allocate: ..."), so tests
 * wait for the line instead of sleeping.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { EventEmitter } from "node:events";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { waitForEvent } from "./fake-plugin.ts";
import type { CleansUpAfter } from "./temp-dir.ts";

const EXAMPLES = fileURLToPath(new URL("../../examples/", import.meta.url));

export interface ExampleProcess {
  child: ChildProcess;
  /** Every complete line printed so far. */
  lines(): string[];
  /** Resolves with the first line (from `from` on) matching `pattern`. */
  waitForLine(pattern: RegExp, options?: { from?: number; timeoutMs?: number }): Promise<string>;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `node examples/<script> ...args`; killed with SIGKILL after the test `t` if still running. */
export function startExample(t: CleansUpAfter, script: string, args: string[]): ExampleProcess {
  const child = spawn(process.execPath, [path.join(EXAMPLES, script), ...args], { stdio: ["ignore", "pipe", "pipe"] });
  return followProcess(t, child, script, 10_000);
}

/**
 * Follows a child process's stdout line by line, for any test program that
 * says what it does on stdout (the examples, the Go test peers): its
 * `waitForLine` fails naming `name`, the pattern and everything printed,
 * stderr included. Killed with SIGKILL after the test `t` if still running.
 */
export function followProcess(t: CleansUpAfter, child: ChildProcess, name: string, defaultTimeoutMs: number): ExampleProcess {
  const changes = new EventEmitter();
  const lines: string[] = [];
  let partial = "";
  let stderr = "";
  let exited = false;
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n");
    partial = parts.pop()!;
    lines.push(...parts);
    changes.emit("change");
  });
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exit = once(child, "exit").then(([code]) => {
    exited = true;
    changes.emit("change");
    return code as number | null;
  });
  t.after(() => {
    if (!exited) child.kill("SIGKILL");
    return exit;
  });
  return {
    child,
    lines: () => [...lines],
    async waitForLine(pattern, { from = 0, timeoutMs = defaultTimeoutMs } = {}) {
      const find = () => lines.slice(from).find((line) => pattern.test(line));
      const printed = () => `it printed:\n${lines.slice(from).join("\n")}\n${stderr}`;
      try {
        await waitForEvent(changes, `${name} to print ${pattern}`, () => find() !== undefined || exited, timeoutMs);
      } catch (error) {
        throw new Error(`${(error as Error).message}; ${printed()}`);
      }
      const found = find();
      if (found === undefined) throw new Error(`${name} exited before printing ${pattern}; ${printed()}`);
      return found;
    },
    async stop(signal = "SIGTERM") {
      if (!exited) child.kill(signal);
      return exit;
    },
  };
}

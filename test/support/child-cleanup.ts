/** Child processes a test starts are gone before the next test begins. */
import { once } from "node:events";
import type { ChildProcess } from "node:child_process";
import type { CleansUpAfter } from "./temp-dir.ts";

const EXIT_WAIT_MS = 10_000;

/**
 * Kills `child` with SIGKILL after the test `t` if it still runs, and waits
 * until it has exited, so it writes nothing into a dir removed after it and
 * no pipe of it keeps the test process alive.
 */
export function killAfter(t: CleansUpAfter, child: ChildProcess): void {
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill("SIGKILL");
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, EXIT_WAIT_MS).unref()));
    await Promise.race([exited, gaveUp]);
    clearTimeout(timer);
  });
}

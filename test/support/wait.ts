/**
 * The one polling helper of the tests, for state that announces nothing
 * (a file appearing, a process's descriptors, a timer being armed). Where
 * something emits an event, wait for the event instead (waitForEvent in
 * fake-plugin.ts, the manager's whenSettled, an agent's log or WatchEvents).
 */

/**
 * Resolves once `check()` holds, checking now and then every `everyMs`
 * (default 5 ms); rejects naming `what` after `timeoutMs` (default 5 s).
 */
export async function waitUntil(check: () => boolean, what: string, timeoutMs = 5000, everyMs = 5): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

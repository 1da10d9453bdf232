/**
 * What the watcher's tests share: real unix sockets, a watcher stopped after
 * the test, and waits on the desired state's own change events (no sleeps).
 */
import * as net from "node:net";
import type { TestContext } from "node:test";
import { createLogger } from "../../src/log/logger.ts";
import type { WatchDir } from "../../src/policy/types.ts";
import { DesiredStateOfWorld } from "../../src/pluginmanager/state-of-world.ts";
import type { DesiredSocket } from "../../src/pluginmanager/state-of-world.ts";
import { PluginWatcher } from "../../src/pluginmanager/watcher.ts";
import type { PluginWatcherOptions } from "../../src/pluginmanager/watcher.ts";

export const quietLog = createLogger({ level: "error", format: "text" });

/** A unix socket with a listener; closing the listener removes the file. */
export async function listen(t: TestContext, socketPath: string): Promise<net.Server> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  t.after(() => new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve())));
  return server;
}

/** Closes `server`, which removes its socket file. */
export function close(server: net.Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A started watcher of `dirs` (recursive, any type unless told), stopped after `t`. */
export function startWatcher(
  t: TestContext,
  dirs: (Partial<WatchDir> & { path: string })[],
  options: Partial<Pick<PluginWatcherOptions, "log" | "fileSystem" | "limits" | "clock">> = {},
) {
  const dsw = new DesiredStateOfWorld();
  const watcher = new PluginWatcher({
    dirs: dirs.map((dir) => ({ recursive: true, types: null, ...dir })),
    dsw,
    log: options.log ?? quietLog,
    fileSystem: options.fileSystem,
    limits: options.limits,
    clock: options.clock,
  });
  t.after(() => watcher.stop());
  watcher.start();
  return { dsw, watcher };
}

/** Resolves when `predicate` holds over the desired sockets, re-checked on each change (fails after 5 s). */
export function until(dsw: DesiredStateOfWorld, predicate: (sockets: DesiredSocket[]) => boolean, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const deadline = AbortSignal.timeout(5000);
    const check = () => {
      if (!predicate(dsw.sockets())) return;
      done();
      resolve();
    };
    const fail = () => {
      done();
      reject(new Error(`timed out waiting for ${what}; desired: ${JSON.stringify(dsw.sockets().map((s) => s.socket))}`));
    };
    const unsubscribe = dsw.subscribe(check);
    const done = () => {
      unsubscribe();
      deadline.removeEventListener("abort", fail);
    };
    deadline.addEventListener("abort", fail);
    check();
  });
}

/** The socket paths of `sockets`. */
export const paths = (sockets: DesiredSocket[]) => sockets.map((socket) => socket.socket);

/**
 * The bench side of plugin-host.ts: forks the host (the same Node, type
 * stripping included) and turns its IPC messages into promises.
 */
import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import type { HostReply, HostRequest, StartReply } from "./plugin-host.ts";

const HOST_ENTRY = fileURLToPath(new URL("./plugin-host.ts", import.meta.url));
const EXIT_GRACE_MS = 5000;

/** A request before it is numbered (Omit spread over each member of the union). */
type Unnumbered<T> = T extends unknown ? Omit<T, "id"> : never;
type Pending = { resolve: (reply: HostReply) => void; reject: (error: Error) => void };

export interface PluginHost {
  readonly pid: number;
  /**
   * Serves registration plugins on `sockets`, all at once; resolves when each
   * one was notified registered or its `timeoutMs` ran out.
   */
  start(sockets: string[], timeoutMs: number): Promise<StartReply>;
  /** Stops the plugins on `sockets`; resolves once their socket files are gone. */
  stop(sockets: string[]): Promise<void>;
  /** Closes the channel and waits for the host to exit (killing it after 5 s). Safe to call twice. */
  close(): Promise<void>;
}

/** Forks a plugin host and resolves once it is ready for requests. */
export async function startPluginHost(): Promise<PluginHost> {
  const child: ChildProcess = fork(HOST_ENTRY, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const exited = once(child, "exit");
  const pending = new Map<number, Pending>();
  let nextId = 1;
  let hostGone: Error | null = null;

  const ready = new Promise<void>((resolve, reject) => {
    child.once("message", (message: HostReply) => (message.op === "ready" ? resolve() : reject(new Error(`plugin host said ${JSON.stringify(message)}`))));
    child.once("exit", (code, signal) => reject(new Error(`plugin host exited (${code ?? signal}) before it was ready`)));
  });
  child.on("message", (message: HostReply) => {
    if (!("id" in message)) return;
    const waiter = pending.get(message.id);
    pending.delete(message.id);
    if (!waiter) return;
    if (message.op === "error") waiter.reject(new Error(`plugin host: ${message.message}`));
    else waiter.resolve(message);
  });
  child.once("exit", (code, signal) => {
    hostGone = new Error(`plugin host exited (${code ?? signal})`);
    for (const waiter of pending.values()) waiter.reject(hostGone);
    pending.clear();
  });

  const request = (message: Unnumbered<HostRequest>): Promise<HostReply> => {
    if (hostGone) return Promise.reject(hostGone);
    const id = nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      child.send({ ...message, id } as HostRequest);
    });
  };

  let closing: Promise<void> | null = null;
  const host: PluginHost = {
    pid: child.pid!,
    start: async (sockets, timeoutMs) => (await request({ op: "start", sockets, timeoutMs })) as StartReply,
    stop: async (sockets) => {
      await request({ op: "stop", sockets });
    },
    close() {
      closing ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        if (child.connected) child.disconnect();
        const killer = setTimeout(() => child.kill("SIGKILL"), EXIT_GRACE_MS);
        await exited;
        clearTimeout(killer);
      })();
      return closing;
    },
  };
  try {
    await ready;
  } catch (error) {
    await host.close();
    throw error;
  }
  return host;
}

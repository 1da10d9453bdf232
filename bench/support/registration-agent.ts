/**
 * The registration benchmark's agent side: the built executable started on
 * its own policy and registry, and waits on what it logs.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type AgentProcess, startEdgeplug, type TestPolicyFile, writePolicy } from "../../test/support/agent-process.ts";
import type { PluginFailure, PluginTimeline } from "./plugin-host.ts";

export const MAX_PLUGINS = 2048;
const SECURITY = `  maxPlugins: ${MAX_PLUGINS}`;

export function progress(message: string): void {
  process.stderr.write(`registration: ${message}\n`);
}

export interface RunningAgent {
  process: AgentProcess;
  policy: TestPolicyFile;
  pid: number;
  /** SIGTERM, then SIGKILL after 3 s; resolves with the exit code (null when killed). */
  stop(): Promise<number | null>;
}

export async function startAgent(dir: string, reconcile: string, binary?: string): Promise<RunningAgent> {
  fs.mkdirSync(dir);
  const policy = writePolicy(dir, { reconcile, security: SECURITY });
  // BENCH_REGISTRATION_NODE_OPTIONS: Node/V8 flags for the agent (the executable's debug switch), to compare runtime settings.
  const nodeOptions = process.env.BENCH_REGISTRATION_NODE_OPTIONS;
  const agent = startEdgeplug([...(nodeOptions ? [`--node-options=${nodeOptions}`] : []), "run", "--config", policy.path], { binary });
  let stopping: Promise<number | null> | null = null;
  const running: RunningAgent = {
    process: agent,
    policy,
    pid: agent.child.pid!,
    stop() {
      stopping ??= agent.terminate();
      return stopping;
    },
  };
  try {
    await agent.waitForLog("edgeplug running");
  } catch (error) {
    await running.stop();
    throw error;
  }
  return running;
}

/**
 * Resolves once the agent's log records satisfy `done` (re-checked on each
 * stderr chunk); rejects after `timeoutMs`, listing what it did log.
 */
export function waitForLogs(
  agent: AgentProcess,
  what: string,
  done: (records: Array<Record<string, unknown>>) => boolean,
  timeoutMs = 10_000,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const stderr = agent.child.stderr!;
    const check = () => {
      if (!done(agent.logs())) return;
      finish();
      resolve();
    };
    const timer = setTimeout(() => {
      finish();
      const tally: Record<string, number> = {};
      for (const record of agent.logs()) tally[String(record.msg)] = (tally[String(record.msg)] ?? 0) + 1;
      reject(new Error(`timed out after ${timeoutMs} ms waiting for the agent to log ${what} (it logged ${JSON.stringify(tally)})`));
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      stderr.off("data", check);
    };
    stderr.on("data", check);
    check();
  });
}

/** Records about `sockets` with message `message`. */
export function countLogs(records: Array<Record<string, unknown>>, message: string, sockets: ReadonlySet<string>): number {
  return records.filter((record) => record.msg === message && sockets.has(String(record.socket))).length;
}

/** Resolves once the agent has logged `message` for every one of `sockets`. */
export function waitForEach(agent: AgentProcess, message: string, sockets: readonly string[], timeoutMs?: number): Promise<void> {
  const wanted = new Set(sockets);
  return waitForLogs(agent, `"${message}" for ${wanted.size} sockets`, (records) => countLogs(records, message, wanted) >= wanted.size, timeoutMs);
}

/** How many registration attempts of `sockets` the agent found stale (nothing listening yet). */
export function staleAttempts(agent: AgentProcess, sockets: readonly string[]): number {
  return countLogs(agent.logs(), "plugin socket is stale", new Set(sockets));
}

export function socketNames(registry: string, prefix: string, count: number): string[] {
  const width = String(count - 1).length;
  return Array.from({ length: count }, (_, i) => path.join(registry, `${prefix}-${String(i).padStart(width, "0")}.sock`));
}

export function refusalsOf(plugins: PluginTimeline[]): string[] {
  return plugins.flatMap((plugin) => plugin.refusals.map((reason) => `${path.basename(plugin.socket)}: ${reason}`));
}

/** A plugin never notified registered, with what the agent last logged about its socket. */
export function describeFailure(agent: AgentProcess, failure: PluginFailure) {
  const records = agent.logs().filter((record) => record.socket === failure.socket);
  const last = records.at(-1);
  return {
    socket: path.basename(failure.socket),
    getInfoCalls: failure.getInfoCalls,
    notifications: failure.notifications,
    agentLastSaid: last ? `${String(last.msg)} (state ${String(last.state)}, attempts ${String(last.attempts)})` : null,
  };
}

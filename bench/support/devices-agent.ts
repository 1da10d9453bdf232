/**
 * The devices benchmark's agent: dist/edgeplug run on a policy of its own
 * (a watched registry for generic plugins, kubelet.sock for device plugins,
 * the API socket, the checkpoint), with a Connect client of its API and a
 * WatchEvents reader that keeps when each event arrived.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { Agent, type Event } from "../../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../../src/rpc/unix-channel.ts";
import { type AgentProcess, startEdgeplug } from "../../test/support/agent-process.ts";

const API_CONNECTIONS = 10;

export interface DevicesAgent {
  process: AgentProcess;
  pid: number;
  registry: string;
  registrationSocket: string;
  /**
   * A client of the API, a different connection on each call: the API limits
   * each connection to 100 requests/s (burst 10), which the allocation loop
   * would reach; 10 connections take the socket's whole burst (100) at once.
   */
  api(): Client<typeof Agent>;
  /** Opens a WatchEvents stream that keeps when each resource event arrived (close it when done: each event costs the reader). */
  watch(): EventLog;
  stop(): Promise<number | null>;
}

export interface EventLog {
  /** Resolves with the arrival time of the first event from now on for which `match` holds. */
  next(match: (event: Event) => boolean, timeoutMs: number): Promise<number>;
  /** Resource events received for `resource` so far. */
  countFor(resource: string): number;
  close(): void;
}

/**
 * `binary`: another build's executable (a paired run); default dist/edgeplug.
 * `shippedResync`: the policy's resync left at the shipped default (10 s), as
 * where idle costs are measured; otherwise 1 h, so no resync lands inside a timing.
 * `nodeOptions`: Node/V8 flags for the agent, as BENCH_DEVICES_NODE_OPTIONS (e.g. a CPU profile).
 */
export async function startDevicesAgent(dir: string, binary?: string, options: { shippedResync?: boolean; nodeOptions?: string } = {}): Promise<DevicesAgent> {
  const registry = path.join(dir, "registry");
  const registrationSocket = path.join(dir, "dp", "kubelet.sock");
  const apiSocket = path.join(dir, "api.sock");
  fs.mkdirSync(registry, { recursive: true });
  // BENCH_DEVICES_CHECKPOINT_DIR: the checkpoint on another filesystem (e.g. /dev/shm, to see what fsync costs).
  const elsewhere = process.env.BENCH_DEVICES_CHECKPOINT_DIR;
  const stateDir = elsewhere ? fs.mkdtempSync(path.join(elsewhere, "edgeplug-bench-")) : path.join(dir, "state");
  const policyPath = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policyPath,
    [
      "version: 1",
      "nodeName: bench-node",
      "watch:",
      `  - path: ${registry}`,
      "handlers:",
      "  DevicePlugin: {}",
      "  acme.io/Sensor: { kind: generic, versions: [v1] }",
      `devicePlugins: { registrationSocket: ${registrationSocket} }`,
      `checkpoint: { path: ${path.join(stateDir, "kubelet_internal_checkpoint")} }`,
      ...(options.shippedResync ? [] : ["reconcile: { resync: 1h }"]),
      `api: { socket: ${apiSocket}, metrics: null }`,
      // Not the node's /var/lib/kubelet/pod-resources/kubelet.sock: a bench never takes a real path, and two agents run at once.
      "podResources: { socket: null }",
      "log: { level: info, format: json }",
      "",
    ].join("\n"),
  );
  // BENCH_DEVICES_NODE_OPTIONS: Node/V8 flags for the agent (the executable's debug switch), to compare runtime settings.
  const nodeOptions = options.nodeOptions ?? process.env.BENCH_DEVICES_NODE_OPTIONS;
  const agent = startEdgeplug([...(nodeOptions ? [`--node-options=${nodeOptions}`] : []), "run", "--config", policyPath], { binary });
  await agent.waitForLog("edgeplug running", 30_000).catch(async (error: unknown) => {
    agent.child.kill("SIGKILL");
    throw error;
  });
  const channels = Array.from({ length: API_CONNECTIONS }, () => dialUnix(apiSocket));
  const clients = channels.map((channel) => createClient(Agent, channel.transport));
  let turn = 0;
  const watchers = new Set<EventLog>();
  return {
    process: agent,
    pid: agent.child.pid!,
    registry,
    registrationSocket,
    api: () => clients[turn++ % clients.length]!,
    watch() {
      const log = watch(clients[turn++ % clients.length]!, () => watchers.delete(log));
      watchers.add(log);
      return log;
    },
    async stop() {
      for (const log of [...watchers]) log.close();
      for (const channel of channels) channel.close();
      if (elsewhere) fs.rmSync(stateDir, { recursive: true, force: true });
      return agent.terminate();
    },
  };
}

function watch(api: Client<typeof Agent>, closed: () => void): EventLog {
  const abort = new AbortController();
  const signal = abort.signal;
  const waiters = new Set<{ match: (event: Event) => boolean; resolve: (at: number) => void }>();
  const counts = new Map<string, number>();
  void (async () => {
    try {
      for await (const event of api.watchEvents({}, { signal })) {
        const at = performance.now();
        if (event.kind.case === "resource") {
          const name = event.kind.value.resource?.name ?? "";
          counts.set(name, (counts.get(name) ?? 0) + 1);
        }
        for (const waiter of [...waiters]) {
          if (!waiter.match(event)) continue;
          waiters.delete(waiter);
          waiter.resolve(at);
        }
      }
    } catch {
      // the stream ends when the bench stops the agent
    }
  })();
  return {
    next(match, timeoutMs) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`no matching event within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = {
          match,
          resolve: (at: number) => {
            clearTimeout(timer);
            resolve(at);
          },
        };
        waiters.add(waiter);
      });
    },
    countFor: (resource) => counts.get(resource) ?? 0,
    close() {
      abort.abort();
      closed();
    },
  };
}

/**
 * Runs an API call, again after 10 ms when the API refused it before doing
 * anything: its rate limit (1000 requests/s for the socket, burst 100), or a
 * connection it closed for idleness just as the call went out (HTTP/2
 * REFUSED_STREAM). Resolves with the answer and the answered attempt's
 * duration; `refusals` counts the attempts refused.
 */
export async function retried<T>(call: () => Promise<T>, refusals: { count: number } = { count: 0 }): Promise<{ answer: T; ms: number }> {
  for (;;) {
    const startedAt = performance.now();
    try {
      const answer = await call();
      return { answer, ms: performance.now() - startedAt };
    } catch (error) {
      if (!(error instanceof ConnectError) || !(error.code === Code.ResourceExhausted || /REFUSED_STREAM/.test(String(error.cause)))) throw error;
      refusals.count++;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

/**
 * The two agents of the side-by-side devices benchmark behind one interface:
 * edgeplug (dist/edgeplug run, watched through WatchEvents, allocating
 * through its API in Connect JSON over HTTP/1.1) and the kubelet's own device
 * manager (BENCH_KUBELET_DM: Kubernetes v1.19's devicemanager built with a
 * small control surface, watched by polling its `/capacity` every 1 ms,
 * allocating through `/allocate` and `/release`), both over HTTP/1.1 on a
 * unix socket with keep-alive connections.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { type DevicesAgent, startDevicesAgent } from "./devices-agent.ts";
import { sharedClockMs } from "./side-plugins.ts";

/** What an agent shows of one resource: devices known and devices healthy. */
export interface ResourceView {
  capacity: number;
  healthy: number;
}

export interface SideAgent {
  readonly kind: "edgeplug" | "kubelet";
  readonly pid: number;
  readonly registrationSocket: string;
  /** Resolves with the shared clock (ms, sharedClockMs) at which the agent was first seen to satisfy `holds` for `resource`. */
  until(resource: string, holds: (view: ResourceView | undefined) => boolean, timeoutMs: number): Promise<number>;
  /** Allocates `count` devices of `resource` to `owner`; resolves once answered (rejects on a refusal). */
  allocate(owner: string, resource: string, count: number): Promise<void>;
  release(owner: string): Promise<void>;
  stop(): Promise<void>;
}

const ANSWER_LIMIT = 64 * 1024 * 1024;
const REQUEST_TIMEOUT_MS = 30_000;

/** A keep-alive HTTP/1.1 client of a unix socket, `connections` connections taken in turn (edgeplug limits each to 100 requests/s). */
function unixClient(socketPath: string, connections: number) {
  const agents = Array.from({ length: connections }, () => new http.Agent({ keepAlive: true, maxSockets: 1 }));
  let turn = 0;
  const request = (method: string, urlPath: string, body?: object): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const req = http.request(
        {
          socketPath,
          agent: agents[turn++ % agents.length],
          method,
          path: urlPath,
          headers: payload ? { "content-type": "application/json", "content-length": payload.length } : {},
          timeout: REQUEST_TIMEOUT_MS,
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on("data", (chunk: Buffer) => {
            size += chunk.length;
            if (size > ANSWER_LIMIT) req.destroy(new Error(`${urlPath}: answer over ${ANSWER_LIMIT} bytes`));
            else chunks.push(chunk);
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`${urlPath}: no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on("error", reject);
      req.end(payload);
    });
  return { request, close: () => agents.forEach((agent) => agent.destroy()) };
}

/** edgeplug's answers refused by its rate limit (HTTP 429) are tried again after 10 ms; counted. */
async function unlimited(call: () => Promise<{ status: number; text: string }>, refusals: { count: number }) {
  for (;;) {
    const answer = await call();
    if (answer.status !== 429) return answer;
    refusals.count++;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export async function startEdgeplugSide(dir: string, refusals: { count: number }, options: { nodeOptions?: string } = {}): Promise<SideAgent> {
  const agent: DevicesAgent = await startDevicesAgent(dir, undefined, { shippedResync: true, nodeOptions: options.nodeOptions });
  const client = unixClient(path.join(dir, "api.sock"), 10);
  const views = new Map<string, ResourceView>();
  const waiters = new Set<() => void>();
  const abort = new AbortController();
  const watching = new Promise<void>((ready, failed) => {
    void (async () => {
      try {
        for await (const event of agent.api().watchEvents({}, { signal: abort.signal })) {
          if (event.kind.case === "snapshot") {
            for (const resource of event.kind.value.resources) views.set(resource.name, { capacity: resource.capacity, healthy: resource.healthy.length });
            ready();
          } else if (event.kind.case === "resource") {
            const { resource, removed } = event.kind.value;
            if (!resource) continue;
            if (removed) views.delete(resource.name);
            else views.set(resource.name, { capacity: resource.capacity, healthy: resource.healthy.length });
          } else continue;
          for (const waiter of [...waiters]) waiter();
        }
      } catch (error) {
        failed(error);
      }
    })();
  });
  await watching;
  const answered = (what: string, answer: { status: number; text: string }) => {
    if (answer.status !== 200) throw new Error(`edgeplug ${what}: HTTP ${answer.status} ${answer.text.slice(0, 300)}`);
  };
  return {
    kind: "edgeplug",
    pid: agent.pid,
    registrationSocket: agent.registrationSocket,
    until(resource, holds, timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!holds(views.get(resource))) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(sharedClockMs());
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`edgeplug: ${resource} not as awaited within ${timeoutMs} ms (last seen ${JSON.stringify(views.get(resource))})`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    async allocate(owner, resource, count) {
      answered("Allocate", await unlimited(() => client.request("POST", "/edgeplug.v1.Agent/Allocate", { owner, resources: [{ resource, count }] }), refusals));
    },
    async release(owner) {
      answered("Release", await unlimited(() => client.request("POST", "/edgeplug.v1.Agent/Release", { owner }), refusals));
    },
    async stop() {
      abort.abort();
      client.close();
      await agent.stop();
    },
  };
}

const POLL_EVERY_MS = 1;

/** Starts BENCH_KUBELET_DM on a directory of its own (it deletes every file of it at start). */
export async function startKubeletSide(executable: string, dir: string): Promise<SideAgent> {
  const pluginDir = path.join(dir, "dp");
  fs.mkdirSync(pluginDir, { recursive: true });
  const registrationSocket = path.join(pluginDir, "kubelet.sock");
  const controlSocket = path.join(dir, "control.sock");
  const child: ChildProcess = spawn(executable, ["-socket", registrationSocket, "-control", controlSocket], { stdio: ["ignore", "pipe", "pipe"] });
  let stderrTail = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderrTail = (stderrTail + chunk.toString("utf8")).slice(-4000)));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`kubelet device manager did not start within 30 s: ${stderrTail}`)), 30_000);
    child.stdout!.on("data", (chunk: Buffer) => {
      out = (out + chunk.toString("utf8")).slice(-4000);
      if (/^STARTED /m.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`kubelet device manager exited (${code}) before it started: ${stderrTail}`));
    });
  });
  const client = unixClient(controlSocket, 1);
  const capacity = async (): Promise<Record<string, { capacity: number; allocatable: number }>> => {
    const answer = await client.request("GET", "/capacity");
    if (answer.status !== 200) throw new Error(`kubelet /capacity: HTTP ${answer.status} ${answer.text.slice(0, 300)}`);
    return (JSON.parse(answer.text) as { resources?: Record<string, { capacity: number; allocatable: number }> }).resources ?? {};
  };
  const posted = async (what: string, body: object) => {
    const answer = await client.request("POST", what, body);
    if (answer.status !== 200) throw new Error(`kubelet ${what}: HTTP ${answer.status} ${answer.text.slice(0, 300)}`);
  };
  return {
    kind: "kubelet",
    pid: child.pid!,
    registrationSocket,
    async until(resource, holds, timeoutMs) {
      const deadline = performance.now() + timeoutMs;
      let last: ResourceView | undefined;
      for (;;) {
        const askedAt = performance.now();
        const seen = (await capacity())[resource];
        last = seen ? { capacity: seen.capacity, healthy: seen.allocatable } : undefined;
        if (holds(last)) return sharedClockMs();
        if (performance.now() > deadline) throw new Error(`kubelet: ${resource} not as awaited within ${timeoutMs} ms (last seen ${JSON.stringify(last)}); its log:\n${stderrTail}`);
        const wait = POLL_EVERY_MS - (performance.now() - askedAt);
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      }
    },
    allocate: (owner, resource, count) => posted("/allocate", { pod: owner, container: "main", resources: { [resource]: count } }),
    release: (owner) => posted("/release", { pod: owner }),
    async stop() {
      client.close();
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(killer);
      }
    },
  };
}

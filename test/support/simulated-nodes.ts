/**
 * A fleet without agents, for `fleet status` over many nodes: the retained
 * `online` and `status` messages of simulated nodes, published by the caller
 * (test/fleet-status.test.ts checks what the command makes of them,
 * bench/fleet-status.ts how long it takes).
 */
import { connect } from "mqtt";

/** Publishes retained `messages` (topic -> payload) and resolves once the broker acknowledged each. */
export async function publishRetained(url: string, messages: Array<[string, string | Buffer]>): Promise<void> {
  const client = connect(url, { clientId: `seed-${Math.random().toString(16).slice(2, 8)}`, protocolVersion: 4, reconnectPeriod: 0 });
  await new Promise<void>((resolve, reject) => (client.once("connect", () => resolve()), client.once("error", reject)));
  await Promise.all(
    messages.map(([topic, payload]) => new Promise<void>((resolve, reject) => client.publish(topic, payload, { qos: 1, retain: true }, (error) => (error ? reject(error) : resolve())))),
  );
  await new Promise<void>((resolve) => client.end(false, {}, () => resolve()));
}

/** The retained messages of one node under `prefix`: online (or not), its status with two plugins and four devices. */
export function simulatedNode(prefix: string, name: string, options: { online?: boolean; updatedAt?: Date; ok?: boolean } = {}): Array<[string, string]> {
  const now = new Date().toISOString();
  const online = { online: options.online ?? true, since: now, version: "0.1.0", updatedAt: (options.updatedAt ?? new Date()).toISOString() };
  const status = {
    ok: options.ok ?? true,
    node: name,
    plugins: [
      { socket: "/r/a.sock", state: "registered" },
      { socket: "/r/b.sock", state: options.ok === false ? "failed" : "registered" },
    ],
    resources: [{ name: "acme.io/gpu", capacity: 4, allocatable: 4, healthy: ["g0", "g1", "g2"], unhealthy: ["g3"], connected: true }],
    allocations: [{ owner: "pod-1", container: "main", resource: "acme.io/gpu", devices: ["g0"] }],
    checkpoint: null,
    watchLimits: null,
    fleet: null,
  };
  return [
    [`${prefix}/v1/${name}/online`, JSON.stringify(online)],
    [`${prefix}/v1/${name}/status`, JSON.stringify(status)],
  ];
}

/** `count` healthy nodes named node-0000, node-0001, ... under `prefix`. */
export function healthyNodes(prefix: string, count: number): Array<[string, string]> {
  const messages: Array<[string, string]> = [];
  for (let i = 0; i < count; i++) messages.push(...simulatedNode(prefix, `node-${String(i).padStart(4, "0")}`));
  return messages;
}

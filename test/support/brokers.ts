/**
 * Real MQTT brokers for the fleet tests, each on loopback ports picked at
 * test time, in a temp dir, killed after the test: Mosquitto (with an
 * optional password file, ACL and TLS listener whose certificates openssl
 * makes) and a cluster of three NATS servers with MQTT and JetStream. And a
 * subscriber (mqtt.js) that keeps what it receives.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { once } from "node:events";
import { connect, type MqttClient } from "mqtt";
import { killAfter } from "./child-cleanup.ts";
import { type CleansUpAfter, tempDir } from "./temp-dir.ts";
import { waitUntil } from "./wait.ts";

/** A port free now: bound to 0, read, released (mosquitto cannot be told port 0). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Resolves once something accepts TCP connections on `port`. */
export async function waitForPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, "127.0.0.1");
      socket.once("connect", () => (socket.destroy(), resolve(true)));
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A CA, and a server certificate for 127.0.0.1 and localhost that it signed, made with openssl in `dir`. */
export function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "pipe" });
  openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=edgeplug test CA", "-keyout", file("ca.key"), "-out", file("ca.crt"));
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", file("server.key"), "-out", file("server.csr"));
  fs.writeFileSync(file("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  openssl("x509", "-req", "-in", file("server.csr"), "-CA", file("ca.crt"), "-CAkey", file("ca.key"), "-CAcreateserial", "-days", "2", "-extfile", file("san.ext"), "-out", file("server.crt"));
  return { ca: file("ca.crt"), cert: file("server.crt"), key: file("server.key") };
}

export interface MosquittoOptions {
  /** Users and passwords: anonymous clients are refused when given. */
  users?: Record<string, string>;
  /** The ACL file's text. */
  acl?: string;
  /** Adds a TLS listener with certificates made here. */
  tls?: boolean;
  /**
   * Keeps retained messages and persistent sessions (their subscriptions and
   * queued QoS 1 messages) across stop() and start(): saved in its dir as it
   * stops, restored before it listens again.
   */
  persistence?: boolean;
}

export interface Mosquitto {
  url: string;
  /** mqtts:// on its own port, when asked for. */
  tlsUrl: string | null;
  /** The CA of the TLS listener's certificate. */
  ca: string | null;
  dir: string;
  /** Stops (SIGTERM) and waits for the exit. */
  stop(): Promise<void>;
  /** Starts again on the same ports. */
  start(): Promise<void>;
  /** Sends `signal` to the running broker (SIGSTOP: it holds its connections and answers nothing). */
  signal(signal: NodeJS.Signals): void;
}

export async function startMosquitto(t: CleansUpAfter, options: MosquittoOptions = {}): Promise<Mosquitto> {
  const dir = tempDir(t, "mq-");
  const port = await freePort();
  const tlsPort = options.tls ? await freePort() : null;
  const lines = ["per_listener_settings false", `listener ${port} 127.0.0.1`];
  if (options.persistence) {
    // A session offline while an agent sends its queue (up to 1,000 events and a gap) must not lose any to mosquitto's own bound (1,000).
    lines.push("persistence true", `persistence_location ${dir}/`, "max_queued_messages 5000");
  } else {
    lines.push("persistence false");
  }
  // As root, mosquitto would become the mosquitto user and could not read the test's private files.
  if (process.getuid?.() === 0) lines.push("user root");
  let ca: string | null = null;
  if (tlsPort !== null) {
    const certs = makeCertificates(dir);
    ca = certs.ca;
    lines.push(`listener ${tlsPort} 127.0.0.1`, `cafile ${certs.ca}`, `certfile ${certs.cert}`, `keyfile ${certs.key}`);
  }
  if (options.users) {
    const passwords = path.join(dir, "passwords");
    fs.writeFileSync(passwords, "");
    for (const [user, password] of Object.entries(options.users)) execFileSync("mosquitto_passwd", ["-b", passwords, user, password], { stdio: "pipe" });
    lines.push("allow_anonymous false", `password_file ${passwords}`);
  } else {
    lines.push("allow_anonymous true");
  }
  if (options.acl !== undefined) {
    fs.writeFileSync(path.join(dir, "acl"), options.acl);
    lines.push(`acl_file ${path.join(dir, "acl")}`);
  }
  const config = path.join(dir, "mosquitto.conf");
  fs.writeFileSync(config, lines.join("\n") + "\n");
  let child: ChildProcess | null = null;
  const start = async () => {
    child = spawn("mosquitto", ["-c", config], { stdio: ["ignore", "ignore", "pipe"] });
    killAfter(t, child);
    await waitForPort(port);
    if (tlsPort !== null) await waitForPort(tlsPort);
  };
  await start();
  return {
    url: `mqtt://127.0.0.1:${port}`,
    tlsUrl: tlsPort === null ? null : `mqtts://127.0.0.1:${tlsPort}`,
    ca,
    dir,
    async stop() {
      const running = child!;
      if (running.exitCode !== null || running.signalCode !== null) return;
      const exited = once(running, "exit");
      running.kill("SIGTERM");
      await exited;
    },
    start,
    signal(signal) {
      child!.kill(signal);
    },
  };
}

export interface NatsServer {
  url: string;
  child: ChildProcess;
}

/** Three NATS servers routed together on loopback, MQTT and JetStream on; resolves once each takes MQTT clients. */
export async function startNatsCluster(t: CleansUpAfter): Promise<NatsServer[]> {
  const dir = tempDir(t, "nats-");
  const ports = await Promise.all(Array.from({ length: 9 }, () => freePort()));
  const routes = [0, 1, 2].map((i) => `nats-route://127.0.0.1:${ports[3 + i]}`).join(", ");
  const servers: NatsServer[] = [];
  for (const i of [0, 1, 2]) {
    const config = path.join(dir, `n${i + 1}.conf`);
    fs.writeFileSync(
      config,
      [
        `server_name: n${i + 1}`,
        `listen: 127.0.0.1:${ports[i]}`,
        `jetstream { store_dir: "${path.join(dir, `js${i + 1}`)}" }`,
        `cluster { name: edgeplug-test, listen: 127.0.0.1:${ports[3 + i]}, routes: [${routes}] }`,
        `mqtt { listen: 127.0.0.1:${ports[6 + i]} }`,
        "",
      ].join("\n"),
    );
    const child = spawn("nats-server", ["-c", config], { stdio: ["ignore", "ignore", "ignore"] });
    killAfter(t, child);
    servers.push({ url: `mqtt://127.0.0.1:${ports[6 + i]}`, child });
  }
  await Promise.all(ports.slice(6).map((port) => waitForPort(port, 30_000)));
  // A server listens before its JetStream cluster has a leader; until then it refuses MQTT sessions.
  await Promise.all(servers.map((server) => waitForMqttSession(server.url, 60_000)));
  return servers;
}

/** Resolves once `url` accepts an MQTT session (3.1.1), trying again until `timeoutMs`. */
async function waitForMqttSession(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = connect(url, { clientId: `probe-${Math.random().toString(16).slice(2, 10)}`, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 10_000 });
    const accepted = await new Promise<boolean>((resolve) => {
      client.once("connect", () => resolve(true));
      client.once("error", () => resolve(false));
      client.once("close", () => resolve(false));
    });
    await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
    if (accepted) return;
    if (Date.now() > deadline) throw new Error(`${url} accepted no MQTT session within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

export interface Received {
  topic: string;
  text: string;
  retain: boolean;
  at: number;
}

/** An mqtt.js client subscribed to `filter`, keeping every message. */
export interface Subscriber {
  messages: Received[];
  /** The latest message on `topic`, parsed. */
  latest(topic: string): Record<string, unknown> | undefined;
  waitFor(what: string, check: (messages: Received[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * Resolves once the broker granted the subscription (SUBACK); rejects with
 * its reason when it refused it. With `session` (a client id) the session
 * is persistent (clean session off): on a broker that keeps sessions
 * (startMosquitto's `persistence`), QoS 1 messages published while the
 * subscriber is away, or before it reconnects to a restarted broker, wait
 * for it. `qos` (default 1) is the subscription's: NATS backs a QoS 1
 * subscription with a JetStream consumer, which it refuses to make while
 * JetStream has no leader (a server of the cluster just died); QoS 0 needs
 * no JetStream.
 */
export async function subscribe(
  t: { after(fn: () => unknown): void },
  url: string,
  filter: string,
  options: { username?: string; password?: string; ca?: string; session?: string; qos?: 0 | 1 } = {},
): Promise<Subscriber> {
  const client: MqttClient = connect(url, {
    clientId: options.session ?? `test-sub-${Math.random().toString(16).slice(2, 10)}`,
    clean: options.session === undefined,
    protocolVersion: 4,
    reconnectPeriod: 200,
    username: options.username,
    password: options.password,
    ...(options.ca ? { ca: fs.readFileSync(options.ca) } : {}),
  });
  const messages: Received[] = [];
  client.on("message", (topic, payload, packet) => messages.push({ topic, text: payload.toString("utf8"), retain: packet.retain, at: Date.now() }));
  const close = () => new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
  t.after(() => close());
  let timer: NodeJS.Timeout | undefined;
  const subscribed = new Promise<void>((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${url} did not acknowledge the subscription to ${filter} within 15 s`)), 15_000);
    // Again at each reconnection: a broker restarted without sessions has forgotten it.
    client.on("connect", () =>
      client.subscribe(filter, { qos: options.qos ?? 1 }, (error, granted) => {
        if (error) reject(new Error(`${url} refused the subscription to ${filter}: ${error.message}`));
        else if (granted?.some((grant) => grant.qos === 128)) reject(new Error(`${url} refused the subscription to ${filter} (SUBACK 0x80)`));
        else resolve();
      }));
  });
  client.on("error", () => {});
  try {
    await subscribed;
  } finally {
    clearTimeout(timer);
  }
  return {
    messages,
    latest(topic) {
      const last = messages.findLast((message) => message.topic === topic);
      return last && last.text !== "" ? (JSON.parse(last.text) as Record<string, unknown>) : undefined;
    },
    waitFor: (what, check, timeoutMs = 10_000) => waitUntil(() => check(messages), what, timeoutMs, 20),
    close,
  };
}

/** A policy file for an agent under `dir` with `fleet` as its fleet section (indented YAML; null: none), the registry created. */
export function writeFleetPolicy(dir: string, node: string, fleet: string | null): { path: string; registry: string; apiSocket: string } {
  const registry = path.join(dir, "registry");
  fs.mkdirSync(registry, { recursive: true });
  const apiSocket = path.join(dir, "api.sock");
  const file = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    file,
    [
      "version: 1",
      `nodeName: ${node}`,
      "watch:",
      `  - path: ${registry}`,
      "handlers:",
      "  acme.io/Sensor: { kind: generic, versions: [v1] }",
      "devicePlugins: { registrationSocket: null }",
      // Not the kubelet's default path: fleet tests run several agents at once.
      "podResources: { socket: null }",
      `checkpoint: { path: ${path.join(dir, "state", "kubelet_internal_checkpoint")} }`,
      "reconcile: { backoff: { initial: 50ms, max: 500ms } }",
      `api: { socket: ${apiSocket}, metrics: null }`,
      "log: { level: info, format: json }",
      ...(fleet === null ? [] : ["fleet:", fleet]),
      "",
    ].join("\n"),
  );
  return { path: file, registry, apiSocket };
}

/**
 * How the fleet link connects: mqtt.js loaded on first use, its options from
 * the policy (credential and TLS files read at each attempt, so a rotated
 * password or certificate is picked up by the next connection), the
 * reconnect backoff, and small timer helpers.
 */
import net from "node:net";
import type { IClientOptions, MqttClient } from "mqtt";
import type { FleetPolicy } from "../policy/types.ts";
import { backoffDelay } from "../util/backoff.ts";
import { readCredentialFile, readSecretLine } from "./credentials.ts";
import type { OnlinePayload } from "./topics.ts";

/** Reconnect delays: from 500 ms, doubling, capped at 60 s, each scaled by a random 0.5 to 1. */
const BACKOFF_INITIAL_MS = 500;
export const BACKOFF_MAX_MS = 60_000;
/** A broker that does not answer CONNECT within this is given up for the next. */
const CONNECT_TIMEOUT_MS = 10_000;
/** How long a clean stop waits for the broker at each step (the last word, the disconnect). */
const STOP_STEP_MS = 1_000;

type MqttClientClass = typeof import("mqtt").MqttClient;
let mqttClientClass: Promise<MqttClientClass> | undefined;
/**
 * mqtt.js's client class, loaded with the first link: an agent without
 * `fleet:` never evaluates it. Its client alone, not its index, whose
 * connect() loads every protocol's stream builder at the first connection
 * (WebSocket and TLS included: 1.7 MB more heap); the link dials its one
 * protocol itself ({@link connectClient}).
 */
export function loadMqtt(): Promise<MqttClientClass> {
  // A CommonJS module whose exports.default is the class: imported from ESM (Node) or from the bundle (esbuild), the
  // namespace's default is those exports.
  mqttClientClass ??= import("mqtt/lib/client").then((module) => {
    const exported = (module as unknown as { default: MqttClientClass | { default: MqttClientClass } }).default;
    return typeof exported === "function" ? exported : exported.default;
  });
  return mqttClientClass;
}

/** A client connecting to `options`' broker: plain TCP, or TLS (node:tls loaded only then) verified against the policy's CA. */
export async function connectClient(options: IClientOptions): Promise<MqttClient> {
  const Client = await loadMqtt();
  const host = options.host!;
  const port = options.port!;
  if (options.protocol !== "mqtts") return new Client(() => net.connect({ host, port }), options);
  // Not import(): the executable's bundle has no dynamic import of Node's modules.
  const tls = process.getBuiltinModule("node:tls") as typeof import("node:tls");
  const { ca, cert, key } = options;
  return new Client((client) => {
    const socket = tls.connect({ host, port, servername: net.isIP(host) === 0 ? host : undefined, ca, cert, key, rejectUnauthorized: true });
    // A handshake that fails (an unknown CA, a wrong name) reaches the link as the client's error, with its reason.
    const handshakeFailed = (error: Error) => {
      client.emit("error", error);
      socket.end();
    };
    socket.on("error", handshakeFailed);
    socket.once("secureConnect", () => socket.removeListener("error", handshakeFailed));
    return socket;
  }, options);
}

/** The delay before the attempt that follows `failures` failures in a row. */
export function reconnectDelay(failures: number, random: () => number): number {
  const ceiling = backoffDelay({ initialMs: BACKOFF_INITIAL_MS, maxMs: BACKOFF_MAX_MS }, failures + 1);
  return Math.round(ceiling * (0.5 + random() / 2));
}

/** A timer for mqtt.js's keepalive manager that never fires. */
const NO_KEEPALIVE_TIMER = { set: () => 0, clear: () => {} };

/** mqtt.js's options for `url`; throws when a credential file cannot be used. */
export function clientOptions(policy: FleetPolicy, url: string, protocolVersion: 4 | 5, willTopic: string): IClientOptions {
  // mqtt.js would dial through that proxy: a variable in the agent's environment must not move its traffic.
  if (process.env.MQTTJS_SOCKS_PROXY !== undefined) throw new Error("MQTTJS_SOCKS_PROXY is set: the fleet link does not go through SOCKS proxies; unset it");
  const offline: OnlinePayload = { online: false };
  // Given as parts: mqtt.js parses a URL string with node:url's deprecated parse(), which warns on stderr.
  const parsed = new URL(url);
  const tls = parsed.protocol === "mqtts:";
  const options: IClientOptions = {
    protocol: tls ? "mqtts" : "mqtt",
    host: parsed.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: parsed.port === "" ? (tls ? 8883 : 1883) : Number(parsed.port),
    clientId: policy.clientId,
    keepalive: Math.ceil(policy.keepaliveMs / 1000),
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: CONNECT_TIMEOUT_MS,
    protocolVersion,
    resubscribe: false,
    queueQoSZero: false,
    // mqtt-packet's cache is 65,536 two-byte Buffers made at the first packet: some 7 MB of heap for a link that sends a few packets a minute.
    writeCache: false,
    // mqtt.js's keepalive timer fires twice per keepalive and pings when nothing was acknowledged meanwhile; the link's
    // online refresh, once per keepalive and acknowledged, is its ping and its check that the broker answers (link.ts).
    timerVariant: NO_KEEPALIVE_TIMER,
    will: { topic: willTopic, payload: Buffer.from(JSON.stringify(offline)), qos: policy.qos, retain: true },
  };
  if (policy.usernameFile !== null) options.username = readSecretLine(policy.usernameFile, "fleet.usernameFile");
  if (policy.passwordFile !== null) options.password = readSecretLine(policy.passwordFile, "fleet.passwordFile");
  if (tls) {
    const { ca, cert, key } = policy.tls;
    if (ca !== null) options.ca = readCredentialFile(ca, "fleet.tls.ca", false);
    if (cert !== null) options.cert = readCredentialFile(cert, "fleet.tls.cert", false);
    if (key !== null) options.key = readCredentialFile(key, "fleet.tls.key", true);
    options.rejectUnauthorized = true;
  }
  return options;
}

/** Runs `call` after `ms` (on the next turn of the event loop when 0 or less); returns its cancel. */
export function later(ms: number, call: () => void): () => void {
  if (ms <= 0) {
    const immediate = setImmediate(call);
    return () => clearImmediate(immediate);
  }
  const timer = setTimeout(call, ms);
  return () => clearTimeout(timer);
}

/** `promise`, or nothing once `ms` passed. */
export function withTimeout(promise: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]).finally(() => clearTimeout(timer));
}

/**
 * Ends `client`: publishes `lastWord` (retained, QoS 1) and disconnects
 * cleanly when given, each step bounded by {@link STOP_STEP_MS}, then drops the
 * socket; its later errors are ignored.
 */
export async function closeClient(client: MqttClient, lastWord: { topic: string; payload: string } | null): Promise<void> {
  if (lastWord !== null) {
    await withTimeout(new Promise<void>((resolve) => client.publish(lastWord.topic, lastWord.payload, { qos: 1, retain: true }, () => resolve())), STOP_STEP_MS);
    await withTimeout(new Promise<void>((resolve) => client.end(false, {}, () => resolve())), STOP_STEP_MS);
  }
  client.removeAllListeners();
  client.on("error", () => {});
  client.end(true);
}

/**
 * How the fleet link connects: mqtt.js loaded on first use, its options from
 * the policy (credential and TLS files read at each attempt, so a rotated
 * password or certificate is picked up by the next connection), the
 * reconnect backoff, and small timer helpers.
 */
import type { IClientOptions, MqttClient } from "mqtt";
import type { FleetPolicy } from "../policy/types.ts";
import { readCredentialFile, readSecretLine } from "./credentials.ts";
import type { OnlinePayload } from "./topics.ts";

/** Reconnect delays: from 500 ms, doubling, capped at 60 s, each scaled by a random 0.5 to 1. */
const BACKOFF_INITIAL_MS = 500;
export const BACKOFF_MAX_MS = 60_000;
/** A broker that does not answer CONNECT within this is given up for the next. */
const CONNECT_TIMEOUT_MS = 10_000;
/** How long a clean stop waits for the broker at each step (the last word, the disconnect). */
const STOP_STEP_MS = 1_000;

type MqttModule = typeof import("mqtt");
let mqttModule: Promise<MqttModule> | undefined;
/** mqtt.js is loaded with the first link: an agent without `fleet:` never evaluates it. */
export function loadMqtt(): Promise<MqttModule> {
  mqttModule ??= import("mqtt");
  return mqttModule;
}

/** The delay before the attempt that follows `failures` failures in a row. */
export function backoffDelay(failures: number, random: () => number): number {
  const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** Math.min(failures, 20));
  return Math.round(ceiling * (0.5 + random() / 2));
}

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

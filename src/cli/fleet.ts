/**
 * `edgeplug fleet status`: reads every node's retained online and status
 * topics from the fleet's broker (docs/fleet.md) and prints a row per node;
 * `--watch` stays subscribed and redraws on change.
 */
import type { IClientOptions, MqttClient } from "mqtt";
import { connectClient } from "../fleet/connect.ts";
import { readCredentialFile, readSecretLine } from "../fleet/credentials.ts";
import { fleetToJson, fleetToText, FleetView } from "../fleet/fleet-view.ts";
import { FLEET_TOPIC_VERSION, nodeFromLevel } from "../fleet/topics.ts";
import { printable } from "../log/printable.ts";
import { messageOf } from "../log/error-message.ts";
import { BROKER_URL_PATTERN, TOPIC_PREFIX_PATTERN } from "../policy/fleet-schema.ts";
import { durationFlag, outputFlag, parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug fleet status --broker URL [--prefix P] [--output text|json] [--watch] [--stale DUR] [--exit-zero]

Reads every node's retained online and status topics from the fleet's MQTT broker and prints
a row per node: online, offline or stale, last seen, plugins registered/failed/stale, devices
healthy/total and allocations.

Options:
  --broker URL         mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (required)
  --prefix P           the agents' fleet.prefix (default edgeplug)
  --output text|json   a table for people (default) or JSON for scripts
  --watch              stay subscribed and print the fleet again on each change (JSON: one object per line)
  --stale DUR          call an online node stale when it wrote nothing for DUR (default 2m; 0 never)
  --exit-zero          exit 0 once the broker answered, whatever the nodes say
  --username-file F    file holding the user name for the broker
  --password-file F    file holding the password (refused when group- or world-readable)
  --ca F               CA certificates for an mqtts:// broker (PEM)
${COMMON_OPTIONS_HELP}

Exit codes: 0 every node online, fresh and ok (or the broker answered, with --exit-zero; --watch:
stopped by SIGINT/SIGTERM), 1 a node is offline, stale or not ok, or the broker could not be read,
2 bad usage.
`;

const options = {
  broker: { type: "string" },
  prefix: { type: "string" },
  output: { type: "string" },
  watch: { type: "boolean" },
  stale: { type: "string" },
  "exit-zero": { type: "boolean" },
  "username-file": { type: "string" },
  "password-file": { type: "string" },
  ca: { type: "string" },
} as const;

/** Retained messages come right after the subscription is granted: the read ends once none came for this long. */
const QUIET_MS = 150;
/** The whole one-shot read, connection included, gives up after this. */
const READ_TIMEOUT_MS = 10_000;
/** --watch redraws at most this often. */
const REDRAW_MS = 250;
const DEFAULT_STALE_MS = 120_000;

export const fleetCommand: Command = {
  name: "fleet",
  summary: "fleet status: every node's state from the fleet's MQTT broker",
  usage,
  async run(args, io) {
    const [subcommand, ...rest] = args;
    if (subcommand !== "status") {
      throw new UsageError(`edgeplug fleet: expected the subcommand status, got ${subcommand === undefined ? "nothing" : JSON.stringify(subcommand)}`);
    }
    const parsed = parseCommandArgs("fleet status", rest, options);
    const { values } = parsed;
    const output = outputFlag("fleet status", values.output);
    if (values.broker === undefined) throw new UsageError("edgeplug fleet status: --broker URL is required");
    if (!new RegExp(BROKER_URL_PATTERN).test(values.broker)) {
      throw new UsageError(`edgeplug fleet status: --broker: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got ${JSON.stringify(values.broker)}`);
    }
    const prefix = values.prefix ?? "edgeplug";
    if (!new RegExp(TOPIC_PREFIX_PATTERN).test(prefix)) {
      throw new UsageError(`edgeplug fleet status: --prefix: expected topic levels without +, # or empty levels, got ${JSON.stringify(prefix)}`);
    }
    if (values.stale?.startsWith("-")) throw new UsageError(`edgeplug fleet status: --stale: must not be negative, got ${JSON.stringify(values.stale)}`);
    const staleMs = values.stale === undefined ? DEFAULT_STALE_MS : durationFlag("fleet status", "stale", values.stale);
    let clientOptions: IClientOptions;
    try {
      clientOptions = connectOptions(values.broker, values["username-file"], values["password-file"], values.ca);
    } catch (error) {
      throw new UsageError(`edgeplug fleet status: ${messageOf(error)}`);
    }
    const view = new FleetView();
    let client: MqttClient;
    try {
      client = await connectClient(clientOptions);
    } catch (error) {
      io.stderr(printable(`edgeplug fleet status: broker ${values.broker}: ${messageOf(error)}`) + "\n");
      return EXIT_FAILURE;
    }
    const fail = (why: string) => {
      io.stderr(printable(`edgeplug fleet status: broker ${values.broker}: ${why}`) + "\n");
      return EXIT_FAILURE;
    };
    /** The fleet as printed, and whether every node is fine. */
    const render = () => {
      const now = new Date();
      const rows = view.rows(now, staleMs);
      const json = fleetToJson(rows, view.leftOut);
      return { text: output === "json" ? JSON.stringify(json, null, values.watch ? undefined : 2) + "\n" : fleetToText(rows, view.leftOut, now), ok: json.ok === true };
    };
    try {
      const topics = topicsOf(prefix);
      const read = await readRetained(client, topics, view, io.signal);
      if (read !== null) return fail(read);
      const first = render();
      io.stdout(first.text);
      if (!values.watch) return first.ok || values["exit-zero"] ? EXIT_OK : EXIT_FAILURE;
      // Redrawn when what a row says changes, not when only an age moved on.
      let shown = signature(view, staleMs);
      const redraw = () => {
        const now = signature(view, staleMs);
        if (now === shown) return;
        shown = now;
        io.stdout(output === "text" ? `\n${render().text}` : render().text);
      };
      const ended = await watch(client, topics, view, io.signal, redraw);
      return ended === null ? EXIT_OK : fail(ended);
    } finally {
      client.end(true);
    }
  },
};

function signature(view: FleetView, staleMs: number): string {
  return JSON.stringify(view.rows(new Date(), staleMs).map(({ lastSeen: _lastSeen, ...row }) => row));
}

function connectOptions(broker: string, usernameFile: string | undefined, passwordFile: string | undefined, ca: string | undefined): IClientOptions {
  const url = new URL(broker);
  const tls = url.protocol === "mqtts:";
  return {
    protocol: tls ? "mqtts" : "mqtt",
    host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: url.port === "" ? (tls ? 8883 : 1883) : Number(url.port),
    clientId: `edgeplug-fleet-status-${process.pid}-${Math.random().toString(16).slice(2, 10)}`,
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: READ_TIMEOUT_MS,
    // 3.1.1: NATS's MQTT speaks no other, and a reader needs nothing of MQTT 5.
    protocolVersion: 4,
    writeCache: false,
    ...(usernameFile === undefined ? {} : { username: readSecretLine(usernameFile, "--username-file") }),
    ...(passwordFile === undefined ? {} : { password: readSecretLine(passwordFile, "--password-file") }),
    ...(ca === undefined ? {} : { ca: readCredentialFile(ca, "--ca", false) }),
    rejectUnauthorized: true,
  };
}

type FleetTopics = ReturnType<typeof topicsOf>;

/** The subscription's topics, and what a topic says: its node and kind. */
function topicsOf(prefix: string) {
  const base = `${prefix}/${FLEET_TOPIC_VERSION}/`;
  return {
    filters: [`${base}+/online`, `${base}+/status`],
    parse(topic: string): { node: string; kind: "online" | "status" } | null {
      if (!topic.startsWith(base)) return null;
      const [level, kind, extra] = topic.slice(base.length).split("/");
      if (extra !== undefined || level === undefined || (kind !== "online" && kind !== "status")) return null;
      return { node: nodeFromLevel(level), kind };
    },
  };
}

/**
 * Connects, subscribes and takes retained messages until none came for
 * {@link QUIET_MS}; null when read, else why not.
 */
function readRetained(client: MqttClient, topics: FleetTopics, view: FleetView, signal: AbortSignal): Promise<string | null> {
  return new Promise((resolve) => {
    let quiet: NodeJS.Timeout | undefined;
    const deadline = setTimeout(() => finish("no answer within 10s"), READ_TIMEOUT_MS);
    const finish = (result: string | null) => {
      clearTimeout(deadline);
      clearTimeout(quiet);
      signal.removeEventListener("abort", onAbort);
      client.removeListener("message", onMessage);
      resolve(result);
    };
    const onAbort = () => finish("interrupted");
    signal.addEventListener("abort", onAbort);
    const settle = () => {
      clearTimeout(quiet);
      quiet = setTimeout(() => finish(null), QUIET_MS);
    };
    const onMessage = (topic: string, payload: Buffer) => {
      const at = topics.parse(topic);
      if (at) view.take(at.node, at.kind, payload);
      settle();
    };
    client.on("message", onMessage);
    client.on("error", (error) => finish(messageOf(error)));
    client.on("close", () => finish("connection closed"));
    client.on("connect", () => {
      client.subscribe(topics.filters, { qos: 0 }, (error, granted) => {
        if (error) return finish(messageOf(error));
        // 128: the broker refused the subscription (an ACL), which would otherwise read as an empty fleet.
        if (granted?.some((grant) => grant.qos === 128)) return finish(`subscription to ${topics.filters.join(" and ")} refused`);
        settle();
      });
    });
  });
}

/** Prints on each change (at most every {@link REDRAW_MS}, and when a node turns stale) until the signal; null then, else why it ended. */
function watch(client: MqttClient, topics: FleetTopics, view: FleetView, signal: AbortSignal, print: () => void): Promise<string | null> {
  return new Promise((resolve) => {
    let pending: NodeJS.Timeout | undefined;
    const schedule = () => (pending ??= setTimeout(() => ((pending = undefined), print()), REDRAW_MS));
    // A node turns stale with no message: looked at every second.
    const tick = setInterval(schedule, 1_000);
    const finish = (result: string | null) => {
      clearTimeout(pending);
      clearInterval(tick);
      signal.removeEventListener("abort", onAbort);
      resolve(result);
    };
    const onAbort = () => finish(null);
    if (signal.aborted) return finish(null);
    signal.addEventListener("abort", onAbort);
    client.on("message", (topic: string, payload: Buffer) => {
      const at = topics.parse(topic);
      if (at && view.take(at.node, at.kind, payload)) schedule();
    });
    client.on("close", () => finish("connection lost"));
  });
}

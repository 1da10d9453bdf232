/**
 * `edgeplug status`: asks the running agent over its API socket and prints
 * the status for people (a table) or scripts (docs/status-json.md);
 * `--watch` then prints every event as it arrives.
 */
import * as fs from "node:fs";
import { createClient } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event } from "../gen/edgeplug/v1/agent_pb.ts";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import { statusToJson, statusToText, watchLimitsLine } from "../api/status.ts";
import { printable } from "../log/printable.ts";
import { dialUnixHttp1 } from "../rpc/unix-http1-transport.ts";
import { messageOf } from "../log/error-message.ts";
import { eventToJson } from "../api/event-json.ts";
import { installLightHeaders } from "./light-headers.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { probeSocket } from "../platform/socket-probe.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug status [--config PATH | --api SOCKET] [--output text|json] [--exit-zero] [--watch]

Asks the running agent for every known plugin socket, resource and allocation.

Options:
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket (overrides --config)
  --output text|json   a table for people (default) or JSON for scripts (the API's JSON, absent values as null)
  --exit-zero          exit 0 when the agent answers, even when it reports not ok
  --watch              after the status, print each event as it comes (JSON: one object per line)
${COMMON_OPTIONS_HELP}

Exit codes: 0 the agent reports ok (or answered, with --exit-zero; --watch: stopped by SIGINT/SIGTERM),
1 the agent reports not ok, is unreachable, or went away during --watch, 2 bad usage.
`;

const options = {
  config: { type: "string" },
  api: { type: "string" },
  output: { type: "string" },
  watch: { type: "boolean" },
  "exit-zero": { type: "boolean" },
} as const;

/** How long to wait for the agent to answer before calling it unreachable. */
const STATUS_TIMEOUT_MS = 5_000;

export const statusCommand: Command = {
  name: "status",
  summary: "show the running agent's plugins, resources and allocations",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("status", args, options);
    const output = outputFlag("status", parsed.values.output);
    const socket = await apiSocketFor("status", parsed.values.api, parsed.values.config, io.stderr);
    installLightHeaders();
    const channel = dialUnixHttp1(socket, { connectTimeoutMs: STATUS_TIMEOUT_MS });
    /** Whether --watch has received anything: after that, an end is the agent going away. */
    let watching = false;
    try {
      const client = createClient(Agent, channel.transport);
      if (!parsed.values.watch) {
        const status = await client.status({}, { timeoutMs: STATUS_TIMEOUT_MS, signal: io.signal });
        io.stdout(output === "json" ? JSON.stringify(statusToJson(status), null, 2) + "\n" : statusToText(status));
        return status.ok || parsed.values["exit-zero"] ? EXIT_OK : EXIT_FAILURE;
      }
      for await (const event of client.watchEvents({}, { signal: io.signal })) {
        watching = true;
        io.stdout(output === "json" ? JSON.stringify(eventToJson(event)) + "\n" : eventToText(event));
      }
      if (io.signal.aborted) return EXIT_OK;
      io.stderr(printable(`edgeplug status: the agent at ${socket} went away (it ended the event stream); watch ended`) + "\n");
      return EXIT_FAILURE;
    } catch (error) {
      if (io.signal.aborted) return EXIT_OK;
      const what = watching ? "went away" : "unreachable";
      io.stderr(printable(`edgeplug status: agent at ${socket} ${what}: ${describe(error)}`) + "\n");
      return EXIT_FAILURE;
    } finally {
      channel.close();
    }
  },
};

/**
 * The API socket named by `--api`, else by the policy's `api.socket` (from
 * `--config`, or the default policy). A policy file that does not load does
 * not cut the way to a running agent, which still serves the policy it
 * started with: the socket is then the one the broken file names, if its
 * YAML still says, else the default policy's, whichever answers first; the
 * command says so on stderr. With neither answering, the policy's errors
 * stand (exit 2).
 */
export async function apiSocketFor(command: string, api: string | undefined, config: string | undefined, stderr?: (text: string) => void): Promise<string> {
  if (api !== undefined) return api;
  // Loaded only here: with --api, status needs neither YAML nor the policy validator.
  const { resolvePolicy, loadDefaultPolicy, MAX_POLICY_BYTES } = await import("../policy/load.ts");
  let policy: Awaited<ReturnType<typeof resolvePolicy>>;
  try {
    policy = await resolvePolicy(config);
  } catch (error) {
    const { PolicyError } = await import("../policy/errors.ts");
    if (!(error instanceof PolicyError) || stderr === undefined) throw error;
    const file = error.issues[0]?.file ?? config ?? "the policy";
    const named = await socketNamedIn(file, MAX_POLICY_BYTES);
    const candidates = [...new Set([named, loadDefaultPolicy().api.socket].filter((socket) => socket !== null))];
    for (const socket of candidates) {
      if (!(await answers(socket))) continue;
      stderr(printable(`edgeplug ${command}: the policy ${file} is invalid (edgeplug validate --config ${file} says why); using the running agent's API socket ${socket}, which answers`) + "\n");
      return socket;
    }
    throw error;
  }
  if (policy.api.socket === null) {
    throw new UsageError(`edgeplug ${command}: the policy ${policy.source} disables the API (api.socket: null); pass --api SOCKET`);
  }
  return policy.api.socket;
}

/** `api.socket` as a policy file that does not validate still states it (a string starting with /), or null. */
async function socketNamedIn(file: string, maxBytes: number): Promise<string | null> {
  let text: string;
  try {
    const fd = fs.openSync(file, "r");
    try {
      const buffer = Buffer.alloc(maxBytes);
      text = buffer.subarray(0, fs.readSync(fd, buffer, 0, maxBytes, 0)).toString("utf8");
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return null;
  }
  try {
    const { parseDocument } = await import("yaml");
    const socket = parseDocument(text, { logLevel: "silent", uniqueKeys: false }).getIn(["api", "socket"]);
    return typeof socket === "string" && socket.startsWith("/") ? socket : null;
  } catch {
    return null;
  }
}

/** Whether something accepts connections on the unix socket at `socketPath` within a second. */
async function answers(socketPath: string): Promise<boolean> {
  return (await probeSocket(socketPath)) === "accepts";
}

function describe(error: unknown): string {
  const kind = classifyRpcError(error);
  if (kind === "missing") return "no socket there (is the agent running?)";
  if (kind === "stale") return "connection refused (stale socket: the agent is not running)";
  return messageOf(error);
}

/** One line per change; every value from a plugin or the API is shown with control characters escaped. */
function eventToText(event: Event): string {
  const time = event.time ? timestampDate(event.time).toISOString() : "-";
  switch (event.kind.case) {
    case "snapshot":
      return statusToText(event.kind.value) + "\n";
    case "plugin": {
      const plugin = event.kind.value.plugin;
      if (!plugin) return "";
      const state = event.kind.value.removed ? "removed" : plugin.state;
      const what = [plugin.type, plugin.name].filter(Boolean).join(" ");
      const error = plugin.error && !event.kind.value.removed ? `: ${plugin.error}` : "";
      return printable(`${time} plugin ${state.padEnd(10)} ${plugin.socket}${what ? ` (${what})` : ""}${error}`) + "\n";
    }
    case "resource": {
      const resource = event.kind.value.resource;
      if (!resource) return "";
      const state = event.kind.value.removed ? "removed" : resource.connected ? "connected" : "disconnected";
      return printable(`${time} resource ${resource.name} ${state} ${resource.healthy.length}/${resource.capacity} healthy`) + "\n";
    }
    case "allocation": {
      const { owner, released, allocations } = event.kind.value;
      const devices = allocations.map((a) => `${a.resource}=${a.devices.join(",")}`).join(" ");
      return printable(`${time} ${released ? "released" : "allocated"} ${owner}${devices ? ` ${devices}` : ""}`) + "\n";
    }
    case "watchLimits": {
      const limits = event.kind.value.watchLimits;
      return `${time} ${limits ? watchLimitsLine(limits) : "watch limits no longer reached: every directory and socket is watched"}\n`;
    }
    default:
      return "";
  }
}

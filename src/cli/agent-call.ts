/**
 * What `allocate` and `release` share: the flags that find the agent, the
 * checks on `--owner` and `--container` (made before anything is dialled,
 * so a typo is a usage error, exit 2), and one call to the agent whose
 * failure is told apart as the agent refusing (its reason, which for
 * allocation is the kubelet's text) or the agent not being there.
 */
import { type Client, createClient } from "@connectrpc/connect";
import { ConnectError } from "@connectrpc/connect";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import { MAX_CONTAINER_LENGTH, MAX_OWNER_LENGTH } from "../devicemanager/allocation.ts";
import { printable } from "../log/printable.ts";
import { formatDuration } from "../policy/duration.ts";
import { dialUnixHttp1 } from "../rpc/unix-http1-transport.ts";
import { installLightHeaders } from "./light-headers.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { waitFlag } from "./args.ts";
import type { CommandIO } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { apiSocketFor } from "./status.ts";

/** Flags every command that calls the agent takes. */
export const AGENT_CALL_OPTIONS = {
  owner: { type: "string" },
  config: { type: "string" },
  api: { type: "string" },
  output: { type: "string" },
  timeout: { type: "string" },
} as const;

/**
 * How long an allocation may take by default: the agent bounds each call to
 * a plugin at 30 s (GetPreferredAllocation, Allocate, PreStartContainer),
 * so a slow plugin's whole sequence fits with room to spare.
 */
export const DEFAULT_CALL_TIMEOUT_MS = 120_000;
/** Connecting to the API socket; a local socket answers at once or not at all. */
const CONNECT_TIMEOUT_MS = 5_000;

/** C0, DEL and C1: a name flag holding one is refused before the agent is asked. */
// deno-lint-ignore no-control-regex
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;

/** Checks a name flag against the bound the agent holds it to; throws a UsageError naming the flag and the bound. */
export function nameFlag(command: string, flag: string, value: string | undefined, bound: number, why: string): string {
  if (value === undefined) throw new UsageError(`edgeplug ${command}: --${flag} is required`);
  if (value === "") throw new UsageError(`edgeplug ${command}: --${flag} must not be empty`);
  if (value.length > bound) {
    throw new UsageError(`edgeplug ${command}: --${flag} is ${value.length} characters long; at most ${bound} (${why})`);
  }
  if (CONTROL_CHARACTER.test(value)) throw new UsageError(`edgeplug ${command}: --${flag} ${JSON.stringify(value)} contains a control character`);
  return value;
}

/** `--owner`: a pod UID or name in the checkpoint and the pod-resources API. */
export function ownerFlag(command: string, value: string | undefined): string {
  return nameFlag(command, "owner", value, MAX_OWNER_LENGTH, "the length of a Kubernetes object name");
}

/** `--container` (default "main"): the checkpoint's ContainerName. */
export function containerFlag(command: string, value: string | undefined): string {
  return nameFlag(command, "container", value ?? "main", MAX_CONTAINER_LENGTH, "the length of a container name, a DNS label");
}

/** A failure the command itself decided (not an RPC error): its message is printed as it is. */
export class CallFailure extends Error {}

export interface AgentCall {
  command: string;
  api: string | undefined;
  config: string | undefined;
  timeout: string | undefined;
  /** What the call does, for the message when it times out ("the allocation"). */
  what: string;
}

/**
 * Finds the agent, runs `call` on an Agent client and returns the exit
 * code: 0 when `call` returned, 1 (reason on stderr) when the agent refused
 * or could not be reached or did not answer in time.
 */
export async function callAgent(io: CommandIO, options: AgentCall, call: (client: Client<typeof Agent>, timeoutMs: number) => Promise<void>): Promise<number> {
  const timeoutMs = options.timeout === undefined ? DEFAULT_CALL_TIMEOUT_MS : waitFlag(options.command, "timeout", options.timeout);
  const socket = await apiSocketFor(options.command, options.api, options.config, io.stderr);
  installLightHeaders();
  const channel = dialUnixHttp1(socket, { connectTimeoutMs: CONNECT_TIMEOUT_MS });
  try {
    await call(createClient(Agent, channel.transport), timeoutMs);
    return EXIT_OK;
  } catch (error) {
    io.stderr(printable(`edgeplug ${options.command}: ${failure(error, socket, timeoutMs, options.what, io.signal.aborted)}`) + "\n");
    return EXIT_FAILURE;
  } finally {
    channel.close();
  }
}

function failure(error: unknown, socket: string, timeoutMs: number, what: string, interrupted: boolean): string {
  if (error instanceof CallFailure) return error.message;
  const kind = classifyRpcError(error);
  const message = error instanceof ConnectError ? error.rawMessage : error instanceof Error ? error.message : String(error);
  switch (kind) {
    case "status":
      return `refused: ${message}`;
    case "deadline":
      return `the agent at ${socket} did not answer within ${formatDuration(timeoutMs)}; it may still complete ${what} (see edgeplug status)`;
    case "canceled":
      return interrupted ? `interrupted; the agent may still complete ${what} (see edgeplug status)` : `canceled: ${message}`;
    case "disconnected":
      return `the agent at ${socket} went away before it answered: ${message}; it may have completed ${what} (see edgeplug status)`;
    case "missing":
      return `agent at ${socket} unreachable: no socket there (is the agent running?)`;
    case "stale":
      return `agent at ${socket} unreachable: connection refused (stale socket: the agent is not running)`;
    default:
      return `agent at ${socket} unreachable: ${message}`;
  }
}

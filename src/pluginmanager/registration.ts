/**
 * The register and unregister sequences (kubelet-facts.md §3.7-3.8) with
 * SPEC.md's differences: the socket's owner is checked before dialing, a
 * refused connection is reported `stale` at once, the registration
 * connection is closed when the attempt ends, and when it dropped before
 * NotifyRegistrationStatus the plugin is dialled again to be told.
 */
import * as fs from "node:fs";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { Client } from "@connectrpc/connect";
import { Registration } from "../gen/pluginregistration/v1/api_pb.ts";
import type { Logger } from "../log/logger.ts";
import { formatDuration } from "../policy/duration.ts";
import type { Policy, WatchDir } from "../policy/types.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import type { RpcFailure } from "../rpc/rpc-error.ts";
import { dialUnix } from "../rpc/unix-channel.ts";
import type { UnixChannel } from "../rpc/unix-channel.ts";
import type { AvailableHandler, HandlerSet } from "./handler-set.ts";
import { nameRefusal, versionRefusal } from "./handler-set.ts";
import type { Clock } from "./operations.ts";
import { systemClock } from "./operations.ts";
import type { ActualStateOfWorld, DesiredSocket, RegisteredPlugin } from "./state.ts";
import { inodeOf } from "./state.ts";
import type { PluginRegistration } from "./types.ts";

/** What GetInfo answered, with the endpoint defaulted to the registration socket. */
export interface PluginInfoSummary {
  type: string;
  name: string;
  endpoint: string;
  versions: string[];
}

/** How one registration attempt ended. `aborted`: the socket went away or the manager is stopping. */
export interface AttemptOutcome {
  state: "registered" | "failed" | "stale" | "aborted";
  error: string | null;
  /** null until GetInfo has answered. */
  info: PluginInfoSummary | null;
}

export interface RegistrationContext {
  policy: Policy;
  handlers: HandlerSet;
  asw: ActualStateOfWorld;
  log: Logger;
  /** The clock {@link DesiredSocket.discoveredAt} was taken with (default: the system's). */
  clock?: Clock;
}

/**
 * A plugin binds its socket before it listens, and the watcher sees the file
 * at bind(): a refused connection this soon after discovery is a plugin still
 * starting, so it is dialled again (1, 2, 4... ms apart) until this much time
 * after discovery has passed, and only then reported stale.
 */
const LISTEN_GRACE_MS = 100;

/**
 * Runs one registration attempt for a discovered socket, from the owner
 * check to NotifyRegistrationStatus(true). Never throws: every way it can
 * end is an {@link AttemptOutcome}. On success the plugin is in the actual state.
 */
export async function registerPlugin(
  desired: DesiredSocket,
  context: RegistrationContext,
  signal: AbortSignal,
): Promise<AttemptOutcome> {
  // The whole attempt runs under the policy and handlers it started with.
  const { policy, handlers, asw } = context;
  const { socket } = desired;
  const { timeouts } = policy.reconcile;
  const socketRefusal = checkSocketFile(socket, policy, desired.inode);
  if (socketRefusal) return { state: "failed", error: socketRefusal, info: null };

  const connection = new RegistrationConnection(socket, timeouts.dialMs);
  let info: PluginInfoSummary | null = null;
  /** Ends the attempt as failed, telling the plugin why when it can still be reached. */
  const refuse = async (reason: string): Promise<AttemptOutcome> => {
    if (signal.aborted) return { state: "aborted", error: reason, info };
    await connection.notify(false, reason, timeouts.notifyMs, signal).catch((error) => {
      context.log.debug("could not tell the plugin it was refused", { socket, error: describe(error) });
    });
    return { state: "failed", error: reason, info };
  };
  try {
    try {
      info = await getInfoOnceListening(connection, desired, timeouts.getInfoMs, context.clock ?? systemClock, signal);
    } catch (error) {
      return await getInfoFailure(socket, error, timeouts.getInfoMs, signal, refuse);
    }
    const decision = decideHandler(policy, handlers, socket, info);
    if ("refusal" in decision) return await refuse(decision.refusal);
    const { handler } = decision.entry;
    const registration: PluginRegistration = { socket, ...info };

    const releaseSlot = asw.reserveSlot(policy.security.maxPlugins);
    if (!releaseSlot) return await refuse(`maxPlugins limit of ${policy.security.maxPlugins} reached`);
    const plugin: RegisteredPlugin = { socket, inode: desired.inode, registration, handler };
    try {
      await handler.validatePlugin(registration, signal);
      if (signal.aborted) return { state: "aborted", error: null, info };
      // Recorded before RegisterPlugin, as the kubelet does, so that a socket
      // deleted meanwhile is processed as a deregistration.
      asw.add(plugin);
    } catch (error) {
      return await refuse(`RegisterPlugin error -- plugin validation failed with err: ${describe(error)}`);
    } finally {
      releaseSlot();
    }

    try {
      await handler.registerPlugin(registration, signal);
    } catch (error) {
      // Out of the actual state, so that the backoff retries it (kubernetes#133335).
      if (asw.get(socket) === plugin) asw.remove(socket);
      return await refuse(`RegisterPlugin error -- plugin registration failed with err: ${describe(error)}`);
    }
    if (signal.aborted) return { state: "aborted", error: null, info };

    try {
      await connection.notify(true, "", timeouts.notifyMs, signal);
    } catch (error) {
      if (asw.get(socket) === plugin) unregisterPlugin(plugin, asw, context.log);
      const reason = `RegisterPlugin error -- failed to send registration status at socket ${socket}, err: ${describe(error)}`;
      return { state: signal.aborted ? "aborted" : "failed", error: reason, info };
    }
    return { state: "registered", error: null, info };
  } finally {
    connection.close();
  }
}

/** Removes a plugin from the actual state and tells its handler. Never dials the plugin. */
export function unregisterPlugin(plugin: RegisteredPlugin, asw: ActualStateOfWorld, log: Logger): void {
  if (asw.get(plugin.socket) === plugin) asw.remove(plugin.socket);
  try {
    plugin.handler.deregisterPlugin(plugin.registration);
  } catch (error) {
    log.error("handler failed to deregister plugin", { socket: plugin.socket, error: describe(error) });
  }
}

/**
 * Why `policy` refuses a plugin registered earlier (socket owner, type,
 * watch directory `types`, allow/deny, versions), or null when it still
 * accepts it. Never dials the plugin: its GetInfo answer at registration is used.
 */
export function registeredPluginRefusal(plugin: RegisteredPlugin, policy: Policy, handlers: HandlerSet): string | null {
  const stat = lstatOrNull(plugin.socket);
  // A socket gone or re-created is the watcher's to report, not a refusal.
  const owner = stat && inodeOf(stat) === plugin.inode ? ownerRefusal(stat, policy) : null;
  if (owner) return owner;
  const decision = decideHandler(policy, handlers, plugin.socket, plugin.registration);
  return "refusal" in decision ? decision.refusal : null;
}

/** The handler that takes a plugin, or why none does (type, watch dir `types`, allow/deny, versions). */
export function decideHandler(
  policy: Policy,
  handlers: HandlerSet,
  socket: string,
  info: PluginInfoSummary,
): { entry: AvailableHandler } | { refusal: string } {
  const entry = handlers.get(info.type);
  if (!entry) return { refusal: `RegisterPlugin error -- no handler registered for plugin type: ${info.type} at socket ${socket}` };
  if (entry.unavailable !== undefined) return { refusal: entry.unavailable };
  const dir = watchDirOf(policy, socket);
  if (dir?.types && !dir.types.includes(info.type)) {
    return { refusal: `plugin type ${info.type} is not accepted from watch directory ${dir.path} (types ${JSON.stringify(dir.types)})` };
  }
  const refusal = nameRefusal(entry.policy, info.name) ?? versionRefusal(entry.policy, info.versions);
  return refusal ? { refusal } : { entry };
}

/** The result of {@link probePlugin}. */
export interface ProbeResult {
  socket: string;
  /** GetInfo's answer; null when it did not answer. */
  info: PluginInfoSummary | null;
  /** How the call failed (`missing`, `stale`, `deadline`, `not-grpc`, `status`...); null when it answered. */
  failure: RpcFailure | "not-a-socket" | null;
  error: string | null;
  /** The plugin type whose handler would take it; null when none would. */
  handler: string | null;
  /** Why registration would refuse it (owner, type, dir, name, versions); null when it would be accepted. */
  refusal: string | null;
}

/**
 * For plugin authors (`edgeplug probe`): dials one registration socket, calls
 * GetInfo and says which handler of the policy would take it. Sends no
 * NotifyRegistrationStatus and changes no state.
 */
export async function probePlugin(socket: string, policy: Policy, handlers: HandlerSet): Promise<ProbeResult> {
  const result: ProbeResult = { socket, info: null, failure: null, error: null, handler: null, refusal: null };
  const stat = lstatOrNull(socket);
  if (stat && !stat.isSocket()) return { ...result, failure: "not-a-socket", error: `${socket} is not a unix socket` };
  const connection = new RegistrationConnection(socket, policy.reconcile.timeouts.dialMs);
  try {
    result.info = await connection.getInfo(policy.reconcile.timeouts.getInfoMs);
  } catch (error) {
    return { ...result, failure: classifyRpcError(error), error: describe(error) };
  } finally {
    connection.close();
  }
  const decision = decideHandler(policy, handlers, socket, result.info);
  if ("entry" in decision) result.handler = decision.entry.type;
  result.refusal = checkSocketFile(socket, policy) ?? ("refusal" in decision ? decision.refusal : null);
  return result;
}

/** Why the file at `socket` may not be dialled (gone, replaced, not a socket, foreign owner), or null. */
function checkSocketFile(socket: string, policy: Policy, inode?: string): string | null {
  const stat = lstatOrNull(socket);
  if (!stat) return `socket ${socket} no longer exists`;
  if (!stat.isSocket()) return `${socket} is not a unix socket`;
  if (inode !== undefined && inodeOf(stat) !== inode) return `socket ${socket} was re-created during registration`;
  return ownerRefusal(stat, policy);
}

function ownerRefusal(stat: fs.BigIntStats, policy: Policy): string | null {
  const owners = policy.security.socketOwners;
  if (owners.includes(Number(stat.uid))) return null;
  return `socket owned by uid ${stat.uid}, not in security.socketOwners ${JSON.stringify(owners)}`;
}

/** GetInfo, dialling again while a refused socket may still be between bind() and listen(). */
async function getInfoOnceListening(
  connection: RegistrationConnection,
  desired: DesiredSocket,
  getInfoMs: number,
  clock: Clock,
  signal: AbortSignal,
): Promise<PluginInfoSummary> {
  const graceEnds = desired.discoveredAt.getTime() + LISTEN_GRACE_MS;
  for (let delayMs = 1; ; delayMs *= 2) {
    try {
      return await connection.getInfo(getInfoMs, signal);
    } catch (error) {
      const remainingMs = graceEnds - clock.now();
      if (remainingMs <= 0 || signal.aborted || classifyRpcError(error) !== "stale") throw error;
      await pause(Math.min(delayMs, remainingMs), clock, signal);
    }
  }
}

/** Resolves after `ms`, or at once when `signal` fires. */
function pause(ms: number, clock: Clock, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      cancel();
      signal.removeEventListener("abort", done);
      resolve();
    };
    const cancel = clock.setTimer(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

async function getInfoFailure(
  socket: string,
  error: unknown,
  getInfoMs: number,
  signal: AbortSignal,
  refuse: (reason: string) => Promise<AttemptOutcome>,
): Promise<AttemptOutcome> {
  const failure = classifyRpcError(error);
  if (signal.aborted) return { state: "aborted", error: describe(error), info: null };
  if (failure === "stale") {
    return { state: "stale", error: `RegisterPlugin error -- dial failed at socket ${socket}, err: connection refused (stale socket: no plugin is listening)`, info: null };
  }
  if (failure === "missing") return { state: "failed", error: `socket ${socket} no longer exists`, info: null };
  const cause = failure === "deadline" ? `no answer within ${formatDuration(getInfoMs)}` : describe(error);
  const reason = `RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket ${socket}, err: ${cause}`;
  // A plugin that answered with a gRPC error can be told; a silent or garbled one cannot.
  return failure === "status" ? refuse(reason) : { state: "failed", error: reason, info: null };
}

/**
 * The registration connection of one attempt: dialled on first use, closed
 * by {@link close}, dialled again once if it dropped before a notification.
 */
class RegistrationConnection {
  readonly #socket: string;
  readonly #dialMs: number;
  #channel: UnixChannel | null = null;
  #client: Client<typeof Registration> | null = null;

  constructor(socket: string, dialMs: number) {
    this.#socket = socket;
    this.#dialMs = dialMs;
  }

  async getInfo(timeoutMs: number, signal?: AbortSignal): Promise<PluginInfoSummary> {
    const info = await this.#dial().getInfo({}, { timeoutMs, signal });
    return {
      type: info.type,
      name: info.name,
      endpoint: info.endpoint === "" ? this.#socket : info.endpoint,
      versions: [...info.supportedVersions],
    };
  }

  async notify(registered: boolean, error: string, timeoutMs: number, signal: AbortSignal): Promise<void> {
    const status = { pluginRegistered: registered, error };
    try {
      await this.#dial().notifyRegistrationStatus(status, { timeoutMs, signal });
    } catch (failure) {
      if (signal.aborted || !connectionDropped(failure)) throw failure;
      // The plugin may still be there on a new connection (kubernetes PR #138170).
      this.close();
      await this.#dial().notifyRegistrationStatus(status, { timeoutMs, signal });
    }
  }

  close(): void {
    this.#channel?.close();
    this.#channel = null;
    this.#client = null;
  }

  #dial(): Client<typeof Registration> {
    if (!this.#client) {
      this.#channel = dialUnix(this.#socket, { connectTimeoutMs: this.#dialMs });
      this.#client = createClient(Registration, this.#channel.transport);
    }
    return this.#client;
  }
}

/** A failure of the connection rather than an answer from the plugin (or its silence). */
function connectionDropped(error: unknown): boolean {
  const failure = classifyRpcError(error);
  if (failure === "disconnected" || failure === "not-grpc" || failure === "canceled") return true;
  return failure === "status" && ConnectError.from(error).code === Code.Unavailable;
}

/** The watch directory a socket was found in: the deepest one containing it. */
export function watchDirOf(policy: Policy, socket: string): WatchDir | undefined {
  let best: WatchDir | undefined;
  for (const dir of policy.watch) {
    const prefix = dir.path.endsWith("/") ? dir.path : `${dir.path}/`;
    if (socket.startsWith(prefix) && (!best || dir.path.length > best.path.length)) best = dir;
  }
  return best;
}

function lstatOrNull(target: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(target, { bigint: true });
  } catch {
    return null;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

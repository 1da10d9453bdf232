/**
 * The register and unregister sequences (kubelet-facts.md §3.7-3.8) with
 * SPEC.md's differences: the socket's owner is checked before dialing, a
 * refused connection is reported `stale` at once, the registration
 * connection is closed when the attempt ends, and when it dropped before
 * NotifyRegistrationStatus the plugin is dialled again to be told.
 */
import * as fs from "node:fs";
import type { Logger } from "../log/logger.ts";
import { formatDuration } from "../policy/duration.ts";
import type { Policy, WatchDir } from "../policy/types.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import type { AvailableHandler, HandlerSet } from "./handler-set.ts";
import { nameRefusal, versionRefusal } from "./handler-set.ts";
import type { Clock } from "./operations.ts";
import { systemClock } from "./operations.ts";
import { PLUGIN_INFO_LIMITS, pluginInfoProblem, RegistrationConnection } from "./registration-client.ts";
import type { PluginInfoSummary } from "./registration-client.ts";
import type { ActualStateOfWorld, DesiredSocket, RegisteredPlugin } from "./state.ts";
import { inodeOf } from "./state.ts";
import type { AttemptFailure, PluginRegistration } from "./types.ts";

export type { PluginInfoSummary } from "./registration-client.ts";

/** How one registration attempt ended; `info` is null until GetInfo has answered. */
export type AttemptOutcome =
  | { state: "registered"; reason: null; error: null; info: PluginInfoSummary }
  | { state: "failed" | "stale"; reason: AttemptFailure; error: string; info: PluginInfoSummary | null }
  /** The socket went away or the manager is stopping: nothing to report. */
  | { state: "aborted"; reason: null; error: null; info: PluginInfoSummary | null };

/** Why an attempt fails: the reason it counts under and the text the plugin and `status` read. */
export interface Refusal {
  reason: AttemptFailure;
  error: string;
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
  if (socketRefusal) return failed(socketRefusal, null);

  const connection = new RegistrationConnection(socket, timeouts.dialMs);
  let info: PluginInfoSummary | null = null;
  const aborted = (): AttemptOutcome => ({ state: "aborted", reason: null, error: null, info });
  /** Ends the attempt as failed, telling the plugin why when it can still be reached. */
  const refuse = async (refusal: Refusal): Promise<AttemptOutcome> => {
    if (signal.aborted) return aborted();
    await connection.notify(false, refusal.error, timeouts.notifyMs, signal).catch((error) => {
      context.log.debug("could not tell the plugin it was refused", { socket, error: describe(error) });
    });
    return failed(refusal, info);
  };
  try {
    try {
      const answer = await getInfoOnceListening(connection, desired, timeouts.getInfoMs, context.clock ?? systemClock, signal);
      // Out of bounds, it is not kept: the error names the field and its size.
      const problem = pluginInfoProblem(answer);
      if (problem !== null) return await refuse({ reason: "invalid_info", error: problem });
      info = answer;
    } catch (error) {
      if (signal.aborted) return aborted();
      return await getInfoFailure(socket, error, timeouts.getInfoMs, refuse);
    }
    const decision = decideHandler(policy, handlers, socket, info);
    if ("refusal" in decision) return await refuse(decision.refusal);
    const { handler } = decision.entry;
    const registration: PluginRegistration = { socket, ...info };

    const releaseSlot = asw.reserveSlot(policy.security.maxPlugins);
    if (!releaseSlot) return await refuse({ reason: "max_plugins", error: `maxPlugins limit of ${policy.security.maxPlugins} reached` });
    const plugin: RegisteredPlugin = { socket, inode: desired.inode, registration, handler };
    try {
      await handler.validatePlugin(registration, signal);
      if (signal.aborted) return aborted();
      // Recorded before RegisterPlugin, as the kubelet does, so that a socket
      // deleted meanwhile is processed as a deregistration.
      asw.add(plugin);
    } catch (error) {
      return await refuse({ reason: "validation", error: `RegisterPlugin error -- plugin validation failed with err: ${describe(error)}` });
    } finally {
      releaseSlot();
    }

    try {
      await handler.registerPlugin(registration, signal);
    } catch (error) {
      // Out of the actual state, so that the backoff retries it (kubernetes#133335).
      if (asw.get(socket) === plugin) asw.remove(socket);
      return await refuse({ reason: "register", error: `RegisterPlugin error -- plugin registration failed with err: ${describe(error)}` });
    }
    if (signal.aborted) return aborted();

    try {
      await connection.notify(true, "", timeouts.notifyMs, signal);
    } catch (error) {
      if (asw.get(socket) === plugin) unregisterPlugin(plugin, asw, context.log);
      if (signal.aborted) return aborted();
      const text = `RegisterPlugin error -- failed to send registration status at socket ${socket}, err: ${describe(error)}`;
      return failed({ reason: "notify", error: text }, info);
    }
    return { state: "registered", reason: null, error: null, info };
  } finally {
    connection.close();
  }
}

/** A socket that refuses connections: its plugin died and left it. */
export function staleSocket(socket: string): Refusal {
  return { reason: "stale", error: `RegisterPlugin error -- dial failed at socket ${socket}, err: connection refused (stale socket: no plugin is listening)` };
}

/** A failed (or, when nothing listens, stale) outcome. */
function failed(refusal: Refusal, info: PluginInfoSummary | null): AttemptOutcome {
  return { state: refusal.reason === "stale" ? "stale" : "failed", ...refusal, info };
}

/** Removes a plugin from the actual state and tells its handler. Never dials the plugin. */
export function unregisterPlugin(plugin: RegisteredPlugin, asw: ActualStateOfWorld, log: Logger): void {
  if (asw.get(plugin.socket) === plugin) asw.remove(plugin.socket);
  try {
    plugin.handler.deregisterPlugin(plugin.registration);
  } catch (error) {
    log.error("handler failed to deregister plugin", { socket: plugin.socket, error: describe(error) });
  }
  const { socket, type, name } = plugin.registration;
  log.debug("plugin deregistered", { socket, type, name });
}

/**
 * Why `policy` refuses a plugin registered earlier (socket owner, type,
 * watch directory `types`, allow/deny, versions), or null when it still
 * accepts it. Never dials the plugin: its GetInfo answer at registration is used.
 */
export function registeredPluginRefusal(plugin: RegisteredPlugin, policy: Policy, handlers: HandlerSet): Refusal | null {
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
): { entry: AvailableHandler } | { refusal: Refusal } {
  const entry = handlers.get(info.type);
  if (!entry) {
    return { refusal: { reason: "no_handler", error: `RegisterPlugin error -- no handler registered for plugin type: ${info.type} at socket ${socket}` } };
  }
  if (entry.unavailable !== undefined) return { refusal: { reason: "handler_unavailable", error: entry.unavailable } };
  const dir = watchDirOf(policy, socket);
  const error =
    dir?.types && !dir.types.includes(info.type)
      ? `plugin type ${info.type} is not accepted from watch directory ${dir.path} (types ${JSON.stringify(dir.types)})`
      : (nameRefusal(entry.policy, info.name) ?? versionRefusal(entry.policy, info.versions));
  return error ? { refusal: { reason: "policy", error } } : { entry };
}

/** Why the file at `socket` may not be dialled (gone, replaced, not a socket, foreign owner), or null. */
export function checkSocketFile(socket: string, policy: Policy, inode?: string): Refusal | null {
  const stat = lstatOrNull(socket);
  const missing = (error: string): Refusal => ({ reason: "socket_missing", error });
  if (!stat) return missing(`socket ${socket} no longer exists`);
  if (!stat.isSocket()) return missing(`${socket} is not a unix socket`);
  if (inode !== undefined && inodeOf(stat) !== inode) return missing(`socket ${socket} was re-created during registration`);
  return ownerRefusal(stat, policy);
}

function ownerRefusal(stat: fs.BigIntStats, policy: Policy): Refusal | null {
  const owners = policy.security.socketOwners;
  if (owners.includes(Number(stat.uid))) return null;
  return { reason: "socket_owner", error: `socket owned by uid ${stat.uid}, not in security.socketOwners ${JSON.stringify(owners)}` };
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

/** How an attempt ends when GetInfo failed (the attempt was not aborted). */
async function getInfoFailure(
  socket: string,
  error: unknown,
  getInfoMs: number,
  refuse: (refusal: Refusal) => Promise<AttemptOutcome>,
): Promise<AttemptOutcome> {
  const failure = classifyRpcError(error);
  if (failure === "stale") return failed(staleSocket(socket), null);
  if (failure === "missing") return failed({ reason: "socket_missing", error: `socket ${socket} no longer exists` }, null);
  if (failure === "oversize") {
    const limit = `${PLUGIN_INFO_LIMITS.answerBytes / 1024} KiB`;
    return refuse({ reason: "invalid_info", error: `RegisterPlugin error -- invalid plugin info: the GetInfo answer at socket ${socket} is larger than ${limit}` });
  }
  const cause = failure === "deadline" ? `no answer within ${formatDuration(getInfoMs)}` : describe(error);
  const refusal: Refusal = { reason: "get_info", error: `RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket ${socket}, err: ${cause}` };
  // A plugin that answered with a gRPC error can be told; a silent or garbled one cannot.
  return failure === "status" ? refuse(refusal) : failed(refusal, null);
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

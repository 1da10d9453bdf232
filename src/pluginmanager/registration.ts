/**
 * The register and unregister operations (the kubelet's operation
 * generator), except that the socket's owner is checked before dialling, a
 * refused connection is `stale` at once, the connection closes with the
 * attempt, and a plugin whose connection dropped before
 * NotifyRegistrationStatus is dialled again to be told.
 */
import * as fs from "node:fs";
import type { Logger } from "../log/logger.ts";
import { type Clock, pause, systemClock } from "../platform/clock.ts";
import { ownerRefusal } from "../policy/admission.ts";
import { formatDuration } from "../policy/duration.ts";
import type { Policy } from "../policy/types.ts";
import { classifiedAs, classifyRpcError } from "../rpc/rpc-error.ts";
import { messageOf, peerMessageOf } from "../log/error-message.ts";
import { pinFile } from "../platform/pinned-socket.ts";
import { decideHandler, type HandlerSet } from "./handler-set.ts";
import { PLUGIN_INFO_LIMITS, pluginInfoProblem, type PluginInfoSummary, RegistrationConnection } from "./registration-client.ts";
import { type ActualStateOfWorld, type DesiredSocket, inodeOf, type RegisteredPlugin } from "./state-of-world.ts";
import type { AttemptFailure, Failure } from "./types.ts";

/** How one attempt ended; `info` is null until GetInfo answered. `aborted`: the socket went away or the manager is stopping. */
export type AttemptOutcome =
  | { state: "registered"; reason: null; error: null; info: PluginInfoSummary }
  | { state: "failed" | "stale"; reason: AttemptFailure; error: string; info: PluginInfoSummary | null }
  | { state: "aborted"; reason: null; error: null; info: PluginInfoSummary | null };

export type Refusal = Failure & { reason: AttemptFailure };

/** Fails the attempt, telling the plugin why if it can still be reached. */
type Refuse = (refusal: Refusal) => Promise<AttemptOutcome>;

/** What registrations read; a policy reload swaps `policy` and `handlers`. */
export interface RegistrationContext {
  policy: Policy;
  handlers: HandlerSet;
  asw: ActualStateOfWorld;
  log: Logger;
  /** The clock `discoveredAt` was taken with. */
  clock?: Clock;
}

/** The watcher sees a socket at bind(), before listen(): a refusal this soon after discovery is a plugin starting. */
const LISTEN_GRACE_MS = 100;

/** Attempts at once: each holds two descriptors up to its dial timeout (limits are often 1,024); the bench starts 100 at once. */
export const REGISTRATION_ATTEMPTS_AT_ONCE = 128;

/** One attempt, from the owner check to NotifyRegistrationStatus(true). Never throws. */
export async function registerPlugin(desired: DesiredSocket, context: RegistrationContext, signal: AbortSignal): Promise<AttemptOutcome> {
  // The attempt runs under the policy and handlers it started with.
  const { policy, handlers, asw, log } = context;
  const { socket } = desired;
  const { timeouts } = policy.reconcile;
  // Judged as the file opened, which is what is dialled (src/platform/pinned-socket.ts).
  const opened = pinFile(socket);
  const socketRefusal = checkSocketFile(socket, policy, desired.inode, opened?.stat ?? null);
  if (socketRefusal) {
    opened?.close();
    return failed(socketRefusal, null);
  }
  const connection = new RegistrationConnection(socket, timeouts.dialMs, opened!.dialPath);
  let info: PluginInfoSummary | null = null;
  const aborted = (): AttemptOutcome => ({ state: "aborted", reason: null, error: null, info });
  const refuse: Refuse = async (refusal) => {
    if (signal.aborted) return aborted();
    await connection.notify(false, refusal.error, timeouts.notifyMs, signal).catch((error) => {
      log.debug("could not tell the plugin it was refused", { socket, error: peerMessageOf(error) });
    });
    return failed(refusal, info);
  };
  try {
    try {
      const answer = await getInfoOnceListening(connection, desired, timeouts.getInfoMs, context.clock ?? systemClock, signal);
      // Out of bounds it is not kept; the error names the field and its size.
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
    const registration = { socket, ...info };

    const releaseSlot = asw.reserveSlot(policy.security.maxPlugins);
    if (!releaseSlot) return await refuse({ reason: "max_plugins", error: `maxPlugins limit of ${policy.security.maxPlugins} reached` });
    const plugin: RegisteredPlugin = { socket, inode: desired.inode, registration, handler };
    try {
      await handler.validatePlugin(registration, signal);
      if (signal.aborted) return aborted();
      // Recorded before RegisterPlugin, as the kubelet does, so a socket deleted meanwhile is deregistered.
      asw.add(plugin);
    } catch (error) {
      return await refuse({ reason: "validation", error: `RegisterPlugin error -- plugin validation failed with err: ${peerMessageOf(error)}` });
    } finally {
      releaseSlot();
    }

    try {
      await handler.registerPlugin(registration, signal);
    } catch (error) {
      // Out of the actual state, so that the backoff retries it (kubernetes#133335).
      asw.remove(plugin);
      return await refuse({ reason: "register", error: `RegisterPlugin error -- plugin registration failed with err: ${peerMessageOf(error)}` });
    }
    if (signal.aborted) return aborted();

    try {
      await connection.notify(true, "", timeouts.notifyMs, signal);
    } catch (error) {
      if (asw.get(socket) === plugin) unregisterPlugin(plugin, asw, log);
      if (signal.aborted) return aborted();
      const text = `RegisterPlugin error -- failed to send registration status at socket ${socket}, err: ${peerMessageOf(error)}`;
      return failed({ reason: "notify", error: text }, info);
    }
    return { state: "registered", reason: null, error: null, info };
  } finally {
    connection.close();
    opened!.close();
  }
}

/** Removes a plugin from the actual state and tells its handler; never dials it. */
export function unregisterPlugin(plugin: RegisteredPlugin, asw: ActualStateOfWorld, log: Logger): void {
  asw.remove(plugin);
  try {
    plugin.handler.deregisterPlugin(plugin.registration);
  } catch (error) {
    log.error("handler failed to deregister plugin", { socket: plugin.socket, error: messageOf(error) });
  }
  const { socket, type, name } = plugin.registration;
  log.debug("plugin deregistered", { socket, type, name });
}

/** A socket that refuses connections: its plugin died and left it. */
export function staleSocket(socket: string): Refusal {
  return { reason: "stale", error: `RegisterPlugin error -- dial failed at socket ${socket}, err: connection refused (stale socket: no plugin is listening)` };
}

/** Why `policy` now refuses a registered plugin, from its GetInfo answer at registration; null if it still accepts it. */
export function registeredPluginRefusal(plugin: RegisteredPlugin, policy: Policy, handlers: HandlerSet): Refusal | null {
  // A socket gone or re-created is the watcher's to report.
  const socketRefusal = checkSocketFile(plugin.socket, policy, plugin.inode);
  if (socketRefusal?.reason === "socket_owner") return socketRefusal;
  const decision = decideHandler(policy, handlers, plugin.socket, plugin.registration);
  return "refusal" in decision ? decision.refusal : null;
}

/** Why the file at `socket` (`stat`, null when missing) may not be dialled (gone, replaced, not a socket, foreign owner), or null. */
export function checkSocketFile(socket: string, policy: Policy, inode?: string, stat: fs.BigIntStats | null = lstatOrNull(socket)): Refusal | null {
  const missing = (error: string): Refusal => ({ reason: "socket_missing", error });
  if (stat === null) return missing(`socket ${socket} no longer exists`);
  if (!stat.isSocket()) return missing(`${socket} is not a unix socket`);
  if (inode !== undefined && inodeOf(stat) !== inode) return missing(`socket ${socket} was re-created during registration`);
  const error = ownerRefusal(policy, Number(stat.uid));
  return error === null ? null : { reason: "socket_owner", error };
}

function lstatOrNull(target: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(target, { bigint: true });
  } catch {
    return null;
  }
}

function failed(refusal: Refusal, info: PluginInfoSummary | null): AttemptOutcome {
  return { state: refusal.reason === "stale" ? "stale" : "failed", ...refusal, info };
}

async function getInfoOnceListening(
  connection: RegistrationConnection,
  desired: DesiredSocket,
  getInfoMs: number,
  clock: Clock,
  signal: AbortSignal,
): Promise<PluginInfoSummary> {
  const graceEnds = desired.discoveredAt.getTime() + LISTEN_GRACE_MS;
  for (let delayMs = 1;; delayMs *= 2) {
    try {
      return await connection.getInfo(getInfoMs, signal);
    } catch (error) {
      // Bounded by the delays too: a wall clock stepped back must not stretch the grace.
      const remainingMs = Math.min(graceEnds - clock.now(), LISTEN_GRACE_MS);
      if (remainingMs <= 0 || delayMs > LISTEN_GRACE_MS || signal.aborted || classifyRpcError(error) !== "stale") throw error;
      await pause(clock, Math.min(delayMs, remainingMs), signal);
    }
  }
}

async function getInfoFailure(socket: string, error: unknown, getInfoMs: number, refuse: Refuse) {
  const failure = classifyRpcError(error);
  if (failure === "stale") return failed(staleSocket(socket), null);
  if (failure === "missing") return failed({ reason: "socket_missing", error: `socket ${socket} no longer exists` }, null);
  if (failure === "oversize") {
    const limit = `${PLUGIN_INFO_LIMITS.answerBytes / 1024} KiB`;
    return refuse({ reason: "invalid_info", error: `RegisterPlugin error -- invalid plugin info: the GetInfo answer at socket ${socket} is larger than ${limit}` });
  }
  // A deadline the transport marked is its connect timeout, whose message names it; the call's own is getInfo's.
  const cause = failure === "deadline" && classifiedAs(error) !== "deadline" ? `no answer within ${formatDuration(getInfoMs)}` : peerMessageOf(error);
  const refusal: Refusal = { reason: "get_info", error: `RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket ${socket}, err: ${cause}` };
  // A plugin that answered with a gRPC error can be told; a silent or garbled one cannot.
  return failure === "status" ? refuse(refusal) : failed(refusal, null);
}

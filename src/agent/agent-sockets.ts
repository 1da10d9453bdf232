/**
 * The agent's sockets on the kubelet's paths, each kept at its path while
 * the agent runs (socket-keeper.ts): the device-plugin registration socket
 * (kubelet.sock), whose first start removes the plugin sockets beside it as
 * the kubelet's does, and the pod-resources socket.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { AgentMetrics } from "../api/metrics.ts";
import { servePodResourcesSocket } from "../api/pod-resources-socket.ts";
import { SocketKeeper } from "../server/socket-keeper.ts";
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import { type RegistrationServer, serveRegistration } from "../devicemanager/registration-server.ts";
import { SocketInUseError } from "../server/socket-guard.ts";
import type { Logger } from "../log/logger.ts";
import { canonicalDirectory } from "../platform/canonical-path.ts";
import { probeSocket } from "../platform/socket-probe.ts";
import type { Policy } from "../policy/types.ts";
import { requestReporter } from "../rpc/request-reports.ts";
import type { UnixServer } from "../rpc/unix-server.ts";

export interface AgentSocketDeps {
  /** The policy in force (reloads change the resync period and maxPlugins). */
  policy: () => Policy;
  log: Logger;
  devices: DeviceManager;
  metrics: AgentMetrics | null;
  /** The plugin manager's resync, which the sockets' periodic checks ride (PluginManager.onResync). */
  resyncTicks: (check: () => void) => () => void;
}

/** A listening socket removed while running is served again, checked at each resync (in its wakeup). */
export function keeping(deps: AgentSocketDeps, what: string, socketPath: string) {
  return { socketPath, what, log: deps.log, checkIntervalMs: () => deps.policy().reconcile.resyncMs, ticks: deps.resyncTicks };
}

/** Serves kubelet.sock when the policy has it and the DevicePlugin handler; null otherwise. */
export async function keepRegistrationSocket(deps: AgentSocketDeps, slotsHeldByManager: () => number): Promise<SocketKeeper<RegistrationServer> | null> {
  const policy = deps.policy();
  const { registrationSocket } = policy.devicePlugins;
  if (registrationSocket === null || !policy.handlers.has("DevicePlugin")) return null;
  const slots = { limit: () => deps.policy().security.maxPlugins, heldElsewhere: slotsHeldByManager };
  // The kubelet's restart signal is given once: kubelet.sock served again while running removes only stale sockets.
  let starting = removesLiveSocketsAtStart(policy, deps.log);
  const keepSockets = [policy.api.socket, policy.podResources.socket].filter((socket) => socket !== null);
  return SocketKeeper.start({
    ...keeping(deps, "device plugin registration socket", registrationSocket),
    serve: () => {
      const removeLiveSockets = starting;
      starting = false;
      return serveRegistration({
        socketPath: registrationSocket,
        manager: deps.devices,
        log: deps.log,
        slots,
        removeLiveSockets,
        keepSockets,
        reports: requestReporter(deps.log, "registration", deps.metrics?.requestCounters("registration")),
      });
    },
  });
}

/** kubelet.sock as a once-mode agent serves it (agent/once.ts). */
export interface OnceRegistration {
  server: RegistrationServer;
  socket: string;
  /** When it began serving (performance.now()). */
  servedSince: number;
  /** Sockets in its directory that accepted connections before it was served: device plugins already running. */
  liveAtStart: string[];
}

/**
 * Serves kubelet.sock for one run, not kept at its path: null when the policy
 * has none or no DevicePlugin handler; who holds it when another process does
 * (logged).
 * Live plugin sockets beside it stay (only stale ones go); those are noted so
 * that the run waits for their plugins to register again.
 */
export async function serveRegistrationOnce(deps: AgentSocketDeps, slotsHeldByManager: () => number): Promise<OnceRegistration | { heldBy: string } | null> {
  const policy = deps.policy();
  const { registrationSocket } = policy.devicePlugins;
  if (registrationSocket === null || !policy.handlers.has("DevicePlugin")) return null;
  const slots = { limit: () => policy.security.maxPlugins, heldElsewhere: slotsHeldByManager };
  const liveAtStart = await liveSocketsBeside(registrationSocket, policy.security.maxPlugins);
  try {
    const server = await serveRegistration({ socketPath: registrationSocket, manager: deps.devices, log: deps.log, slots });
    return { server, socket: registrationSocket, servedSince: performance.now(), liveAtStart };
  } catch (error) {
    if (!(error instanceof SocketInUseError)) throw error;
    deps.log.warn("device plugins registering on the registration socket are not collected: it is served by another process", { socket: registrationSocket, holder: error.holder });
    return { heldBy: error.holder };
  }
}

/**
 * Sockets beside `registrationSocket` (not it) that accept connections: at
 * most `limit` of them looked at, since the directory is anyone's who may
 * write there. Nothing when the directory cannot be read (serving
 * kubelet.sock then says why).
 */
async function liveSocketsBeside(registrationSocket: string, limit: number): Promise<string[]> {
  let directory: string;
  let entries: fs.Dirent[];
  try {
    // Real paths, as a registered plugin's endpoint is known by its real path.
    directory = fs.realpathSync(path.dirname(registrationSocket));
    entries = fs.readdirSync(directory, { withFileTypes: true });
  } catch {
    return [];
  }
  const sockets = entries
    .filter((entry) => entry.isSocket())
    .map((entry) => path.join(directory, entry.name))
    .filter((socket) => socket !== path.join(directory, path.basename(registrationSocket)))
    .sort()
    .slice(0, limit);
  const live = await Promise.all(sockets.map(async (socket) => ((await acceptsConnections(socket)) ? socket : null)));
  return live.filter((socket) => socket !== null);
}

/** Serves podResources.socket when the policy has one; null otherwise. */
export async function keepPodResourcesSocket(deps: AgentSocketDeps): Promise<SocketKeeper<UnixServer> | null> {
  const socketPath = deps.policy().podResources.socket;
  if (socketPath === null) return null;
  return SocketKeeper.start({
    ...keeping(deps, "pod-resources socket", socketPath),
    serve: () =>
      servePodResourcesSocket({
        socketPath,
        devices: deps.devices,
        log: deps.log,
        onLimit: (action) => deps.metrics?.observeLimit("pod-resources", action),
        reports: requestReporter(deps.log, "pod-resources", deps.metrics?.requestCounters("pod-resources")),
      }),
  });
}

/**
 * devicePlugins.removeSocketsAtStart, except when kubelet.sock's directory
 * is watched: the sockets there are the plugin watcher's, and their plugins
 * (a CSI registrar) may never create them again.
 */
export function removesLiveSocketsAtStart(policy: Policy, log: Logger): boolean {
  const { registrationSocket, removeSocketsAtStart } = policy.devicePlugins;
  if (!removeSocketsAtStart || registrationSocket === null) return false;
  const directory = canonicalDirectory(path.dirname(registrationSocket));
  const watched = policy.watch.find((dir) => {
    const relative = path.relative(canonicalDirectory(dir.path), directory);
    return relative === "" || (dir.recursive && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative));
  });
  if (watched === undefined) return true;
  log.info("device plugin sockets are left at start: their directory is watched", { directory, watch: watched.path });
  return false;
}

/** Whether something listens on the unix socket `socketPath` (a running daemon's API, a plugin); one that is slow to accept counts. */
export async function acceptsConnections(socketPath: string): Promise<boolean> {
  const probe = await probeSocket(socketPath);
  return probe === "accepts" || probe === "silent";
}

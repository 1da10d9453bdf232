/**
 * The agent's sockets on the kubelet's paths, each kept at its path while
 * the agent runs (socket-keeper.ts): the device-plugin registration socket
 * (kubelet.sock), whose first start removes the plugin sockets beside it as
 * the kubelet's does, and the pod-resources socket.
 */
import * as path from "node:path";
import type { AgentMetrics } from "../api/metrics.ts";
import { servePodResourcesSocket } from "../api/pod-resources-socket.ts";
import { SocketKeeper } from "../server/socket-keeper.ts";
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import { serveRegistration, type RegistrationServer } from "../devicemanager/registration-server.ts";
import type { Logger } from "../log/logger.ts";
import { canonicalDirectory } from "../platform/canonical-path.ts";
import type { Policy } from "../policy/types.ts";
import { requestReporter } from "../rpc/request-reports.ts";
import type { UnixServer } from "../rpc/unix-server.ts";

export interface AgentSocketDeps {
  /** The policy in force (reloads change the resync period and maxPlugins). */
  policy: () => Policy;
  log: Logger;
  devices: DeviceManager;
  metrics: AgentMetrics | null;
}

/** A listening socket removed while running is served again, checked each resync. */
export function keeping(deps: AgentSocketDeps, what: string, socketPath: string) {
  return { socketPath, what, log: deps.log, checkIntervalMs: () => deps.policy().reconcile.resyncMs };
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

/**
 * The agent's sockets on the kubelet's paths, each kept at its path while
 * the agent runs (socket-keeper.ts): the device-plugin registration socket
 * (kubelet.sock) and the pod-resources socket.
 */
import type { AgentMetrics } from "./api/metrics.ts";
import { servePodResourcesSocket } from "./api/pod-resources-socket.ts";
import { SocketKeeper } from "./api/socket-keeper.ts";
import type { DeviceManager } from "./handlers/deviceplugin/manager.ts";
import { serveRegistration, type RegistrationServer } from "./handlers/deviceplugin/registration-server.ts";
import type { Logger } from "./log/logger.ts";
import type { Policy } from "./policy/types.ts";
import { authorityReporter } from "./rpc/authority.ts";
import type { UnixServer } from "./rpc/unix-server.ts";

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
  return SocketKeeper.start({
    ...keeping(deps, "device plugin registration socket", registrationSocket),
    serve: () =>
      serveRegistration({
        socketPath: registrationSocket,
        manager: deps.devices,
        log: deps.log,
        slots,
        onAuthorityReplaced: authorityReporter(deps.log, "registration", () => deps.metrics?.observeAuthorityReplaced("registration")),
      }),
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
        onAuthorityReplaced: authorityReporter(deps.log, "pod-resources", () => deps.metrics?.observeAuthorityReplaced("pod-resources")),
      }),
  });
}

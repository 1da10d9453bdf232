/**
 * The agent in its once mode, for `run --reconcile-once`: the same wiring
 * as the daemon (agent.ts), without the API, metrics, pod-resources socket,
 * fleet and liveness. The checkpoint is restored before any plugin connects,
 * device plugins register through the watched directories and, when the
 * policy has one and nobody serves it, through the registration socket; the
 * run then waits for the first ListAndWatch list of every connected plugin.
 *
 * Device plugins registering on kubelet.sock are not in the plugin manager's
 * records: the run knows them as the device manager's connections, and the
 * agent notes which sockets of kubelet.sock's directory accepted connections
 * at the start (plugins already running, that re-register when they see
 * kubelet.sock re-created), so that a run without expectations waits for them.
 *
 * A daemon beside the run (its API socket answers) owns the checkpoint and
 * kubelet.sock: the run reads the checkpoint but does not write it, so it
 * never puts back a state older than the daemon's, and it does not serve
 * kubelet.sock, so device plugins registered with the daemon stay unseen.
 */
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import type { Logger } from "../log/logger.ts";
import type { Policy } from "../policy/types.ts";
import { EdgeplugAgent } from "./agent.ts";
import { acceptsConnections } from "./agent-sockets.ts";

/**
 * Builds the agent in once mode and starts it. Rejects (with everything it
 * took released) when the checkpoint cannot be read, a watch directory
 * cannot be created, or kubelet.sock cannot be prepared for another reason
 * than a live process holding it.
 */
export async function startOnceAgent(policy: Policy, log: Logger): Promise<EdgeplugAgent> {
  const daemonBeside = policy.api.socket !== null && (await acceptsConnections(policy.api.socket));
  const agent = new EdgeplugAgent({ policy, log, once: { daemonBeside } });
  await agent.start();
  return agent;
}

/**
 * Whether the device side has its answer: every connected plugin has sent
 * its first device list and, when `everyResource`, every resource is
 * connected (a resource restored from the checkpoint may still return).
 */
export function devicesSettled(devices: DeviceManager, everyResource: boolean): boolean {
  if (devices.awaitingFirstList().length > 0) return false;
  return !everyResource || devices.resources().every((resource) => resource.connected);
}

/** Device plugins connected through kubelet.sock now: resource and endpoint, sorted by resource then socket. */
export function registrationSocketPlugins(devices: DeviceManager): { resource: string; socket: string }[] {
  const plugins: { resource: string; socket: string }[] = [];
  for (const state of devices.resourceStates()) {
    for (const socket of state.endpoints.keys()) {
      if (devices.hasRegistrationSocketPlugin(state.name, socket)) plugins.push({ resource: state.name, socket });
    }
  }
  return plugins.sort((a, b) => (a.resource === b.resource ? compare(a.socket, b.socket) : compare(a.resource, b.resource)));
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Resolves at the next change of either source, or when `signal` fires. */
export function nextChange(sources: Array<(listener: () => void) => () => void>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const unsubscribes: Array<() => void> = [];
    const done = () => {
      for (const unsubscribe of unsubscribes) unsubscribe();
      signal.removeEventListener("abort", done);
      resolve();
    };
    for (const subscribe of sources) unsubscribes.push(subscribe(done));
    signal.addEventListener("abort", done, { once: true });
    if (signal.aborted) done();
  });
}

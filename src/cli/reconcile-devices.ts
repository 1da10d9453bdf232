/**
 * The device part of `run --reconcile-once`: the checkpoint is restored
 * before any plugin connects, device plugins register through the watched
 * directories and, when the policy has one and nobody serves it, through
 * the registration socket; the run then waits for the first ListAndWatch
 * list of every connected plugin, and the checkpoint is written on stop.
 *
 * Device plugins registering on kubelet.sock are not in the plugin manager's
 * records: the run knows them as the device manager's connections, and
 * notes which sockets of kubelet.sock's directory accepted connections at
 * the start (plugins already running, that re-register when they see
 * kubelet.sock re-created), so that a run without expectations waits for them.
 *
 * A daemon beside the run (its API or registration socket answers) owns the
 * checkpoint: the run reads it but does not write it, so it never puts back
 * a state older than the daemon's, and it leaves the registration socket to
 * the daemon.
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { deviceSettings } from "../devicemanager/device-settings.ts";
import { SocketInUseError } from "../server/socket-guard.ts";
import { CheckpointStore } from "../devicemanager/checkpoint/checkpoint.ts";
import { DeviceManager } from "../devicemanager/device-manager.ts";
import { serveRegistration, type RegistrationServer } from "../devicemanager/registration-server.ts";
import type { LiveEndpointLookup } from "../endpoints/endpoint-rules.ts";
import type { Logger } from "../log/logger.ts";
import type { Policy } from "../policy/types.ts";

export interface ReconcileDevices {
  devices: DeviceManager;
  /** False when a daemon beside the run owns the checkpoint. */
  writesCheckpoint: boolean;
  /** kubelet.sock, when this run serves it (null: no registration socket, or a daemon serves it). */
  registrationSocket: string | null;
  /** When kubelet.sock began serving (performance.now()), or null. */
  servedSince: number | null;
  /** Sockets in kubelet.sock's directory that accepted connections before it was served: device plugins already running. */
  liveAtStart: string[];
  /** `security.maxPlugins` slots held by plugins on the registration socket (the plugin manager's `slotsHeldElsewhere`). */
  slotsHeld(): number;
  /** Stops the registration socket and the device manager, writing the checkpoint (when it may). */
  stop(): Promise<void>;
}

/**
 * Restores the checkpoint and serves the registration socket. Rejects (with
 * everything it took released) when the checkpoint's directory cannot be
 * created or its file cannot be read, or the registration socket cannot be
 * prepared for another reason than a live process holding it.
 */
export async function startReconcileDevices(
  policy: Policy,
  log: Logger,
  pluginManagerSlots: () => number,
  liveElsewhere?: LiveEndpointLookup,
): Promise<ReconcileDevices> {
  const daemon = policy.api.socket !== null && (await answers(policy.api.socket));
  const store = new CheckpointStore({ path: policy.checkpoint.path, log });
  const devices = new DeviceManager({
    log,
    ...deviceSettings(policy),
    store,
    readOnly: daemon,
    liveElsewhere,
  });
  let registration: RegistrationServer | null = null;
  let liveAtStart: string[] = [];
  let servedSince: number | null = null;
  const stop = async () => {
    await registration?.close();
    await devices.stop();
  };
  try {
    await devices.restore();
    const { registrationSocket } = policy.devicePlugins;
    if (registrationSocket !== null && policy.handlers.has("DevicePlugin") && !daemon) {
      const slots = { limit: () => policy.security.maxPlugins, heldElsewhere: pluginManagerSlots };
      liveAtStart = await liveSocketsBeside(registrationSocket, policy.security.maxPlugins);
      registration = await serveRegistration({ socketPath: registrationSocket, manager: devices, log, slots }).catch((error: unknown) => {
        if (!(error instanceof SocketInUseError)) throw error;
        log.warn("device plugins registering on the registration socket are not collected: it is served by another process", { socket: registrationSocket, holder: error.holder });
        return null;
      });
      if (registration !== null) servedSince = performance.now();
      else liveAtStart = [];
    }
  } catch (error) {
    await stop();
    throw error;
  }
  if (daemon) log.warn("an edgeplug daemon serves the API socket: the checkpoint is read, not written", { socket: policy.api.socket, checkpoint: policy.checkpoint.path });
  return {
    devices,
    writesCheckpoint: !daemon,
    registrationSocket: registration === null ? null : policy.devicePlugins.registrationSocket,
    servedSince,
    liveAtStart,
    slotsHeld: () => registration?.slotsHeld ?? 0,
    stop,
  };
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
  const live = await Promise.all(sockets.map(async (socket) => ((await answers(socket)) ? socket : null)));
  return live.filter((socket) => socket !== null);
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

/** Whether something accepts connections on the unix socket `socketPath` (a running daemon's API). */
function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    const done = (answered: boolean) => {
      socket.destroy();
      resolve(answered);
    };
    socket.setTimeout(1000, () => done(true));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

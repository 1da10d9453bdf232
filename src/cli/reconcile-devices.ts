/**
 * The device part of `run --reconcile-once`: the checkpoint is restored
 * before any plugin connects, device plugins register through the watched
 * directories and, when the policy has one and nobody serves it, through
 * the registration socket; the run then waits for the first ListAndWatch
 * list of every connected plugin, and the checkpoint is written on stop.
 *
 * A daemon beside the run (its API or registration socket answers) owns the
 * checkpoint: the run reads it but does not write it, so it never puts back
 * a state older than the daemon's, and it leaves the registration socket to
 * the daemon.
 */
import * as net from "node:net";
import { deviceSettings } from "../handlers/deviceplugin/device-settings.ts";
import { SocketInUseError } from "../api/socket-guard.ts";
import { CheckpointStore } from "../handlers/deviceplugin/checkpoint.ts";
import { DeviceManager } from "../handlers/deviceplugin/manager.ts";
import { serveRegistration, type RegistrationServer } from "../handlers/deviceplugin/registration-server.ts";
import type { LiveEndpointLookup } from "../handlers/endpoint-rules.ts";
import type { Logger } from "../log/logger.ts";
import type { Policy } from "../policy/types.ts";

export interface ReconcileDevices {
  devices: DeviceManager;
  /** False when a daemon beside the run owns the checkpoint. */
  writesCheckpoint: boolean;
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
  const stop = async () => {
    await registration?.close();
    await devices.stop();
  };
  try {
    await devices.restore();
    const { registrationSocket } = policy.devicePlugins;
    if (registrationSocket !== null && policy.handlers.has("DevicePlugin") && !daemon) {
      const slots = { limit: () => policy.security.maxPlugins, heldElsewhere: pluginManagerSlots };
      registration = await serveRegistration({ socketPath: registrationSocket, manager: devices, log, slots }).catch((error: unknown) => {
        if (!(error instanceof SocketInUseError)) throw error;
        log.warn("device plugins registering on the registration socket are not collected: it is served by another process", { socket: registrationSocket, holder: error.holder });
        return null;
      });
    }
  } catch (error) {
    await stop();
    throw error;
  }
  if (daemon) log.warn("an edgeplug daemon serves the API socket: the checkpoint is read, not written", { socket: policy.api.socket, checkpoint: policy.checkpoint.path });
  return { devices, writesCheckpoint: !daemon, slotsHeld: () => registration?.slotsHeld ?? 0, stop };
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

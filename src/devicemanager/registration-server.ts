/**
 * The kubelet's side of `v1beta1.Registration` on
 * `devicePlugins.registrationSocket` (kubelet.sock): device plugins call
 * Register with their socket's file name relative to that directory, and
 * the call returns once edgeplug has connected back, as the kubelet's does.
 *
 * The directory is prepared as the kubelet does at start: every socket in
 * it is removed, live plugins' included, which is how a device plugin learns
 * that it must register again (`removeLiveSockets`, the policy's
 * devicePlugins.removeSocketsAtStart). Unlike the kubelet, nothing else goes:
 * never the checkpoint, never a file that is not a socket, never a
 * directory, never edgeplug's own sockets. Without `removeLiveSockets`, and
 * when the socket is served again while the agent runs, only stale sockets
 * (that refuse connections) are removed. A live process on the registration
 * socket itself is never taken over.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Code, ConnectError, type ConnectRouter, createContextKey, createContextValues } from "@connectrpc/connect";
import { Registration } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import type { Logger } from "../log/logger.ts";
import { ApiRateLimiter, type ApiRateLimits, type ListenerLimits, REGISTRATION_RATE_LIMITS, REGISTRATION_SOCKET_LIMITS } from "../server/limits.ts";
import { serveGuardedGrpc } from "../server/guarded-grpc.ts";
import { claimSocketPath } from "../server/socket-guard.ts";
import type { UnixServer } from "../rpc/unix-server.ts";
import type { RequestReports } from "../rpc/request-reports.ts";
import { canonicalDirectory, canonicalSocketPath } from "../platform/canonical-path.ts";
import { isSameSocket, type PinnedSocket, pinSocket, socketAt, type SocketIdentity } from "../platform/pinned-socket.ts";
import { probeSocket } from "../platform/socket-probe.ts";
import { messageOf } from "../log/error-message.ts";
import type { DeviceManager } from "./device-manager.ts";
import { invalidResourceNameError, isExtendedResourceName, SUPPORTED_VERSIONS, unsupportedVersionError } from "./names.ts";
import { hasControlCharacter } from "../log/printable.ts";

export interface RegistrationServerOptions {
  socketPath: string;
  manager: DeviceManager;
  log: Logger;
  /** Default REGISTRATION_SOCKET_LIMITS; tests pass smaller ones. */
  limits?: ListenerLimits;
  /** Default REGISTRATION_RATE_LIMITS. */
  rateLimits?: ApiRateLimits;
  /** `security.maxPlugins`, shared with the plugin manager (which holds `heldElsewhere` slots); default: no limit. */
  slots?: { limit: () => number; heldElsewhere: () => number };
  /** Told of requests served as `localhost` (their authority was no host) and of those node:http2 reset unseen. */
  reports?: RequestReports;
  /** Remove live plugins' sockets in the directory too, as the kubelet does at start (default: only stale ones). */
  removeLiveSockets?: boolean;
  /** Sockets never removed from the directory: edgeplug's own (the API and pod-resources sockets). */
  keepSockets?: readonly string[];
}

export interface RegistrationServer extends UnixServer {
  /** `security.maxPlugins` slots held by plugins connected through this socket (a Register call in flight holds none). */
  readonly slotsHeld: number;
}

/**
 * Register calls one connection may have in flight (its HTTP/2
 * SETTINGS_MAX_CONCURRENT_STREAMS): a plugin makes one when it starts.
 */
export const MAX_REGISTER_CALLS_PER_CONNECTION = 4;
/**
 * Register calls in flight on the whole socket, each dialling its plugin
 * (a descriptor for the dial beside the caller's connection). They hold no
 * `security.maxPlugins` slot: a plugin takes one only once it answered.
 */
export const MAX_PENDING_REGISTRATIONS = 32;

/** The kubelet's kubelet.sock under root's umask 022: only root may connect (and so register). */
const SOCKET_MODE = 0o755;

/** The connection (HTTP/2 session) a call arrived on: what the rate limit is kept per. */
const connectionKey = createContextKey<object>({}, { description: "device plugin registration connection" });

/** Longest endpoint accepted in a RegisterRequest (a socket path cannot be longer anyway). */
const MAX_ENDPOINT_LENGTH = 107;

/** Prepares the directory and serves Register; close() stops serving and removes the socket. */
export async function serveRegistration(options: RegistrationServerOptions): Promise<RegistrationServer> {
  const { socketPath, manager } = options;
  const log = options.log.with({ component: "registration-server" });
  if (!path.isAbsolute(socketPath)) throw new Error(`bad socketPath, must be an absolute path: ${socketPath}`);
  const directory = path.dirname(socketPath);
  try {
    fs.mkdirSync(directory, { recursive: true, mode: 0o750 });
  } catch (error) {
    throw new Error(`cannot create the device-plugin directory ${directory}: ${messageOf(error)}`);
  }
  await claimSocketPath(socketPath, { expect: "kubelet-registration", log, directoryMode: 0o750 });
  await removePluginSockets(directory, [socketPath, ...(options.keepSockets ?? [])], options.removeLiveSockets ?? false, log);
  // Plugins are untrusted here as everywhere: bounded like the API socket (docs/api.md, "Limits").
  const rateLimiter = new ApiRateLimiter(options.rateLimits ?? REGISTRATION_RATE_LIMITS);
  /** The endpoints being dialled by Register calls in flight: each is dialled once at a time. */
  const pending = new Set<SocketIdentity>();
  const slotsHeld = () => manager.registrationSocketPlugins;
  const routes = (router: ConnectRouter) =>
    router.service(Registration, {
      async register(request, context) {
        const fields = { resource: request.resourceName, endpoint: request.endpoint, version: request.version };
        // The kubelet returns plain errors here, which a grpc-go plugin reads as `rpc error: code = Unknown desc = ...`.
        const refuse = (message: string, code = Code.Unknown): never => {
          log.warn("device plugin registration refused", { ...fields, reason: message });
          throw new ConnectError(message, code);
        };
        // A flood's refusals are not worth a warning each: at debug level, as the rate limit's are not logged at all.
        const busy = (message: string, code: Code): never => {
          log.debug("device plugin registration refused", { ...fields, reason: message });
          throw new ConnectError(message, code);
        };
        if (!SUPPORTED_VERSIONS.includes(request.version)) refuse(unsupportedVersionError(request.version));
        if (!isExtendedResourceName(request.resourceName)) refuse(invalidResourceNameError(request.resourceName));
        if (pending.size >= MAX_PENDING_REGISTRATIONS) {
          busy(`${MAX_PENDING_REGISTRATIONS} Register calls are in flight already; retry later`, Code.ResourceExhausted);
        }
        const endpoint = resolveEndpoint(directory, socketPath, request.endpoint);
        if ("refused" in endpoint) return refuse(endpoint.refused);
        let handedOver = false;
        // Set when the slots filled up while the plugin was dialled: refused as a full node, not as a plugin fault.
        let slotRefusal: string | null = null;
        try {
          if ([...pending].some((other) => isSameSocket(other, endpoint))) {
            busy(`a Register call naming endpoint ${JSON.stringify(request.endpoint)} is in flight already; retry once it has answered`, Code.Aborted);
          }
          const taken = manager.liveEndpointRefusal(request.resourceName, endpoint);
          if (taken) refuse(taken);
          // A plugin connecting again on its own socket takes no new slot: the new connection replaces the old.
          const limit = options.slots?.limit() ?? Infinity;
          const replacing = () => manager.hasRegistrationSocketPlugin(request.resourceName, endpoint.realPath);
          const full = () => !replacing() && slotsHeld() + (options.slots?.heldElsewhere() ?? 0) >= limit;
          if (full()) refuse(`maxPlugins limit of ${limit} reached`, Code.ResourceExhausted);
          pending.add(endpoint);
          handedOver = true;
          const admit = () => (full() ? (slotRefusal = `maxPlugins limit of ${limit} reached`) : null);
          await manager.connect(request.resourceName, endpoint.realPath, { signal: context.signal, viaRegistrationSocket: true, pinned: endpoint, admit });
        } catch (error) {
          if (error instanceof ConnectError) throw error;
          if (slotRefusal !== null) refuse(slotRefusal, Code.ResourceExhausted);
          refuse(messageOf(error));
        } finally {
          if (handedOver) pending.delete(endpoint);
          else endpoint.close();
        }
        log.info("device plugin registered", fields);
        return {};
      },
    });
  const server = await serveGuardedGrpc({
    socketPath,
    routes,
    log,
    handlerLog: log,
    limits: options.limits ?? REGISTRATION_SOCKET_LIMITS,
    mode: SOCKET_MODE,
    name: "device plugin registration socket",
    purpose: "device plugin registration",
    reports: options.reports,
    maxConcurrentStreams: MAX_REGISTER_CALLS_PER_CONNECTION,
    contextValues: (request) => createContextValues().set(connectionKey, request.stream.session ?? request),
    // Runs before the request is read, like the API socket's rate limit.
    requestGate: (context) => {
      if (!rateLimiter.admit(context.values.get(connectionKey))) {
        throw new ConnectError(`rate limit exceeded (${rateLimiter.describe()}); retry later`, Code.ResourceExhausted);
      }
    },
  });
  log.info("device plugin registration socket serving", { socket: socketPath });
  return {
    socketPath,
    close: () => server.close(),
    [Symbol.asyncDispose]: () => server.close(),
    get slotsHeld() {
      return slotsHeld();
    },
  };
}

/** A Register endpoint opened for dialling (the caller closes it), or why it is refused. */
export function resolveEndpoint(directory: string, registrationSocket: string, endpoint: string): PinnedSocket | { refused: string } {
  const quoted = JSON.stringify(endpoint);
  if (endpoint === "") return { refused: `endpoint is empty: expected the plugin's socket file name in ${directory}` };
  if (endpoint.length > MAX_ENDPOINT_LENGTH) return { refused: `endpoint is longer than ${MAX_ENDPOINT_LENGTH} characters` };
  if (hasControlCharacter(endpoint)) return { refused: `endpoint ${quoted} contains a control character` };
  const resolved = path.resolve(directory, endpoint);
  const relative = path.relative(directory, resolved);
  if (relative === "" || relative.startsWith("..") || path.isAbsolute(relative)) {
    return { refused: `endpoint ${quoted} escapes the device-plugin directory ${directory}` };
  }
  const itself = { refused: `endpoint ${quoted} is the registration socket itself` };
  if (resolved === registrationSocket) return itself;
  const opened = pinSocket(resolved);
  if ("refused" in opened) return opened;
  // A plugin that may write in the directory (most run as root there) could link a subdirectory elsewhere.
  const canonicalRelative = path.relative(canonicalDirectory(directory), opened.realPath);
  const registration = socketAt(registrationSocket);
  const refusal = canonicalRelative.startsWith(`..${path.sep}`) || path.isAbsolute(canonicalRelative)
    ? { refused: `endpoint ${quoted} leads out of the device-plugin directory ${directory} through a symbolic link` }
    : opened.realPath === canonicalSocketPath(registrationSocket) || (registration !== null && isSameSocket(opened, registration))
    ? itself
    : null;
  if (refusal === null) return opened;
  opened.close();
  return refusal;
}

/** Most removed sockets named in the start's log line; the count is always there. */
const MAX_NAMED_SOCKETS = 20;

/**
 * Removes the sockets directly in `directory`, but not `keep`: every one
 * with `removeLive` (the kubelet's restart signal to device plugins), else
 * only those that refuse connections (plugins that died). The checkpoint,
 * other files, symbolic links and directories stay.
 */
async function removePluginSockets(directory: string, keep: readonly string[], removeLive: boolean, log: Logger): Promise<void> {
  let names: string[];
  try {
    names = fs.readdirSync(directory);
  } catch (error) {
    throw new Error(`cannot read the device-plugin directory ${directory}: ${messageOf(error)}`);
  }
  const kept = new Set(keep.map((file) => path.resolve(file)));
  const removed: string[] = [];
  await Promise.all(
    names.map(async (name) => {
      const file = path.join(directory, name);
      if (kept.has(file)) return;
      let stat: fs.Stats;
      try {
        stat = fs.lstatSync(file);
      } catch {
        return;
      }
      if (!stat.isSocket() || !(removeLive || (await probeSocket(file)) === "refused")) return;
      try {
        // Only the socket looked at: one a plugin re-created meanwhile is already its answer to the restart.
        const again = fs.lstatSync(file);
        if (again.ino !== stat.ino || again.birthtimeMs !== stat.birthtimeMs) return;
        fs.unlinkSync(file);
        removed.push(name);
      } catch (error) {
        if ((error as { code?: string }).code === "ENOENT") return;
        log.warn("cannot remove device plugin socket", { socket: file, error: messageOf(error) });
      }
    }),
  );
  if (removed.length === 0) return;
  removed.sort();
  log.info(removeLive ? "removed device plugin sockets at start, as the kubelet does" : "removed stale device plugin sockets", {
    directory,
    count: removed.length,
    sockets: removed.slice(0, MAX_NAMED_SOCKETS),
  });
}

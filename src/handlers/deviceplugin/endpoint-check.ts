/**
 * Which DevicePlugin sockets edgeplug agrees to dial, for the two ways a
 * plugin names its endpoint (a device plugin is untrusted).
 *
 * Register on the registration socket (the kubelet's direct path): a file
 * name in the registration socket's directory, which root owns (0750); it
 * may not leave the directory, be the registration socket, a symbolic link
 * or anything but a socket (registration-server.ts resolves it).
 *
 * The watched directory (the kubelet's plugin-watcher path): the kubelet
 * dials the endpoint wherever it is, and edgeplug does too (drivers keep
 * their sockets in their own directories), with the rules that keep one
 * plugin from passing itself off as another: the endpoint must be a socket
 * itself (not a symbolic link), owned by a uid of `security.socketOwners`
 * like the registration socket that named it;
 * inside a watched directory it may only be the plugin's own registration
 * socket (another one there belongs to another plugin); never one of
 * edgeplug's own sockets.
 *
 * On both paths, a socket that a live endpoint of another resource uses is
 * refused: two resources over one plugin would hand out the same devices twice.
 * The rules judge the socket opened for dialling (src/platform/pinned-socket.ts),
 * so a plugin cannot swap it between the rules and the dial.
 */
import * as path from "node:path";
import { canonicalDirectory, canonicalSocketPath } from "../../platform/canonical-path.ts";
import type { PinnedSocket } from "../../platform/pinned-socket.ts";

export interface WatchedEndpointRules {
  /** security.socketOwners */
  socketOwners: readonly number[];
  /** The watch directories (policy `watch[].path`). */
  watchDirs: readonly string[];
  /** Sockets edgeplug serves (the registration socket, the API socket). */
  ownSockets: readonly string[];
}

/** Why a watched-directory plugin's endpoint, opened as `endpoint`, may not be dialled; or null. */
export function watchedEndpointRefusal(endpoint: Pick<PinnedSocket, "realPath" | "stat">, registrationSocket: string, rules: WatchedEndpointRules): string | null {
  const { realPath } = endpoint;
  const uid = Number(endpoint.stat.uid);
  const quoted = JSON.stringify(realPath);
  if (rules.ownSockets.some((own) => canonicalSocketPath(own) === realPath)) return `endpoint ${quoted} is one of edgeplug's own sockets`;
  const watchDirs = rules.watchDirs.map(canonicalDirectory);
  if (realPath !== canonicalSocketPath(registrationSocket) && watchDirs.some((dir) => isInside(realPath, dir))) {
    return `endpoint ${quoted} is in a watched directory but is not this plugin's registration socket ${registrationSocket}: it belongs to another plugin`;
  }
  if (rules.socketOwners.includes(uid)) return null;
  return `endpoint ${quoted} is owned by uid ${uid}, not in security.socketOwners ${JSON.stringify(rules.socketOwners)}`;
}

/** The refusal when a live endpoint of another resource uses `socket`. */
export function sharedSocketRefusal(socket: string, holder: string | undefined, resource: string): string | null {
  if (holder === undefined || holder === resource) return null;
  return `endpoint ${JSON.stringify(socket)} is the socket of device plugin ${holder}; each resource registers its own socket`;
}

function isInside(file: string, dir: string): boolean {
  const relative = path.relative(dir, file);
  // "..sock" is inside; "../x" and ".." are not.
  return relative !== "" && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative);
}

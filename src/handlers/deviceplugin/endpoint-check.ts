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
 * itself (not a symbolic link that could be swapped later) owned by a uid
 * of `security.socketOwners`, like the registration socket that named it;
 * inside a watched directory it may only be the plugin's own registration
 * socket (another one there belongs to another plugin); never one of
 * edgeplug's own sockets.
 *
 * On both paths, a socket that a live endpoint of another resource uses is
 * refused: two resources over one plugin would hand out the same devices twice.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { canonicalDirectory, canonicalSocketPath } from "../../platform/canonical-path.ts";

export interface WatchedEndpointRules {
  /** security.socketOwners */
  socketOwners: readonly number[];
  /** The watch directories (policy `watch[].path`). */
  watchDirs: readonly string[];
  /** Sockets edgeplug serves (the registration socket, the API socket). */
  ownSockets: readonly string[];
}

/**
 * Why a watched-directory plugin's endpoint may not be dialled, or null.
 * `endpoint` is a canonicalSocketPath: a socket named through a linked
 * directory is judged by its real place.
 */
export function watchedEndpointRefusal(endpoint: string, registrationSocket: string, rules: WatchedEndpointRules): string | null {
  const quoted = JSON.stringify(endpoint);
  if (rules.ownSockets.some((own) => canonicalSocketPath(own) === endpoint)) return `endpoint ${quoted} is one of edgeplug's own sockets`;
  const watchDirs = rules.watchDirs.map(canonicalDirectory);
  if (endpoint !== canonicalSocketPath(registrationSocket) && watchDirs.some((dir) => isInside(endpoint, dir))) {
    return `endpoint ${quoted} is in a watched directory but is not this plugin's registration socket ${registrationSocket}: it belongs to another plugin`;
  }
  return socketFileRefusal(endpoint) ?? ownerRefusal(endpoint, rules.socketOwners);
}

/** Why `socket` is not a unix socket of its own (missing, a symbolic link, another kind of file), or null. */
export function socketFileRefusal(socket: string): string | null {
  const quoted = JSON.stringify(socket);
  let stat: fs.Stats;
  try {
    stat = fs.lstatSync(socket);
  } catch {
    return `no socket at ${quoted} (serve DevicePlugin there before registering)`;
  }
  if (stat.isSymbolicLink()) return `endpoint ${quoted} is a symbolic link; name the socket itself`;
  if (!stat.isSocket()) return `endpoint ${quoted} is not a unix socket`;
  return null;
}

/** The refusal when a live endpoint of another resource uses `socket`. */
export function sharedSocketRefusal(socket: string, holder: string | undefined, resource: string): string | null {
  if (holder === undefined || holder === resource) return null;
  return `endpoint ${JSON.stringify(socket)} is the socket of device plugin ${holder}; each resource registers its own socket`;
}

function ownerRefusal(socket: string, owners: readonly number[]): string | null {
  let uid: number;
  try {
    uid = fs.lstatSync(socket).uid;
  } catch {
    return `no socket at ${JSON.stringify(socket)}`;
  }
  if (owners.includes(uid)) return null;
  return `endpoint ${JSON.stringify(socket)} is owned by uid ${uid}, not in security.socketOwners ${JSON.stringify(owners)}`;
}

function isInside(file: string, dir: string): boolean {
  const relative = path.relative(dir, file);
  // "..sock" is inside; "../x" and ".." are not.
  return relative !== "" && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative);
}

/**
 * Which sockets edgeplug agrees to dial when a plugin registered through a
 * watched directory names its endpoint: the DevicePlugin, CSIPlugin and
 * DRAPlugin handlers apply the same rules (every plugin is untrusted).
 *
 * The kubelet dials the endpoint wherever it is, and edgeplug does too
 * (drivers keep their service sockets in their own directories, such as
 * /var/lib/kubelet/plugins/<driver>/), with the rules that keep one plugin
 * from passing itself off as another or reaching edgeplug itself: the
 * endpoint must be a socket itself (not a symbolic link), owned by a uid of
 * `security.socketOwners` like the registration socket that named it;
 * inside a watched directory it may only be the plugin's own registration
 * socket (another one there belongs to another plugin); never one of
 * edgeplug's own sockets; never the live endpoint of a plugin of another
 * kind (a CSI or DRA driver naming a device plugin's socket, or the other
 * way round), which edgeplug would otherwise dial as what it is not.
 * Sockets are compared by inode as well as by real path: a hard link is
 * another name for the same socket, so an endpoint outside the watched
 * directories that is a hard link to a socket directly in one of them is
 * that socket.
 *
 * The rules judge the socket opened for dialling (src/platform/pinned-socket.ts),
 * so a plugin cannot swap it between the rules and the dial.
 *
 * @example
 * ```ts
 * const endpoint = pinServiceEndpoint("DRA", plugin.endpoint, plugin.socket, endpointRules(policy), "the v1.DRAPlugin service");
 * if ("pinned" in endpoint) dialUnix(endpoint.pinned.realPath, { connectPath: endpoint.pinned.dialPath });
 * ```
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { canonicalDirectory, canonicalSocketPath } from "../platform/canonical-path.ts";
import { isSameSocket, type PinnedSocket, pinSocket, socketAt, type SocketIdentity } from "../platform/pinned-socket.ts";
import type { Policy } from "../policy/types.ts";

export interface WatchedEndpointRules {
  /** security.socketOwners */
  socketOwners: readonly number[];
  /** The watch directories (policy `watch[].path`). */
  watchDirs: readonly string[];
  /** Sockets edgeplug serves (the registration socket, the API socket). */
  ownSockets: readonly string[];
}

/** A live plugin, as a refusal of its endpoint to a plugin of another kind names it. */
export interface EndpointHolder {
  kind: "device plugin" | "CSI driver" | "DRA driver";
  /** The device plugin's resource, the driver's name. */
  name: string;
}

/**
 * The live plugin of another kind whose endpoint is `endpoint` (by path or
 * inode), if any. Handlers know nothing of one another: the composition
 * root hands each the others' lookup.
 */
export type LiveEndpointLookup = (endpoint: SocketIdentity) => EndpointHolder | undefined;

/** The refusal of `realPath` to a plugin of `kind` when `holder`, of another kind, serves it. */
export function liveEndpointRefusal(realPath: string, holder: EndpointHolder | undefined, kind: EndpointHolder["kind"]): string | null {
  if (holder === undefined || holder.kind === kind) return null;
  return `endpoint ${JSON.stringify(realPath)} is the live endpoint of ${holder.kind} ${holder.name}; a ${kind} must serve a socket of its own`;
}

/** The refusal of `endpoint` when it is one of edgeplug's own sockets, by path or through a hard link; or null. */
export function ownSocketRefusal(endpoint: SocketIdentity, ownSockets: readonly string[]): string | null {
  const quoted = JSON.stringify(endpoint.realPath);
  for (const own of ownSockets) {
    if (canonicalSocketPath(own) === endpoint.realPath) return `endpoint ${quoted} is one of edgeplug's own sockets`;
    const served = socketAt(own);
    if (served !== null && isSameSocket(endpoint, served)) return `endpoint ${quoted} is a hard link to edgeplug's own socket ${JSON.stringify(own)}`;
  }
  return null;
}

/** The rules `policy` sets. */
export function endpointRules(policy: Policy): WatchedEndpointRules {
  return {
    socketOwners: policy.security.socketOwners,
    watchDirs: policy.watch.map((dir) => dir.path),
    ownSockets: [policy.devicePlugins.registrationSocket, policy.api.socket, policy.podResources.socket].filter((socket) => socket !== null),
  };
}

/** Without a policy (tests, callers that bring no agent): root and the agent's uid may own endpoints; no other rule. */
export function defaultEndpointRules(): WatchedEndpointRules {
  return { socketOwners: [0, process.getuid?.() ?? 0], watchDirs: [], ownSockets: [] };
}

/** Why a watched-directory plugin's endpoint, opened as `endpoint`, may not be dialled; or null. */
export function watchedEndpointRefusal(endpoint: Pick<PinnedSocket, "realPath" | "stat">, registrationSocket: string, rules: WatchedEndpointRules): string | null {
  const { realPath } = endpoint;
  const uid = Number(endpoint.stat.uid);
  const quoted = JSON.stringify(realPath);
  const own = ownSocketRefusal(endpoint, rules.ownSockets);
  if (own !== null) return own;
  const watchDirs = rules.watchDirs.map(canonicalDirectory);
  const registration = socketAt(registrationSocket);
  const isOwnRegistrationSocket = realPath === canonicalSocketPath(registrationSocket) || (registration !== null && isSameSocket(endpoint, registration));
  if (!isOwnRegistrationSocket) {
    if (watchDirs.some((dir) => isInside(realPath, dir))) {
      return `endpoint ${quoted} is in a watched directory but is not this plugin's registration socket ${registrationSocket}: it belongs to another plugin`;
    }
    const linked = watchedSocketLinkedTo(endpoint, watchDirs);
    if (linked !== null) {
      return `endpoint ${quoted} is a hard link to ${
        JSON.stringify(linked)
      }, a socket in a watched directory that is not this plugin's registration socket ${registrationSocket}: it belongs to another plugin`;
    }
  }
  if (rules.socketOwners.includes(uid)) return null;
  return `endpoint ${quoted} is owned by uid ${uid}, not in security.socketOwners ${JSON.stringify(rules.socketOwners)}`;
}

/**
 * A CSI or DRA endpoint opened for dialling once it passed the rules;
 * `missing` when nothing is there yet (a driver still starting: the dial
 * reports it, and the plugin manager retries); `refused` otherwise.
 */
export type ServiceEndpoint = { pinned: PinnedSocket } | { missing: string } | { refused: string };

/**
 * Opens the endpoint a CSI or DRA plugin named and judges it by `rules`.
 * It must be absolute (CSI's may be a "unix://" URL): a relative one would
 * be resolved against the dialling process's working directory, which no
 * driver can count on and edgeplug's contract leaves out. `service` is what
 * should be served there, for the message when nothing is; `liveElsewhere`
 * finds the live plugins of other kinds (the device plugins').
 */
export function pinServiceEndpoint(
  kind: "CSI" | "DRA",
  endpoint: string,
  registrationSocket: string,
  rules: WatchedEndpointRules,
  service: string,
  liveElsewhere?: LiveEndpointLookup,
): ServiceEndpoint {
  const socketPath = kind === "CSI" && endpoint.startsWith(UNIX_URL_PREFIX) ? endpoint.slice(UNIX_URL_PREFIX.length) : endpoint;
  if (!path.isAbsolute(socketPath)) return { refused: `${kind} endpoint ${JSON.stringify(endpoint)} is not an absolute unix socket path` };
  const opened = pinSocket(socketPath, service);
  if ("refused" in opened) return opened.missing ? { missing: opened.refused } : { refused: opened.refused };
  const refused = watchedEndpointRefusal(opened, registrationSocket, rules) ??
    liveEndpointRefusal(opened.realPath, liveElsewhere?.(opened), kind === "CSI" ? "CSI driver" : "DRA driver");
  if (refused === null) return { pinned: opened };
  opened.close();
  return { refused };
}

const UNIX_URL_PREFIX = "unix://";

/** Entries looked at per watched directory when searching for another name of an endpoint: the watcher's own bound on a directory's sockets is far below. */
const MAX_ENTRIES_SEARCHED_PER_DIRECTORY = 10_000;

/**
 * Another name, directly in one of `watchDirs`, of the socket `endpoint`
 * (by device and inode), or null. Only a socket with more than one link can
 * have one, so a plain socket costs no directory read.
 */
function watchedSocketLinkedTo(endpoint: Pick<PinnedSocket, "realPath" | "stat">, watchDirs: readonly string[]): string | null {
  if (endpoint.stat.nlink < 2n) return null;
  for (const dir of watchDirs) {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries.slice(0, MAX_ENTRIES_SEARCHED_PER_DIRECTORY)) {
      if (!entry.isSocket()) continue;
      const file = path.join(dir, entry.name);
      let stat: fs.BigIntStats;
      try {
        stat = fs.lstatSync(file, { bigint: true });
      } catch {
        continue;
      }
      if (stat.dev === endpoint.stat.dev && stat.ino === endpoint.stat.ino) return file;
    }
  }
  return null;
}

function isInside(file: string, dir: string): boolean {
  const relative = path.relative(dir, file);
  // "..sock" is inside; "../x" and ".." are not.
  return relative !== "" && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative);
}

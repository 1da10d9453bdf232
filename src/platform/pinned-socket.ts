/**
 * A plugin's unix socket held by its inode and dialled through that hold,
 * so that the socket edgeplug checked is the socket it dials. Checking a
 * path and dialling it later leaves a window: a plugin that may write in
 * its socket's directory could swap the socket for a link to another
 * plugin's after the checks, or before a channel dials again, and be served
 * that plugin's devices under its own resource (the kubelet has the same
 * window). On Linux the socket is opened with O_PATH | O_NOFOLLOW, which
 * needs no permission on the file and never follows a link at its last
 * component, and is dialled as /proc/self/fd/N, which the kernel resolves
 * to the opened inode whatever the path holds by then.
 *
 * @example
 * ```ts
 * const pinned = pinSocket("/var/lib/kubelet/device-plugins/gpu.sock");
 * if ("refused" in pinned) throw new Error(pinned.refused);
 * const channel = dialUnix(pinned.realPath, { connectPath: pinned.dialPath });
 * // ... pinned.close() once the channel is closed
 * ```
 */
import * as fs from "node:fs";
import process from "node:process";
import { canonicalSocketPath } from "./canonical-path.ts";

export interface PinnedSocket {
  /** Where the file was when opened, its directories' links resolved: what rules judge and status shows. */
  readonly realPath: string;
  /** What to dial: the opened socket itself where it could be pinned, `realPath` otherwise. */
  readonly dialPath: string;
  /** The opened file's (not followed when it is a link). */
  readonly stat: fs.BigIntStats;
  /** Whether `dialPath` reaches the opened inode (Linux with /proc) rather than whatever `realPath` holds. */
  readonly pinned: boolean;
  /** Releases the hold; safe to call twice. */
  close(): void;
}

/**
 * A socket as the endpoint rules compare it: by its real path, and by its
 * inode where that is known. A hard link is a second path to one inode, so
 * paths alone would let a plugin name another plugin's socket, or
 * edgeplug's own, under a name of its own.
 */
export interface SocketIdentity {
  readonly realPath: string;
  readonly stat?: Pick<fs.BigIntStats, "dev" | "ino">;
}

/** Whether `a` and `b` are one socket: the same real path, or the same inode on the same device. */
export function isSameSocket(a: SocketIdentity, b: SocketIdentity): boolean {
  if (a.realPath === b.realPath) return true;
  return a.stat !== undefined && b.stat !== undefined && a.stat.dev === b.stat.dev && a.stat.ino === b.stat.ino;
}

/** The socket at `file` now, its links followed (edgeplug's own sockets, which it made itself); null when nothing is there. */
export function socketAt(file: string): SocketIdentity | null {
  try {
    return { realPath: canonicalSocketPath(file), stat: fs.statSync(file, { bigint: true }) };
  } catch {
    return null;
  }
}

/** Linux's O_PATH (the same on x86-64 and arm64); Node does not export it. */
const O_PATH = 0o10000000;

/**
 * Opens whatever is at `file` without following a link at its end, for the
 * caller to judge by `stat` and dial (or close); null when nothing is there.
 * Without O_PATH and /proc (not Linux, a bare chroot) the path itself is
 * looked at and dialled.
 */
export function pinFile(file: string): PinnedSocket | null {
  const unpinned = (): PinnedSocket | null => {
    let stat: fs.BigIntStats;
    try {
      stat = fs.lstatSync(file, { bigint: true });
    } catch {
      return null;
    }
    const realPath = canonicalSocketPath(file);
    return { realPath, dialPath: realPath, stat, pinned: false, close() {} };
  };
  if (process.platform !== "linux") return unpinned();
  let fd: number;
  try {
    fd = fs.openSync(file, O_PATH | fs.constants.O_NOFOLLOW);
  } catch {
    return null;
  }
  let open = true;
  const close = () => {
    if (open) fs.closeSync(fd);
    open = false;
  };
  const dialPath = `/proc/self/fd/${fd}`;
  try {
    const stat = fs.fstatSync(fd, { bigint: true });
    return { realPath: fs.readlinkSync(dialPath), dialPath, stat, pinned: true, close };
  } catch {
    // No /proc: only the path can be dialled.
    close();
    return unpinned();
  }
}

/**
 * A plugin's endpoint opened for dialling, or why it is not a socket of its
 * own (missing, a link, another kind of file); `service` is what the plugin
 * should serve there, for the message when nothing is there.
 */
export function pinSocket(socket: string, service = "DevicePlugin"): PinnedSocket | { refused: string; missing: boolean } {
  const quoted = JSON.stringify(socket);
  const opened = pinFile(socket);
  if (opened === null) return { refused: `no socket at ${quoted} (serve ${service} there before registering)`, missing: true };
  const refused = opened.stat.isSymbolicLink() ? `endpoint ${quoted} is a symbolic link; name the socket itself` : opened.stat.isSocket() ? null : `endpoint ${quoted} is not a unix socket`;
  if (refused === null) return opened;
  opened.close();
  return { refused, missing: false };
}

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
 * const channel = dialUnix(pinned.dialPath);
 * // ... pinned.close() once the channel is closed
 * ```
 */
import * as fs from "node:fs";
import process from "node:process";
import { canonicalSocketPath } from "./canonical-path.ts";

export interface PinnedSocket {
  /** Where the socket was when opened, its directories' links resolved: what rules judge and status shows. */
  readonly realPath: string;
  /** What to dial: the opened socket itself where it could be pinned, `realPath` otherwise. */
  readonly dialPath: string;
  /** Owner of the socket file. */
  readonly uid: number;
  /** Whether `dialPath` reaches the opened inode (Linux with /proc) rather than whatever `realPath` holds. */
  readonly pinned: boolean;
  /** Releases the hold; safe to call twice. */
  close(): void;
}

/** Linux's O_PATH (the same on x86-64 and arm64); Node does not export it. */
const O_PATH = 0o10000000;

/**
 * Opens `socket` for dialling, or says why it is not a socket of its own:
 * missing, a symbolic link, or another kind of file. Without O_PATH and
 * /proc (not Linux), the path itself is checked and dialled.
 */
export function pinSocket(socket: string): PinnedSocket | { refused: string } {
  const quoted = JSON.stringify(socket);
  const refusal = (stat: fs.Stats): string | null => {
    if (stat.isSymbolicLink()) return `endpoint ${quoted} is a symbolic link; name the socket itself`;
    if (!stat.isSocket()) return `endpoint ${quoted} is not a unix socket`;
    return null;
  };
  const missing = { refused: `no socket at ${quoted} (serve DevicePlugin there before registering)` };
  if (process.platform !== "linux") {
    let stat: fs.Stats;
    try {
      stat = fs.lstatSync(socket);
    } catch {
      return missing;
    }
    const refused = refusal(stat);
    if (refused) return { refused };
    const realPath = canonicalSocketPath(socket);
    return { realPath, dialPath: realPath, uid: stat.uid, pinned: false, close() {} };
  }
  let fd: number;
  try {
    fd = fs.openSync(socket, O_PATH | fs.constants.O_NOFOLLOW);
  } catch {
    return missing;
  }
  let open = true;
  const close = () => {
    if (open) fs.closeSync(fd);
    open = false;
  };
  try {
    const stat = fs.fstatSync(fd);
    const refused = refusal(stat);
    if (refused) {
      close();
      return { refused };
    }
    const uid = stat.uid;
    const dialPath = `/proc/self/fd/${fd}`;
    let realPath: string;
    try {
      realPath = fs.readlinkSync(dialPath);
    } catch {
      // No /proc (a bare chroot): only the path can be dialled.
      close();
      return { realPath: canonicalSocketPath(socket), dialPath: canonicalSocketPath(socket), uid, pinned: false, close() {} };
    }
    return { realPath, dialPath, uid, pinned: true, close };
  } catch (error) {
    close();
    throw error;
  }
}

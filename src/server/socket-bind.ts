/**
 * Binding edgeplug's sockets with their permissions in place from the first
 * moment, and removing them on close only while they are still ours.
 */
import * as fs from "node:fs";
import type * as net from "node:net";
import * as path from "node:path";

/** sockaddr_un.sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

/**
 * The gid of a group named in /etc/group (or `groupFile`); a number is taken
 * as a gid. Throws an Error naming the group when there is no such group.
 */
export function resolveGroupId(group: string, groupFile = "/etc/group"): number {
  if (/^\d+$/.test(group)) return Number(group);
  let text: string;
  try {
    text = fs.readFileSync(groupFile, "utf8");
  } catch (error) {
    throw new Error(`api.socketGroup: cannot read ${groupFile} to find group "${group}": ${(error as Error).message}`);
  }
  for (const line of text.split("\n")) {
    const [name, , gid] = line.split(":");
    if (name === group && gid !== undefined && /^\d+$/.test(gid)) return Number(gid);
  }
  throw new Error(`api.socketGroup: no group named "${group}" in ${groupFile}`);
}

/**
 * Binds `listener` to a socket in a fresh 0700 directory beside `socketPath`,
 * sets its mode and group there, then links it to `socketPath`. Returns the
 * socket's inode, so that close() removes only its own file.
 */
export async function bindPrivately(
  listener: net.Server,
  socketPath: string,
  mode: number,
  gid: number | null,
  /** What is served, for the error: "the API" or "device plugin registration". */
  what = "the API",
): Promise<number> {
  const privateDir = fs.mkdtempSync(path.join(path.dirname(socketPath), ".ep-"));
  const boundPath = path.join(privateDir, "s");
  try {
    if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH_BYTES || Buffer.byteLength(boundPath) > MAX_SOCKET_PATH_BYTES) {
      throw new Error(
        `socket path ${socketPath} is too long: unix socket paths (and ${boundPath}, used while binding) must be at most ${MAX_SOCKET_PATH_BYTES} bytes`,
      );
    }
    await new Promise<void>((resolve, reject) => {
      listener.once("error", reject);
      listener.listen(boundPath, () => {
        listener.off("error", reject);
        resolve();
      });
    });
    try {
      fs.chmodSync(boundPath, mode);
      if (gid !== null) fs.chownSync(boundPath, -1, gid);
      fs.linkSync(boundPath, socketPath);
    } catch (error) {
      listener.close();
      throw error;
    }
    return fs.statSync(socketPath).ino;
  } catch (error) {
    throw new Error(`cannot serve ${what} on ${socketPath}: ${describeBindError(error, gid)}`);
  } finally {
    fs.rmSync(privateDir, { recursive: true, force: true });
  }
}

function describeBindError(error: unknown, gid: number | null): string {
  const code = (error as { code?: string }).code;
  if (code === "EEXIST") return "another process created a file there while edgeplug was binding";
  if (code === "EPERM" && gid !== null) return `not allowed to give the socket group ${gid} (${(error as Error).message})`;
  return (error as Error).message;
}

export function removeIfOurs(socketPath: string, inode: number): void {
  try {
    if (fs.lstatSync(socketPath).ino === inode) fs.unlinkSync(socketPath);
  } catch {
    // Already gone: nothing of ours to remove.
  }
}

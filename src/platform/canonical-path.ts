/**
 * One name per socket, whichever linked directory it is named through:
 * rules about which socket a plugin may use compare these names, since
 * anyone may make a link to a plugin directory (in /tmp, say).
 */
import * as fs from "node:fs";
import * as path from "node:path";

/** `socket` with the symbolic links of its directories resolved; its last component is not followed. As given when its directory is gone. */
export function canonicalSocketPath(socket: string): string {
  return path.join(canonicalDirectory(path.dirname(socket)), path.basename(socket));
}

/** `dir` with its symbolic links resolved, or as given when it does not exist. */
export function canonicalDirectory(dir: string): string {
  try {
    return fs.realpathSync(dir);
  } catch {
    return dir;
  }
}

/**
 * What `validate` checks on the host itself, beyond the policy's text: what
 * would stop `run` here at start. The group `api.socketGroup` names, and each
 * directory the agent creates or writes in (the watched directories and the
 * directories of api.socket, kubelet.sock and the checkpoint): it exists as
 * a directory, or can be created by this user under its nearest existing
 * ancestor; and the sockets' paths fit a unix socket address. Nothing is
 * created or changed. `validate --offline` skips all of it.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { resolveGroupId } from "../server/socket-bind.ts";
import type { Policy } from "../policy/types.ts";
import { messageOf } from "../log/error-message.ts";

/** sockaddr_un.sun_path: 108 bytes with the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

/** One `KEY: message` per problem (the group, socket paths, then directories); empty when `run` would start as far as this can tell. */
export function hostProblems(policy: Policy, groupFile = "/etc/group"): string[] {
  const problems: string[] = [];
  const { api, devicePlugins, checkpoint } = policy;
  if (api.socket !== null && api.socketGroup !== null) {
    try {
      resolveGroupId(api.socketGroup, groupFile);
    } catch (error) {
      problems.push(messageOf(error));
    }
  }
  // Watched directories are read; the others are written in (a socket bound, a checkpoint renamed into place).
  const directories: Array<[string, string, "read" | "write"]> = policy.watch.map((dir, index) => [`watch[${index}].path`, dir.path, "read"]);
  const sockets: Array<[string, string | null]> = [["api.socket", api.socket], ["devicePlugins.registrationSocket", devicePlugins.registrationSocket]];
  for (const [key, socket] of sockets) {
    if (socket === null) continue;
    // The socket is bound at DIR/.ep-XXXXXX/s first, then linked into place (src/server/socket-bind.ts).
    const longest = Math.max(Buffer.byteLength(socket), Buffer.byteLength(path.join(path.dirname(socket), ".ep-XXXXXX", "s")));
    if (longest > MAX_SOCKET_PATH_BYTES) problems.push(`${key}: ${socket} is too long for a unix socket path (at most ${MAX_SOCKET_PATH_BYTES} bytes, and the directory's path 13 bytes less)`);
    directories.push([key, path.dirname(socket), "write"]);
  }
  directories.push(["checkpoint.path", path.dirname(checkpoint.path), "write"]);
  for (const [key, directory, use] of directories) {
    const problem = directoryProblem(directory, use);
    if (problem !== null) problems.push(`${key}: ${problem}`);
  }
  return problems;
}

/** Why the agent could not use `directory` (existing, or created under its nearest existing ancestor), or null. */
function directoryProblem(directory: string, use: "read" | "write"): string | null {
  let existing = directory;
  let stat: fs.Stats | undefined;
  for (;;) {
    try {
      stat = fs.statSync(existing);
      break;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // ENOTDIR: an ancestor is a file; going up finds it and says so.
      if (code !== "ENOENT" && code !== "ENOTDIR") return `${directory}: cannot look at ${existing}: ${messageOf(error)}`;
      const parent = path.dirname(existing);
      if (parent === existing) return `${directory}: no ancestor exists`;
      existing = parent;
    }
  }
  if (!stat.isDirectory()) {
    return existing === directory ? `${directory} is not a directory` : `${directory} cannot be created: ${existing} is not a directory`;
  }
  const asWho = `by uid ${process.getuid?.() ?? "?"} (validate as the agent's user, or with --offline away from the node)`;
  if (existing === directory) {
    const mode = use === "read" ? fs.constants.R_OK | fs.constants.X_OK : fs.constants.W_OK | fs.constants.X_OK;
    try {
      fs.accessSync(directory, mode);
    } catch {
      return `${directory} is not ${use === "read" ? "readable" : "writable"} ${asWho}`;
    }
    return null;
  }
  try {
    fs.accessSync(existing, fs.constants.W_OK | fs.constants.X_OK);
  } catch {
    return `${directory} cannot be created: ${existing} is not writable ${asWho}`;
  }
  return null;
}

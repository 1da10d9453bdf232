/**
 * File-level helpers shared by the store and `edgeplug checkpoint verify`:
 * a bounded read (an oversized file is corrupt and never read into memory;
 * the agent's read also checks who may have written the file) and moving a
 * corrupt file aside without ever deleting or changing it; and the store's
 * checks of its directory at start.
 */
import { Buffer } from "node:buffer";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import process from "node:process";
import type { Logger } from "../../log/logger.ts";
import { CheckpointCorruptError, MAX_CHECKPOINT_BYTES } from "./checkpoint-codec.ts";

/** Who may own the checkpoint the agent restores (root and the agent's own user). */
export interface CheckpointOwners {
  uids: readonly number[];
}

/**
 * The file's bytes. Throws CheckpointCorruptError when it is over `limit`
 * bytes, an Error with code ENOENT when it does not exist, and an Error
 * naming the file when it is not a regular file or cannot be read. Never
 * opens what is not a regular file (a FIFO would block, a device could
 * answer anything). With `owners` (the agent's restore), a symbolic link
 * is not followed, and the file must be owned by one of them and writable
 * by nobody else: a file someone else could have written is refused,
 * not restored. No error quotes the file's contents.
 */
export async function readCheckpointBytes(file: string, limit = MAX_CHECKPOINT_BYTES, owners?: CheckpointOwners): Promise<Uint8Array> {
  const named = owners ? await fs.lstat(file) : await fs.stat(file);
  if (named.isSymbolicLink()) throw new Error(`${file} is a symbolic link, which the checkpoint may not be (it is not followed)`);
  if (!named.isFile()) throw new Error(`${file} is not a regular file`);
  const handle = await fs.open(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | (owners ? fs.constants.O_NOFOLLOW : 0));
  try {
    const info = await handle.stat();
    // Replaced between the look and the open: judge what was opened.
    if (!info.isFile()) throw new Error(`${file} is not a regular file`);
    if (owners) checkOwnership(file, info, owners);
    if (info.size > limit) throw oversized(info.size, limit);
    // One byte more than allowed, to notice a file that grew after the stat.
    const buffer = Buffer.alloc(Math.min(info.size, limit) + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > limit) throw oversized(length, limit);
    return new Uint8Array(buffer.buffer, buffer.byteOffset, length);
  } finally {
    await handle.close();
  }
}

/** Group- or other-writable mode bits. */
const WRITABLE_BY_OTHERS = 0o022;

function checkOwnership(file: string, info: { uid: number; mode: number }, owners: CheckpointOwners): void {
  if (!owners.uids.includes(info.uid)) {
    throw new Error(`${file} is owned by uid ${info.uid}, not by root or edgeplug's user (uid ${owners.uids.join(" or ")}); chown it, or move it away to start with no allocations`);
  }
  if ((info.mode & WRITABLE_BY_OTHERS) !== 0) {
    throw new Error(`${file} has mode ${octal(info.mode)}: others than its owner may write it; chmod 600 it if its contents are trusted, or move it away`);
  }
}

export function octal(mode: number): string {
  return "0" + (mode & 0o7777).toString(8).padStart(3, "0");
}

function oversized(size: number, limit: number): CheckpointCorruptError {
  return new CheckpointCorruptError(`the file is over the checkpoint size limit (${size} bytes, at most ${limit})`);
}

/** `20261201T111825.123Z`: sortable, and free of the colons some tools dislike in file names. */
export function corruptSuffix(at: Date): string {
  return ".corrupt-" + at.toISOString().replace(/[-:]/g, "");
}

/**
 * Renames `file` to `<file>.corrupt-<timestamp>` in the same directory and
 * returns the new path. An existing file of that name is never replaced:
 * a counter is added instead.
 */
export async function moveAside(file: string, at: Date): Promise<string> {
  const base = file + corruptSuffix(at);
  for (let attempt = 1;; attempt++) {
    const target = attempt === 1 ? base : `${base}-${attempt}`;
    try {
      // link fails when the target exists, where rename would silently replace it.
      await fs.link(file, target);
      await fs.unlink(file);
      return target;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EEXIST") continue;
      if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EXDEV" && code !== "ENOSYS") throw error;
      // A filesystem without hard links: rename, having checked the name is free.
      if (await fs.lstat(target).then(() => true, () => false)) continue;
      await fs.rename(file, target);
      return target;
    }
  }
}

/** Anyone who can write the directory can replace the checkpoint: said once at start. */
export async function warnIfWritableByOthers(directory: string, log: Logger): Promise<void> {
  const info = await fs.stat(directory);
  if ((info.mode & 0o022) === 0) return;
  log.warn("the checkpoint's directory is writable by others than its owner: they can replace the checkpoint; chmod go-w it", {
    path: directory,
    mode: octal(info.mode),
    uid: info.uid,
  });
}

/**
 * Temporary files of processes that no longer run: a crash between create
 * and rename leaves one. Only files and links are removed; anything else
 * under such a name (a directory) is left alone with a warning: it cannot
 * be in the way, since each write picks a fresh name.
 */
export async function removeAbandonedTempFiles(directory: string, tempPrefix: string, log: Logger): Promise<void> {
  for (const name of await fs.readdir(directory)) {
    if (!name.startsWith(tempPrefix)) continue;
    const pid = Number(name.slice(tempPrefix.length).split("-")[0]);
    if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && isRunning(pid)) continue;
    const file = path.join(directory, name);
    try {
      const info = await fs.lstat(file);
      if (!info.isFile() && !info.isSymbolicLink()) {
        log.warn("something other than a file has a checkpoint temporary file's name; left alone", { path: file });
        continue;
      }
      await fs.rm(file, { force: true });
      log.debug("removed an abandoned checkpoint temporary file", { path: file });
    } catch (error) {
      log.warn("cannot remove an abandoned checkpoint temporary file; left alone", { path: file, error: (error as Error).message });
    }
  }
}

/** Who may own a checkpoint the agent restores: root, and the user it runs as. */
export function trustedOwners(): number[] {
  const uid = process.getuid?.() ?? 0;
  return uid === 0 ? [0] : [0, uid];
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

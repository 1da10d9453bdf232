/**
 * File-level helpers shared by the store and `edgeplug checkpoint verify`:
 * a bounded read (an oversized file is corrupt and never read into memory)
 * and moving a corrupt file aside without ever deleting or changing it.
 */
import { Buffer } from "node:buffer";
import * as fs from "node:fs/promises";
import { CheckpointCorruptError, MAX_CHECKPOINT_BYTES } from "./checkpoint-codec.ts";

/**
 * The file's bytes. Throws CheckpointCorruptError when it is over `limit`
 * bytes, an Error with code ENOENT when it does not exist, and an Error
 * naming the file when it is not a regular file or cannot be read.
 */
export async function readCheckpointBytes(file: string, limit = MAX_CHECKPOINT_BYTES): Promise<Uint8Array> {
  const info = await fs.stat(file);
  if (!info.isFile()) throw new Error(`${file} is not a regular file`);
  if (info.size > limit) throw oversized(info.size, limit);
  const handle = await fs.open(file, "r");
  try {
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
  for (let attempt = 1; ; attempt++) {
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

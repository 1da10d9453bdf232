/**
 * The fleet link's secret files (user name, password, TLS key) and TLS
 * certificates: bounded reads, and secrets refused unless only their owner
 * can read them (a password readable by any local user is not a secret).
 */
import fs from "node:fs";

/** Larger files are refused: a credential or a certificate chain is a few KiB. */
export const MAX_CREDENTIAL_FILE_BYTES = 64 * 1024;

/** A file that could not be used, with what to do about it in the message. */
export class CredentialFileError extends Error {}

/** Reads `file` (named `what` in errors); a `secret` must not be group- or world-readable. */
export function readCredentialFile(file: string, what: string, secret: boolean): Buffer {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    throw new CredentialFileError(`cannot open ${what} ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  try {
    // Checked on the file opened, so a file swapped in after the check is not what is read.
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new CredentialFileError(`${what} ${file} is not a regular file`);
    if (secret && (stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, "0");
      throw new CredentialFileError(`${what} ${file} is readable by group or others (mode ${mode}): refused; chmod 600 it`);
    }
    if (stat.size > MAX_CREDENTIAL_FILE_BYTES) {
      throw new CredentialFileError(`${what} ${file} is ${stat.size} bytes, more than the ${MAX_CREDENTIAL_FILE_BYTES} read`);
    }
    const buffer = Buffer.alloc(MAX_CREDENTIAL_FILE_BYTES + 1);
    let filled = 0;
    for (;;) {
      const read = fs.readSync(fd, buffer, filled, buffer.length - filled, null);
      if (read === 0) break;
      filled += read;
      if (filled > MAX_CREDENTIAL_FILE_BYTES) throw new CredentialFileError(`${what} ${file} grew past ${MAX_CREDENTIAL_FILE_BYTES} bytes while read`);
    }
    return buffer.subarray(0, filled);
  } finally {
    fs.closeSync(fd);
  }
}

/** A user name or password file: its first line, without the line end. */
export function readSecretLine(file: string, what: string): string {
  const text = readCredentialFile(file, what, true).toString("utf8");
  const line = text.split(/\r?\n/, 1)[0] ?? "";
  if (line === "") throw new CredentialFileError(`${what} ${file} is empty`);
  return line;
}

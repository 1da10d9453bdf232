/**
 * The little of the tar format the build needs: reading files out of an npm
 * package tarball (the Node runtime) and writing release tarballs that come
 * out byte-identical for identical inputs (entries in the order given, one
 * fixed mtime, owner and group 0 with no names, fixed modes). Plain POSIX
 * ustar, which GNU tar, busybox tar and bsdtar all read.
 */
import zlib from "node:zlib";

const BLOCK = 512;
/** GNU tar pads archives to records of 20 blocks; readers accept any length, some older ones prefer it. */
const RECORD = 20 * BLOCK;

export interface TarEntry {
  /** Path inside the archive, `/`-separated, no leading `/`. */
  name: string;
  /** "file" or "directory"; other entry types (links, devices) are listed as "other". */
  type: "file" | "directory" | "other";
  mode: number;
  data: Buffer;
}

function field(header: Buffer, offset: number, length: number): string {
  const raw = header.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString("utf8");
}

function octal(header: Buffer, offset: number, length: number, what: string): number {
  const text = field(header, offset, length).trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw new Error(`tar: bad ${what} field ${JSON.stringify(text)}`);
  return Number.parseInt(text, 8);
}

/** The `path` (and `size`) records of a pax extended header ("LEN key=value\n" records). */
function paxRecords(data: Buffer): Map<string, string> {
  const records = new Map<string, string>();
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    const length = Number.parseInt(data.subarray(at, space).toString("ascii"), 10);
    if (space === -1 || !Number.isSafeInteger(length) || length <= 0) throw new Error("tar: malformed pax header");
    const record = data.subarray(space + 1, at + length - 1).toString("utf8");
    const equals = record.indexOf("=");
    records.set(record.slice(0, equals), record.slice(equals + 1));
    at += length;
  }
  return records;
}

/** Every entry of a tar archive (gunzipped first when it starts with gzip's magic bytes). */
export function readTar(archive: Buffer): TarEntry[] {
  const tar = archive[0] === 0x1f && archive[1] === 0x8b ? zlib.gunzipSync(archive) : archive;
  const entries: TarEntry[] = [];
  let nextName: string | undefined;
  let at = 0;
  while (at + BLOCK <= tar.length) {
    const header = tar.subarray(at, at + BLOCK);
    if (header.every((byte) => byte === 0)) break;
    const declaredSize = octal(header, 124, 12, "size");
    const typeflag = String.fromCharCode(header[156]!);
    const dataStart = at + BLOCK;
    const data = tar.subarray(dataStart, dataStart + declaredSize);
    if (data.length !== declaredSize) throw new Error("tar: archive ends inside an entry");
    at = dataStart + Math.ceil(declaredSize / BLOCK) * BLOCK;
    if (typeflag === "x") {
      nextName = paxRecords(data).get("path") ?? nextName;
      continue;
    }
    if (typeflag === "L") {
      nextName = data.toString("utf8").replace(/\0+$/, "");
      continue;
    }
    if (typeflag === "g") continue;
    const prefix = field(header, 345, 155);
    const name = nextName ?? (prefix ? `${prefix}/${field(header, 0, 100)}` : field(header, 0, 100));
    nextName = undefined;
    const type = typeflag === "0" || typeflag === "\0" ? "file" : typeflag === "5" ? "directory" : "other";
    entries.push({ name: name.replace(/^\.\//, "").replace(/\/$/, ""), type, mode: octal(header, 100, 8, "mode"), data });
  }
  if (at < tar.length && at + BLOCK > tar.length) throw new Error("tar: archive ends inside a header");
  return entries;
}

/** What writeTar needs of each entry; directories have no data. */
export interface TarInput {
  name: string;
  type: "file" | "directory";
  mode: number;
  data?: Buffer;
}

function writeField(header: Buffer, offset: number, length: number, value: string): void {
  const bytes = Buffer.from(value, "utf8");
  if (bytes.length > length) throw new Error(`tar: ${JSON.stringify(value)} does not fit a ${length}-byte field`);
  bytes.copy(header, offset);
}

function writeOctal(header: Buffer, offset: number, length: number, value: number): void {
  writeField(header, offset, length, value.toString(8).padStart(length - 1, "0"));
}

function ustarHeader(entry: TarInput, size: number, mtime: number): Buffer {
  const header = Buffer.alloc(BLOCK);
  const name = entry.type === "directory" ? `${entry.name}/` : entry.name;
  writeField(header, 0, 100, name);
  writeOctal(header, 100, 8, entry.mode);
  writeOctal(header, 108, 8, 0); // uid
  writeOctal(header, 116, 8, 0); // gid
  writeOctal(header, 124, 12, size);
  writeOctal(header, 136, 12, mtime);
  header.write(entry.type === "directory" ? "5" : "0", 156, "ascii");
  header.write("ustar\u000000", 257, "binary");
  // uname and gname stay empty: extracting as root keeps the numeric owner 0.
  header.fill(0x20, 148, 156);
  const sum = header.reduce((total, byte) => total + byte, 0);
  writeField(header, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return header;
}

/**
 * A gzipped ustar archive of `entries`, in the order given (callers sort),
 * every entry with mtime `mtimeSeconds`, owner 0:0. gzip's own header has
 * no name and mtime 0, so equal inputs give equal bytes.
 */
export function writeTarGz(entries: readonly TarInput[], mtimeSeconds: number): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    const data = entry.type === "file" ? (entry.data ?? Buffer.alloc(0)) : Buffer.alloc(0);
    parts.push(ustarHeader(entry, data.length, mtimeSeconds), data);
    const padding = (BLOCK - (data.length % BLOCK)) % BLOCK;
    if (padding > 0) parts.push(Buffer.alloc(padding));
  }
  parts.push(Buffer.alloc(2 * BLOCK));
  const length = parts.reduce((total, part) => total + part.length, 0);
  const recordPadding = (RECORD - (length % RECORD)) % RECORD;
  if (recordPadding > 0) parts.push(Buffer.alloc(recordPadding));
  // Level 6 (zlib's default): level 9 takes twice as long on the executable for 0.3 % less.
  return zlib.gzipSync(Buffer.concat(parts), { level: 6 });
}

/**
 * HTTP/2 as a client writes it, byte for byte, for tests that must send what
 * node:http2's client refuses to (odd header blocks, raw paths as
 * :authority, streams numbered with gaps).
 */
import { Buffer } from "node:buffer";

/** The client connection preface (RFC 9113, 3.4). */
export const CLIENT_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

export const FRAME = { DATA: 0x0, HEADERS: 0x1, RST_STREAM: 0x3, SETTINGS: 0x4, GOAWAY: 0x7 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;

/** One frame: the 9-byte header (length, type, flags, stream id) and `payload`. */
export function http2Frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

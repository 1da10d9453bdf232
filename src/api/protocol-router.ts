/**
 * Tells HTTP/2 from HTTP/1.1 by a connection's first bytes, and hands the
 * HTTP/2 server a stream that replays them (reference/runtime-notes.md,
 * "gRPC and HTTP/1.1 on one unix socket").
 */
import type * as net from "node:net";
import { Duplex } from "node:stream";

/** Sent by every HTTP/2 client first (RFC 9113 section 3.4). */
const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

export type Protocol = "http1" | "http2";

/**
 * Reads until the first bytes either match the whole HTTP/2 preface or stop
 * matching it, however the client split them into packets. A connection
 * that closes or stays silent before that is dropped.
 */
export function routeByPreface(
  socket: net.Socket,
  timeoutMs: number,
  route: (protocol: Protocol, head: Buffer) => void,
): void {
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const compared = Math.min(head.length, HTTP2_PREFACE.length);
    const matches = head.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
    if (matches && head.length < HTTP2_PREFACE.length) return;
    // Stop the flow before handing over, so no chunk is emitted with nobody listening.
    socket.pause();
    socket.off("data", onData);
    socket.off("end", onEnd);
    socket.setTimeout(0);
    route(matches ? "http2" : "http1", head);
  };
  const onEnd = () => socket.destroy();
  socket.on("data", onData);
  socket.once("end", onEnd);
  socket.setTimeout(timeoutMs, () => socket.destroy());
}

/** A Duplex that first yields `head`, then whatever `socket` receives; writes go to `socket`. */
export function replayingDuplex(socket: net.Socket, head: Buffer): Duplex {
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      socket.write(chunk, (error) => callback(error ?? null));
    },
    final(callback) {
      socket.end(() => callback());
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  duplex.push(head);
  socket.on("data", (chunk: Buffer) => {
    if (!duplex.push(chunk)) socket.pause();
  });
  socket.once("end", () => duplex.push(null));
  socket.once("close", () => duplex.destroy());
  return duplex;
}


/**
 * Tells HTTP/2 from HTTP/1.1 by a connection's first bytes; the caller puts
 * them back into the socket for the server that speaks the protocol.
 */
import type * as net from "node:net";

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

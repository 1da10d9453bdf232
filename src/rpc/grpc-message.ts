/**
 * Makes gRPC error messages read the same to every client. Used by every
 * server edgeplug runs, so plugins and monitoring agents built on grpc-js see
 * "version: v9", not "version%3A v9".
 */
import type * as http from "node:http";
import type * as http2 from "node:http2";

type NodeHandler = (
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/** Wraps a connectNodeAdapter handler so that its `grpc-message` values are encoded as gRPC specifies. */
export function withPortableGrpcMessage<H extends NodeHandler>(handler: H): H {
  return ((request, response) => {
    portableGrpcMessage(response);
    handler(request, response);
  }) as H;
}

/**
 * Connect percent-encodes `grpc-message` with encodeURIComponent, but
 * @grpc/grpc-js decodes it with decodeURI, which leaves `%3A`, `%2F` and the
 * like in place: a grpc-js plugin would log "version%3A v9". Re-encoding as
 * the gRPC spec asks (only '%' and bytes outside printable ASCII) reads the
 * same to every client.
 */
function portableGrpcMessage(response: http2.Http2ServerResponse | http.ServerResponse): void {
  const addTrailers = response.addTrailers.bind(response) as (headers: http2.OutgoingHttpHeaders) => void;
  response.addTrailers = (headers: http2.OutgoingHttpHeaders) => addTrailers(reencodeGrpcMessage(headers));
  const writeHead = response.writeHead.bind(response) as (...args: unknown[]) => unknown;
  response.writeHead = ((...args: unknown[]) => {
    const last = args[args.length - 1];
    if (typeof last === "object" && last !== null && !Array.isArray(last)) {
      args[args.length - 1] = reencodeGrpcMessage(last as http2.OutgoingHttpHeaders);
    }
    return writeHead(...args);
  }) as never;
}

function reencodeGrpcMessage(headers: http2.OutgoingHttpHeaders): http2.OutgoingHttpHeaders {
  const message = headers["grpc-message"];
  if (typeof message !== "string") return headers;
  let text: string;
  try {
    text = decodeURIComponent(message);
  } catch {
    return headers;
  }
  let encoded = "";
  for (const byte of Buffer.from(text, "utf8")) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return { ...headers, "grpc-message": encoded };
}

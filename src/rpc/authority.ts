/**
 * The `:authority` (or HTTP/1.1 `Host`) of a request to one of edgeplug's
 * unix sockets names nothing: the kubelet, a grpc-go server, ignores it, and so
 * do edgeplug's handlers. Clients send what their library derives from the
 * target: grpc-go before 1.50 the socket's bare path
 * (`/var/lib/kubelet/device-plugins/kubelet.sock`), later versions that path
 * percent-encoded (`%2Fvar%2Flib%2F...`), grpc-js and Connect `localhost`.
 * Connect's Node adapter builds a URL from it without a guard, so any value
 * that is not a valid host would throw out of the request listener and end the
 * process. Requests keep their authority only when it is a plain host.
 */
import type * as http from "node:http";
import type * as http2 from "node:http2";

/** What a request whose authority cannot be used is served as. */
export const STAND_IN_AUTHORITY = "localhost";

/**
 * Letters, digits, `.-_~` and an optional port: accepted by nghttp2 and a
 * valid URL host (WHATWG) with one exception the URL parser checks (a dotted
 * numeric host that is not an IPv4 address).
 */
const PLAIN_AUTHORITY = /^[A-Za-z0-9._~-]+(?::[0-9]{1,5})?$/;

/** True when Node's HTTP/2 layer and a URL both take `value` as it is. */
export function isPlainAuthority(value: string): boolean {
  if (value === STAND_IN_AUTHORITY) return true;
  if (!PLAIN_AUTHORITY.test(value)) return false;
  const port = value.indexOf(":");
  if (port >= 0 && Number(value.slice(port + 1)) > 65_535) return false;
  return URL.canParse(`http://${value}/`);
}

type NodeHandler = (
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/**
 * Wraps a connectNodeAdapter handler so that a request whose authority is
 * missing, a path, percent-encoded or otherwise no host is served as
 * `localhost` instead of throwing. `onReplaced` is told of each such request.
 */
export function withServableAuthority<H extends NodeHandler>(handler: H, onReplaced?: (authority: string | undefined) => void): H {
  return ((request, response) => {
    const headers = request.headers as Record<string, string | string[] | undefined>;
    // HTTP/2 requests read `:authority` first, then `host`; HTTP/1.1 reads `host`.
    const key = "stream" in request && headers[":authority"] !== undefined ? ":authority" : "host";
    const authority = headers[key];
    if (typeof authority !== "string" || !isPlainAuthority(authority)) {
      headers[key] = STAND_IN_AUTHORITY;
      onReplaced?.(typeof authority === "string" ? authority : undefined);
    }
    handler(request, response);
  }) as H;
}

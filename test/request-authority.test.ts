/**
 * Whatever a client sends as `:authority` (or `Host`), dist/edgeplug serves the
 * call as the kubelet, a grpc-go server, does, on the API socket and on
 * kubelet.sock: the bare socket path of grpc-go before 1.50, the
 * percent-encoded path of later versions, an empty value, odd bytes. Requests
 * that cannot be served (odd pseudo-headers) are refused with a reset, and the
 * agent lives on and still registers plugins. Clients are node:http2 and, for
 * what node:http2 will not send, frames written by hand with HPACK literals.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";
import { CLIENT_PREFACE, FLAG, FRAME, http2Frame } from "./support/http2-frames.ts";
import { encodeLiteral, type HeaderField, HpackDecoder } from "../src/rpc/hpack.ts";

const GRPC_EMPTY_MESSAGE = Buffer.from([0, 0, 0, 0, 0]);
const CALL_TIMEOUT_MS = 5000;

interface CallResult {
  grpcStatus?: string;
  /** An HTTP status that ended the stream without a gRPC status (a path that is no route: 404). */
  httpStatus?: string;
  reset?: number;
}

/** One unary gRPC call with node:http2, the request's `:authority` as given. */
async function callWithAuthority(socketPath: string, rpcPath: string, authority: string): Promise<CallResult> {
  const session = http2.connect("http://localhost", { createConnection: () => net.connect(socketPath) });
  session.on("error", () => {});
  try {
    const request = session.request({ ":method": "POST", ":path": rpcPath, ":authority": authority, "content-type": "application/grpc", te: "trailers" });
    request.end(GRPC_EMPTY_MESSAGE);
    return await new Promise<CallResult>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${rpcPath} with :authority ${JSON.stringify(authority)}`)), CALL_TIMEOUT_MS);
      let grpcStatus: string | undefined;
      const header = (headers: http2.IncomingHttpHeaders) => {
        if (typeof headers["grpc-status"] === "string") grpcStatus = headers["grpc-status"];
      };
      request.on("response", header);
      request.on("trailers", header);
      request.on("error", () => {});
      request.resume();
      request.on("close", () => {
        clearTimeout(timer);
        resolve(grpcStatus === undefined ? { reset: request.rstCode } : { grpcStatus });
      });
    });
  } finally {
    session.destroy();
  }
}

/**
 * One request written frame by frame, its header block made of `fields` as
 * literals without indexing: what node:http2 refuses to send (NUL in a value,
 * unknown pseudo-headers). Resolves with the gRPC status or the reset code.
 */
async function rawCall(socketPath: string, fields: HeaderField[]): Promise<CallResult> {
  const socket = net.connect(socketPath);
  socket.on("error", () => {});
  const block = Buffer.concat(fields.map((field) => encodeLiteral("none", 0, field)));
  socket.write(Buffer.concat([
    CLIENT_PREFACE,
    http2Frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(0)),
    http2Frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, block),
    http2Frame(FRAME.DATA, FLAG.END_STREAM, 1, GRPC_EMPTY_MESSAGE),
  ]));
  const decoder = new HpackDecoder();
  let pending = Buffer.alloc(0);
  let httpStatus: string | undefined;
  try {
    return await new Promise<CallResult>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${JSON.stringify(fields)}`)), CALL_TIMEOUT_MS);
      const done = (result: CallResult) => {
        clearTimeout(timer);
        resolve(result);
      };
      socket.on("close", () => done({ reset: -1 }));
      socket.on("data", (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
          const length = pending.readUIntBE(0, 3);
          const [type, flags] = [pending[3]!, pending[4]!];
          const payload = pending.subarray(9, 9 + length);
          pending = pending.subarray(9 + length);
          if (type === 0x4 && !(flags & 0x1)) socket.write(http2Frame(FRAME.SETTINGS, FLAG.ACK, 0, Buffer.alloc(0)));
          if (type === 0x3) return done({ reset: payload.readUInt32BE(0) });
          if (type === 0x7) return done({ reset: payload.readUInt32BE(4) });
          if (type === 0x1) {
            const fields = decoder.decode(payload);
            const grpcStatus = fields.find((field) => field.name === "grpc-status");
            if (grpcStatus) return done({ grpcStatus: grpcStatus.value });
            httpStatus = fields.find((field) => field.name === ":status")?.value ?? httpStatus;
          }
          if ((type === 0x0 || type === 0x1) && flags & 0x1) return done({ httpStatus });
        }
      });
    });
  } finally {
    socket.destroy();
  }
}

const BARE_PATH = "/var/lib/kubelet/device-plugins/kubelet.sock";
const AUTHORITIES = [BARE_PATH, encodeURIComponent(BARE_PATH), "", "localhost", "a b", "\u00ff\u00fe", "localhost:99999", "1.2.3.999", "[::1]:8080"];

test("dist/edgeplug serves every :authority a gRPC client sends on the API socket and kubelet.sock, refuses odd requests with a reset, and lives on", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const kubeletSock = path.join(node.pluginsDir, "kubelet.sock");
  // Answered by the service itself: Status succeeds, an empty Register is refused for its version (UNKNOWN, as the kubelet's plain error).
  const targets = [
    { socket: node.apiSocket, rpc: "/edgeplug.v1.Agent/Status", served: "0" },
    { socket: kubeletSock, rpc: "/v1beta1.Registration/Register", served: "2" },
  ];
  for (const { socket, rpc, served } of targets) {
    for (const authority of AUTHORITIES) {
      assert.deepEqual(await callWithAuthority(socket, rpc, authority), { grpcStatus: served }, `${path.basename(socket)} with :authority ${JSON.stringify(authority)}`);
    }
    const request = (authority: string) => [
      { name: ":method", value: "POST" },
      { name: ":scheme", value: "http" },
      { name: ":path", value: rpc },
      { name: ":authority", value: authority },
      { name: "content-type", value: "application/grpc" },
    ];
    for (const authority of ["\u0000\r\n", "%zz/..", "x".repeat(3000)]) {
      assert.deepEqual(await rawCall(socket, request(authority)), { grpcStatus: served }, `${path.basename(socket)} with raw :authority ${JSON.stringify(authority.slice(0, 20))}`);
    }
    const odd: [string, HeaderField[]][] = [
      ["an unknown pseudo-header", [...request("localhost"), { name: ":bogus", value: "1" }]],
      ["a pseudo-header after a regular one", [...request("localhost").slice(0, 4), { name: "content-type", value: "application/grpc" }, { name: ":scheme", value: "http" }]],
      ["no :path", request("localhost").filter((field) => field.name !== ":path")],
      ["a path that is not a route", request("localhost").map((field) => (field.name === ":path" ? { name: ":path", value: "//%zz/x" } : field))],
    ];
    for (const [what, fields] of odd) {
      const result = await rawCall(socket, fields);
      const refused = result.reset !== undefined || (result.grpcStatus ?? "0") !== "0" || (result.httpStatus ?? "200") !== "200";
      assert.ok(refused, `${what} on ${path.basename(socket)} is refused: ${JSON.stringify(result)}`);
    }
  }
  // node:http2 reset three of the odd requests unseen (the fourth reached the router): each listener tells of them once.
  for (const listener of ["api", "registration"]) {
    const report = await agent.waitForLog("requests reset by the HTTP/2 layer before edgeplug saw them", 10_000, (record) => record.listener === listener);
    assert.equal(report.requests, 1, `the first reset on ${listener} is logged at once`);
  }
  // HTTP/1.1 on the API socket: a Host that is no host is served; none at all is refused by node:http, as HTTP/1.1 requires one.
  for (const [host, expected] of [[encodeURIComponent(BARE_PATH), 200], [BARE_PATH, 200], ["", 200], [undefined, 400]] as const) {
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const request = http.request({
        socketPath: node.apiSocket,
        method: "POST",
        path: "/edgeplug.v1.Agent/Status",
        setHost: false,
        headers: { "content-type": "application/json", ...(host === undefined ? {} : { host }) },
      }, (response) => {
        response.resume();
        resolve(response.statusCode);
      });
      request.on("error", reject);
      request.end("{}");
    });
    assert.equal(status, expected, `HTTP/1.1 Status with Host ${JSON.stringify(host)}`);
  }

  assert.equal(agent.child.exitCode, null, "the agent is still running");
  // Dozens of such requests, one line per listener: the first, then at most one a minute.
  const reports = agent.logs().filter((record) => record.msg === "request authority is no host; served as localhost");
  assert.deepEqual(reports.map((record) => [record.listener, record.authority]), [["api", BARE_PATH], ["registration", BARE_PATH]]);
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "after.sock"), devices: healthyDevices(2) });
  node.after(() => plugin.stop());
  await registerDevicePlugin(kubeletSock, { endpoint: "after.sock", resource_name: "example.com/after" });
  const status = await statusJson(node.apiSocket);
  assert.deepEqual(status.resources.map((resource) => [resource.name, resource.connected]), [["example.com/after", true]]);
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { classifyRpcError, markFailure, transportError } from "./rpc-error.ts";

function nodeError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

test("a kind recorded by the transport wins over the error's code", () => {
  const error = transportError("stale", "connection refused by /p.sock", Code.Unavailable, nodeError("ECONNREFUSED", "x"));
  assert.equal(classifyRpcError(error), "stale");
  assert.equal(classifyRpcError(new ConnectError("wrapped", Code.Internal, undefined, undefined, error)), "stale");
  assert.equal(classifyRpcError(transportError("not-grpc", "m", Code.Unavailable)), "not-grpc");
});

test("socket errors from Node are recognised anywhere in the cause chain", () => {
  const enoent = new ConnectError("connect failed", Code.Internal, undefined, undefined, nodeError("ENOENT", "connect ENOENT /p.sock"));
  assert.equal(classifyRpcError(enoent), "missing");
  assert.equal(classifyRpcError(nodeError("ECONNREFUSED", "connect ECONNREFUSED")), "stale");
  assert.equal(classifyRpcError(nodeError("ECONNRESET", "read ECONNRESET")), "disconnected");
});

test("Connect codes map to deadline and canceled", () => {
  assert.equal(classifyRpcError(new ConnectError("the operation timed out", Code.DeadlineExceeded)), "deadline");
  assert.equal(classifyRpcError(new ConnectError("This operation was aborted", Code.Canceled)), "canceled");
});

test("a status the peer sent is 'status'; a kind the transport recorded on the wire wins over the error's words", () => {
  const metadata = new Headers({ "grpc-status": "12" });
  assert.equal(classifyRpcError(new ConnectError("HTTP 404", Code.Unimplemented, metadata)), "status");
  assert.equal(classifyRpcError(new ConnectError("rejected by rate limit", Code.ResourceExhausted)), "status");
  assert.equal(classifyRpcError(new Error("anything else")), "status");
  assert.equal(classifyRpcError(markFailure(new ConnectError("anything", Code.Internal), "not-grpc")), "not-grpc");
});

test("Connect's message text decides nothing: the same words without what the transport saw are a plain status", () => {
  for (const words of ["HTTP 404", "unsupported content type text/html", "protocol error: missing status", "protocol error: incomplete envelope"]) {
    assert.equal(classifyRpcError(new ConnectError(words, Code.Internal)), "status", words);
  }
  const reset = new ConnectError("http/2 stream closed", Code.Internal, undefined, undefined, nodeError("ERR_HTTP2_STREAM_ERROR", "x"));
  assert.equal(classifyRpcError(reset), "disconnected", "a Node HTTP/2 error code in the cause chain");
});

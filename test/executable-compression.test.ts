/**
 * Connect clients may compress their requests: the executable's API socket
 * answers them, gzip and brotli, and holds the decompressed body to the
 * route's limit, so that a small compressed body cannot expand past it.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import { test } from "node:test";
import * as zlib from "node:zlib";
import { startDaemon } from "./support/agent-process.ts";

function post(socketPath: string, encoding: string, body: Buffer, route = "Status"): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        socketPath,
        method: "POST",
        path: `/edgeplug.v1.Agent/${route}`,
        headers: { "content-type": "application/json", "content-encoding": encoding, "content-length": body.length },
        agent: false,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

test("the executable's API socket answers Connect requests compressed with gzip and with brotli", async (t) => {
  const { policy } = await startDaemon(t);
  for (
    const [encoding, body] of [
      ["gzip", zlib.gzipSync("{}")],
      ["br", zlib.brotliCompressSync("{}")],
    ] as const
  ) {
    const answer = await post(policy.apiSocket, encoding, body);
    assert.equal(answer.status, 200, `${encoding}: ${answer.body}`);
    assert.equal(JSON.parse(answer.body).node, "e2e-node", encoding);
  }
});

test("a compressed Allocate request that expands past the route's 64 KiB is refused, and the agent goes on answering", async (t) => {
  const { policy } = await startDaemon(t);
  const expanded = JSON.stringify({ owner: "o".repeat(1024 * 1024), requests: [] });
  const body = zlib.gzipSync(expanded);
  assert.ok(body.length < 64 * 1024, `the compressed body (${body.length} bytes) is itself under the limit`);
  const answer = await post(policy.apiSocket, "gzip", body, "Allocate");
  assert.equal(answer.status, 429, answer.body);
  assert.equal(JSON.parse(answer.body).code, "resource_exhausted");
  assert.match(JSON.parse(answer.body).message, /65536/, "the error names the limit");
  assert.equal((await post(policy.apiSocket, "gzip", zlib.gzipSync("{}"))).status, 200, "Status still answers");
});

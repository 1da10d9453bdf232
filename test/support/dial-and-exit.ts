/**
 * `node dial-and-exit.ts SOCKET CONNECT_TIMEOUT_MS CALL_TIMEOUT_MS`: one
 * GetInfo call through dialUnix, then close() and nothing else. Run as a
 * child process by the transport tests: if the channel left a timer, a
 * socket or a session referenced after close(), this process does not exit.
 * Prints the call's outcome as one JSON line.
 */
import { createClient } from "@connectrpc/connect";
import { Registration } from "../../src/gen/pluginregistration/v1/api_pb.ts";
import { classifyRpcError } from "../../src/rpc/rpc-error.ts";
import { dialUnix } from "../../src/rpc/unix-channel.ts";

const [socketPath, connectTimeout, callTimeout] = process.argv.slice(2);
if (socketPath === undefined) {
  process.stderr.write("usage: dial-and-exit.ts SOCKET CONNECT_TIMEOUT_MS CALL_TIMEOUT_MS\n");
  process.exit(2);
}
const channel = dialUnix(socketPath, { connectTimeoutMs: Number(connectTimeout ?? 10_000) });
let outcome: Record<string, unknown>;
try {
  const info = await createClient(Registration, channel.transport).getInfo({}, { timeoutMs: Number(callTimeout ?? 5_000) });
  outcome = { ok: true, name: info.name };
} catch (error) {
  outcome = { ok: false, failure: classifyRpcError(error) };
}
channel.close();
process.stdout.write(JSON.stringify(outcome) + "\n");

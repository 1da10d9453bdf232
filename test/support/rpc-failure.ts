/**
 * How a call through edgeplug's unix channel failed, for the transport tests:
 * the failure kind (rpc-error.ts), Connect's message and how long it took.
 */
import assert from "node:assert/strict";
import { ConnectError, createClient } from "@connectrpc/connect";
import { Registration } from "../../src/gen/pluginregistration/v1/api_pb.ts";
import { classifyRpcError, type RpcFailure } from "../../src/rpc/rpc-error.ts";
import { type DialOptions, dialUnix, type UnixChannel } from "../../src/rpc/unix-channel.ts";

export interface Failure {
  kind: RpcFailure;
  error: ConnectError;
  message: string;
  elapsedMs: number;
}

/** Runs `call`, which must fail, and reports how. */
export async function failureOf(call: () => Promise<unknown>): Promise<Failure> {
  const started = performance.now();
  try {
    await call();
  } catch (reason) {
    const error = ConnectError.from(reason);
    return { kind: classifyRpcError(reason), error, message: error.message, elapsedMs: performance.now() - started };
  }
  throw new assert.AssertionError({ message: "the call succeeded but was expected to fail" });
}

/** One GetInfo through a fresh channel, closed (and its connections gone) before returning. */
export async function getInfoFailure(socketPath: string, dial: DialOptions = {}, timeoutMs?: number): Promise<Failure> {
  const channel = dialUnix(socketPath, dial);
  try {
    return await failureOf(() => createClient(Registration, channel.transport).getInfo({}, { timeoutMs }));
  } finally {
    channel.close();
    await channel.closed;
  }
}

/** A channel closed (and awaited) when the test ends. */
export function channelTo(t: { after(fn: () => Promise<void>): void }, socketPath: string, options: DialOptions = {}): UnixChannel {
  const channel = dialUnix(socketPath, options);
  t.after(async () => {
    channel.close();
    await channel.closed;
  });
  return channel;
}

import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";

/** The message `promise` rejects with; fails the test when it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as Error).message;
  }
  throw new assert.AssertionError({ message: "expected a refusal" });
}

/** The ConnectError `promise` rejects with; fails the test when it resolves or rejects with anything else. */
export async function connectRejection(promise: Promise<unknown>): Promise<ConnectError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ConnectError, `expected a ConnectError, got ${String(error)}`);
    return error;
  }
  throw new assert.AssertionError({ message: "expected a refusal" });
}

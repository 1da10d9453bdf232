import assert from "node:assert/strict";

/** The message `promise` rejects with; fails the test when it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as Error).message;
  }
  throw new assert.AssertionError({ message: "expected a refusal" });
}

/**
 * A registration attempt's dial and GetInfo: the owner check before any
 * dial, the listen grace of a refused socket, stale against failed, GetInfo
 * deadlines and errors, sockets gone under the attempt, aborts, and the
 * connection closed when the attempt ends.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { leaveStaleSocket, sensor, startGarbageListener, startTestPlugin } from "../../test/support/fake-plugin.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { context, desired, recordingHandler, signal } from "../../test/support/registration-harness.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { waitUntil } from "../../test/support/wait.ts";
import { registerPlugin } from "./registration.ts";
import type { AttemptOutcome } from "./registration.ts";

test("the registration connection is closed when the attempt ends", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "temp.sock");
  await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const ctx = context(dir, recordingHandler().handler);
  const descriptors = () => fs.readdirSync("/proc/self/fd").length;
  // Warm-up: the first attempt loads http2 and may keep process-wide descriptors.
  await registerPlugin(desired(socket), ctx, signal());
  ctx.asw.remove(ctx.asw.get(socket)!);
  const before = descriptors();
  assert.equal((await registerPlugin(desired(socket), ctx, signal())).state, "registered");
  // Both ends live in this process; the plugin's end closes a moment after ours.
  await waitUntil(() => descriptors() === before, "both ends of the registration connection to close", 2000);
});

test("a socket owned by a uid outside security.socketOwners is refused without dialing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "foreign.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  fs.chownSync(socket, 4242, 4242);
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler), signal());
  assert.deepEqual(outcome, { state: "failed", reason: "socket_owner", error: "socket owned by uid 4242, not in security.socketOwners [0]", info: null });
  assert.equal(fake.getInfoCalls(), 0);
  assert.deepEqual(fake.notifications(), []);
});

test("a stale socket (its plugin was killed) is reported stale once 100 ms have passed since discovery, at once after that", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "dead.sock");
  await leaveStaleSocket(socket);
  const clock = manualClock(Date.now());
  const ctx = { ...context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 5000, dialMs: 5000 } }), clock };
  const justFound = { ...desired(socket), discoveredAt: new Date(clock.now()) };
  let outcome: AttemptOutcome | undefined;
  const attempt = registerPlugin(justFound, ctx, signal()).then((ended) => (outcome = ended));
  // Within its grace a refused socket may still be between bind() and listen(): it is dialled again.
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait before dialling again");
  clock.advance(99);
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait again, the grace not over");
  assert.equal(outcome, undefined, "not stale within the grace");
  clock.advance(1);
  await attempt;
  assert.deepEqual([outcome!.state, outcome!.reason], ["stale", "stale"]);
  assert.match(outcome!.error!, /connection refused/);

  // A socket known for a while is stale at the first refusal: no timer, no wait for the 5 s dial timeout.
  const retry = await registerPlugin({ ...justFound, discoveredAt: new Date(clock.now() - 1000) }, ctx, signal());
  assert.equal(retry.state, "stale");
  assert.equal(clock.pendingTimers(), 0);
});

test("a wall clock stepped back after discovery does not stretch the listen grace: the socket is stale after its few retries", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "dead.sock");
  await leaveStaleSocket(socket);
  const clock = manualClock(Date.now());
  const ctx = { ...context(dir, recordingHandler().handler), clock };
  // Discovered "an hour from now": NTP stepped the clock back meanwhile.
  const found = { ...desired(socket), discoveredAt: new Date(clock.now() + 3_600_000) };
  let outcome: AttemptOutcome | undefined;
  const attempt = registerPlugin(found, ctx, signal()).then((ended) => (outcome = ended));
  for (let round = 0; outcome === undefined; round++) {
    assert.ok(round < 10, "stale within its retry delays, not an hour later");
    await waitUntil(() => outcome !== undefined || clock.pendingTimers() === 1, "the next retry or the end");
    clock.advance(200);
  }
  await attempt;
  assert.equal(outcome.state, "stale");
});

test("an attempt aborted while it waits for a just-found socket to listen ends at once", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "dead.sock");
  await leaveStaleSocket(socket);
  const clock = manualClock(Date.now());
  const controller = new AbortController();
  // The clock never moves, so the grace never ends: only the abort can end the attempt.
  const justFound = { ...desired(socket), discoveredAt: new Date(clock.now()) };
  const attempt = registerPlugin(justFound, { ...context(dir, recordingHandler().handler), clock }, controller.signal);
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait before dialling again");
  controller.abort(new Error("socket removed"));
  assert.equal((await attempt).state, "aborted");
  assert.equal(clock.pendingTimers(), 0, "its timer cancelled");
});

test("a socket that accepts and answers garbage is failed, not stale", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "garbage.sock");
  const garbage = await startGarbageListener(socket);
  t.after(() => garbage.close());
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler), signal());
  assert.deepEqual([outcome.state, outcome.reason], ["failed", "get_info"]);
  assert.match(outcome.error!, /^RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket /);
});

test("a GetInfo that hangs fails after timeouts.getInfo", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "hang.sock");
  await startTestPlugin(t, { socketPath: socket, info: sensor(), hangGetInfo: true });
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 50 } }), signal());
  assert.equal(outcome.state, "failed");
  assert.match(outcome.error!, /GetInfo at socket .*hang\.sock, err: no answer within 50ms/);
});

test("a plugin answering GetInfo with a gRPC error is told why it was not registered", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "early.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), failGetInfoTimes: 1 });
  const ctx = context(dir, recordingHandler().handler);
  const outcome = await registerPlugin(desired(socket), ctx, signal());
  assert.deepEqual([outcome.state, outcome.reason], ["failed", "get_info"]);
  assert.match(outcome.error!, /plugin not ready yet/);
  assert.equal((await fake.waitForNotify()).registered, false);
  assert.equal((await registerPlugin(desired(socket), ctx, signal())).state, "registered", "the retry succeeds");
});

test("a socket gone, replaced or no longer a socket when its attempt starts is socket_missing, and is not dialled", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const ctx = context(dir, recordingHandler().handler);
  const replaced = { ...desired(socket), inode: "0:0:0" };
  const gone = { ...desired(socket), socket: path.join(dir, "gone.sock") };
  const file = path.join(dir, "file");
  fs.writeFileSync(file, "");
  const notSocket = { ...desired(socket), socket: file };
  const outcomes = await Promise.all([replaced, gone, notSocket].map((entry) => registerPlugin(entry, ctx, signal())));
  assert.deepEqual(outcomes.map((outcome) => [outcome.state, outcome.reason]), [["failed", "socket_missing"], ["failed", "socket_missing"], ["failed", "socket_missing"]]);
  assert.match(outcomes[0]!.error!, /re-created during registration/);
  assert.match(outcomes[1]!.error!, /no longer exists/);
  assert.match(outcomes[2]!.error!, /is not a unix socket/);
  assert.equal(fake.getInfoCalls(), 0);
});

test("an attempt aborted while GetInfo hangs ends at once, reporting nothing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "hang.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), hangGetInfo: true });
  const controller = new AbortController();
  const attempt = registerPlugin(desired(socket), context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 10_000 } }), controller.signal);
  await fake.waitForGetInfo();
  controller.abort(new Error("socket removed"));
  assert.equal((await attempt).state, "aborted");
});

/**
 * The allocation queue's bounds, against @grpc/grpc-js device plugins on
 * real sockets: how many requests may wait behind the running one, and how
 * long one request may hold the queue across all its plugin calls. Plugin
 * calls are held open by gates; the whole-request deadline runs on a manual
 * clock, so no test sleeps or reads the wall clock.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { allocateDevices } from "../src/api/allocation-service.ts";
import { AllocateRequestSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { ALLOCATION_REQUEST_DEADLINE_MS, MAX_WAITING_ALLOCATIONS } from "../src/devicemanager/allocator.ts";
import { PLUGIN_CALL_TIMEOUTS } from "../src/devicemanager/endpoint.ts";
import { ask, connected, hold, newManager, R1, R2 } from "./support/device-manager-harness.ts";
import { healthyDevices, manualClock } from "./support/fake-device-plugin.ts";

/** Whether `promise` has settled, read synchronously later (it is never left rejected unhandled). */
function settledFlag(promise: Promise<unknown>): () => boolean {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  return () => settled;
}

test("a request past the waiting bound is refused at once (ResourceExhausted over the API) and records nothing; the queue serves again once it drains", async (t) => {
  const devices = newManager(t);
  const stuck = hold();
  t.after(stuck.release);
  const hung = await connected(t, devices, R1, { holdAllocate: stuck.held });
  const spare = await connected(t, devices, R2, { devices: healthyDevices(MAX_WAITING_ALLOCATIONS + 1, "r2-") });
  const running = devices.allocate(ask("running", { [R1]: 1 }));
  await hung.waitForCalls("allocate", 1);
  const waiting = Array.from({ length: MAX_WAITING_ALLOCATIONS }, (_, i) => devices.allocate(ask(`waiting-${i}`, { [R2]: 1 })));

  const refusal = `allocation queue is full (${MAX_WAITING_ALLOCATIONS} requests waiting); retry later`;
  const runningDone = settledFlag(running);
  await assert.rejects(devices.allocate(ask("over", { [R2]: 1 })), { message: refusal });
  const overTheApi = allocateDevices(devices, create(AllocateRequestSchema, { owner: "over", resources: [{ resource: R2, count: 1 }] }));
  await assert.rejects(overTheApi, (error) => error instanceof ConnectError && error.code === Code.ResourceExhausted && error.rawMessage === refusal);
  assert.equal(runningDone(), false, "refused while the running request still holds the queue, not after it");
  assert.deepEqual(devices.allocations("over"), [], "nothing recorded for the refused request");
  assert.equal(spare.allocateCalls.length, 0, "no waiting request has started");

  stuck.release();
  await running;
  assert.equal((await Promise.all(waiting)).length, MAX_WAITING_ALLOCATIONS, "every request within the bound was served");
  const [after] = await devices.allocate(ask("over", { [R2]: 1 }));
  assert.equal(after?.devices.length, 1, "the drained queue takes requests again");
});

test("a request cancelled while waiting leaves the queue at once, so its place is free before the running request ends", async (t) => {
  const devices = newManager(t);
  const stuck = hold();
  t.after(stuck.release);
  const hung = await connected(t, devices, R1, { holdAllocate: stuck.held });
  await connected(t, devices, R2, { devices: healthyDevices(MAX_WAITING_ALLOCATIONS, "r2-") });
  const running = devices.allocate(ask("running", { [R1]: 1 }));
  const runningDone = settledFlag(running);
  await hung.waitForCalls("allocate", 1);
  const callers = Array.from({ length: MAX_WAITING_ALLOCATIONS }, () => new AbortController());
  const gaveUp = callers.map((caller, i) => devices.allocate({ ...ask(`gave-up-${i}`, { [R2]: 1 }), signal: caller.signal }));
  for (const caller of callers) caller.abort();
  for (const [i, request] of gaveUp.entries()) {
    await assert.rejects(request, { message: `the request of owner gave-up-${i} was cancelled before its turn` });
  }
  assert.equal(runningDone(), false, "the cancelled requests were answered while the running one still holds the queue");

  const patient = Array.from({ length: MAX_WAITING_ALLOCATIONS }, (_, i) => devices.allocate(ask(`patient-${i}`, { [R2]: 1 })));
  stuck.release();
  await running;
  assert.equal((await Promise.all(patient)).length, MAX_WAITING_ALLOCATIONS, "the places the cancelled requests left were taken");
  assert.deepEqual(devices.allocations("gave-up-0"), []);
});

test("a request whose plugin calls each stay within their own timeout is failed at the whole request's deadline, records nothing, and the next request runs", async (t) => {
  const clock = manualClock();
  const devices = newManager(t, { clock });
  const gates = { r1Preferred: hold(), r1Allocate: hold(), r2Preferred: hold(), r2Allocate: hold() };
  for (const gate of Object.values(gates)) t.after(gate.release);
  const withGates = (preferred: ReturnType<typeof hold>, allocate: ReturnType<typeof hold>) => ({
    getPreferredAllocationAvailable: true,
    holdPreferred: preferred.held,
    holdAllocate: allocate.held,
  });
  const r1 = await connected(t, devices, R1, withGates(gates.r1Preferred, gates.r1Allocate));
  const r2 = await connected(t, devices, R2, withGates(gates.r2Preferred, gates.r2Allocate));
  // Four calls, each answered after a quarter of the deadline: every one within its own timeout.
  const callTime = ALLOCATION_REQUEST_DEADLINE_MS / 4;
  assert.ok(callTime < Math.min(...Object.values(PLUGIN_CALL_TIMEOUTS)));

  const slow = devices.allocate(ask("slow", { [R1]: 1, [R2]: 1 }));
  const slowDone = settledFlag(slow);
  await r1.waitForCalls("preferred", 1);
  const next = devices.allocate(ask("next", { [R1]: 1 }));
  clock.advance(callTime);
  gates.r1Preferred.release();
  await r1.waitForCalls("allocate", 1);
  clock.advance(callTime);
  gates.r1Allocate.release();
  await r2.waitForCalls("preferred", 1);
  clock.advance(callTime);
  gates.r2Preferred.release();
  await r2.waitForCalls("allocate", 1);
  clock.advance(callTime - 1);
  assert.equal(slowDone(), false, "still running just before its deadline");
  clock.advance(1);

  await assert.rejects(slow, {
    message: `the allocation for owner slow passed its deadline of 90 s while device plugin Allocate for ${R2} was running; the call was abandoned and nothing was allocated`,
  });
  assert.deepEqual(devices.allocations("slow"), [], "nothing recorded, not even the resource whose calls had all answered");
  const [granted] = await next;
  assert.deepEqual(granted?.devices, ["dev0"], "the device the first resource's Allocate had answered for was still free");
  assert.equal(r2.allocateCalls.length, 1, "the next request did not touch the hung plugin");
});

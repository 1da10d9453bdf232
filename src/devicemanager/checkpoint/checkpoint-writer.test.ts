import assert from "node:assert/strict";
import { test } from "node:test";
import { createLogger, type LogFields } from "../../log/logger.ts";
import { CheckpointWriter } from "./checkpoint-writer.ts";
import type { CheckpointData, DeviceStateStore } from "./checkpoint.ts";
import { manualClock } from "../../../test/support/manual-clock.ts";

/** A store on no disk: records what it is asked to write, fails or hangs when told. */
function memoryStore() {
  const written: (readonly string[])[] = [];
  let failWith: string | null = null;
  let hang = false;
  const store: DeviceStateStore = {
    restore: async () => ({ kind: "missing" }),
    write: async (data: CheckpointData) => {
      if (hang) return new Promise<void>(() => {});
      if (failWith !== null) throw new Error(failWith);
      written.push(data.registeredDevices.get("r") ?? []);
    },
  };
  return { store, written, fail: (message: string | null) => (failWith = message), hang: () => (hang = true) };
}

function writerFor(memory: ReturnType<typeof memoryStore>, state: { ids: string[] }, clock = manualClock()) {
  const records: LogFields[] = [];
  const outcomes: boolean[] = [];
  let onOutcome = () => {};
  const nextOutcome = () => new Promise<void>((resolve) => (onOutcome = resolve));
  const log = createLogger({ level: "debug", format: "json", write: (line) => void records.push(JSON.parse(line)) });
  const writer = new CheckpointWriter({
    store: memory.store,
    snapshot: () => ({ podDeviceEntries: [], registeredDevices: new Map([["r", [...state.ids]]]) }),
    log,
    clock,
    observe: ({ ok }) => {
      outcomes.push(ok);
      onOutcome();
    },
  });
  return { writer, records, clock, outcomes, nextOutcome };
}

test("nothing is written before enable (the checkpoint is not read yet); what changed meanwhile is written then", async () => {
  const memory = memoryStore();
  const state = { ids: ["a"] };
  const { writer } = writerFor(memory, state);
  writer.changed();
  assert.equal(await writer.flush(1000), false, "not enabled: the change is not on disk");
  assert.deepEqual(memory.written, []);
  writer.enable();
  assert.equal(await writer.flush(1000), true);
  assert.deepEqual(memory.written, [["a"]]);
});

test("a burst of changes costs at most two writes and the last state wins", async () => {
  const memory = memoryStore();
  const state = { ids: [] as string[] };
  const { writer } = writerFor(memory, state);
  writer.enable();
  for (let i = 0; i < 100; i++) {
    state.ids = [`d${i}`];
    writer.changed();
    if (i === 50) await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(await writer.flush(1000), true);
  assert.ok(memory.written.length <= 2, JSON.stringify(memory.written));
  assert.deepEqual(memory.written.at(-1), ["d99"]);
  assert.equal(writer.stats.writes, memory.written.length);
});

test("a failed write is logged once, retried with backoff without a new change, and reported until one succeeds", async () => {
  const memory = memoryStore();
  const state = { ids: ["a"] };
  const { writer, records, clock, outcomes, nextOutcome } = writerFor(memory, state);
  writer.enable();
  memory.fail("ENOSPC: no space left on device");
  let outcome = nextOutcome();
  writer.changed();
  await outcome;
  assert.equal(writer.stats.lastError, "ENOSPC: no space left on device");
  clock.advance(999);
  assert.deepEqual(outcomes, [false], "nothing before the backoff");
  outcome = nextOutcome();
  clock.advance(1);
  await outcome;
  assert.deepEqual(outcomes, [false, false], "retried after 1 s without a new change");
  assert.equal(records.filter((r) => r["level"] === "error").length, 1, "logged at error once");
  memory.fail(null);
  outcome = nextOutcome();
  clock.advance(1999);
  assert.equal(outcomes.length, 2, "the backoff doubled");
  clock.advance(1);
  await outcome;
  assert.deepEqual(outcomes, [false, false, true]);
  assert.deepEqual(memory.written, [["a"]]);
  assert.equal(writer.stats.lastError, null);
  assert.ok(records.some((r) => r["msg"] === "checkpoint written again after failed writes"));
  writer.stop();
  assert.equal(clock.pendingTimers(), 0, "no retry timer left");
});

test("flush gives up after its timeout (on the writer's clock) when the disk hangs", async () => {
  const memory = memoryStore();
  const { writer, clock } = writerFor(memory, { ids: ["a"] });
  writer.enable();
  memory.hang();
  writer.changed();
  const flushed = writer.flush(20);
  clock.advance(20);
  assert.equal(await flushed, false);
  writer.stop();
});

test("device lists alone are paced: the first after 100 ms, then one per 10 s at most; an allocation does not wait and takes them along", async () => {
  const memory = memoryStore();
  const state = { ids: ["a"] };
  const { writer, clock, outcomes, nextOutcome } = writerFor(memory, state);
  writer.enable();
  for (let i = 0; i < 50; i++) writer.changed(false);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(outcomes, [], "nothing yet");
  let outcome = nextOutcome();
  clock.advance(100);
  await outcome;
  assert.deepEqual(memory.written, [["a"]], "one write for the 50 lists");
  await writer.flush(1000);
  state.ids = ["b"];
  writer.changed(false);
  clock.advance(9_999);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(memory.written.length, 1, "the next list waits for 10 s after the last write");
  outcome = nextOutcome();
  clock.advance(1);
  await outcome;
  assert.deepEqual(memory.written, [["a"], ["b"]]);
  writer.changed(false);
  state.ids = ["c"];
  outcome = nextOutcome();
  const change = writer.changed(true);
  await outcome;
  assert.deepEqual(memory.written, [["a"], ["b"], ["c"]], "the urgent change takes the pending list along, at once");
  assert.equal(await writer.written(change, 1000), null);
  writer.stop();
});

test("a large file's list-only rewrites are paced to 16 MiB an hour", async () => {
  const memory = memoryStore();
  const store = Object.assign(Object.create(null) as object, memory.store, { lastWriteBytes: 8 * 1024 * 1024 });
  const clock = manualClock();
  const writes: boolean[] = [];
  const writer = new CheckpointWriter({
    store: store as typeof memory.store,
    snapshot: () => ({ podDeviceEntries: [], registeredDevices: new Map() }),
    log: createLogger({ level: "error", write: () => {} }),
    clock,
    observe: ({ ok }) => void writes.push(ok),
  });
  writer.enable();
  writer.changed(false);
  clock.advance(100);
  await writer.flush(1000);
  assert.equal(writes.length, 1);
  writer.changed(false);
  clock.advance(30 * 60 * 1000 - 1);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(writes.length, 1, "8 MiB: one list-only write per half hour");
  clock.advance(1);
  await writer.flush(1000);
  assert.equal(writes.length, 2);
  writer.stop();
});

test("written() tells each change's own write: a later change does not fail it, the failure of the write that held it does", async () => {
  const memory = memoryStore();
  const state = { ids: ["a"] };
  const { writer } = writerFor(memory, state);
  writer.enable();
  const first = writer.changed();
  const written = writer.written(first, 1000);
  writer.changed(false);
  assert.equal(await written, null, "on disk, though another change came since");
  memory.fail("EROFS: read-only file system");
  const second = writer.changed();
  assert.equal(await writer.written(second, 1000), "EROFS: read-only file system");
  memory.hang();
  const third = writer.changed();
  writer.stop();
  assert.equal(await writer.written(third, 1000), "the agent is stopping");
});

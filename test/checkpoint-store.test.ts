/**
 * The checkpoint on disk, as the agent uses it across restarts: restore at
 * start (missing, restored, or corrupt and moved aside unchanged), atomic
 * writes with the kubelet's bytes and file mode, bursts coalesced with the
 * latest data winning, failures reported with the path.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createLogger, type LogFields } from "../src/log/logger.ts";
import { type CheckpointData, CheckpointStore, decodeCheckpoint, encodeCheckpoint, KUBELET_CHECKPOINT_NAME } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { readCheckpointBytes } from "../src/devicemanager/checkpoint/checkpoint-files.ts";
import { tempDir } from "./support/temp-dir.ts";

const tegraFile = fs.readFileSync(new URL("fixtures/checkpoint/kubelet-tegra-allocated.json", import.meta.url));

function recordingLog() {
  const records: LogFields[] = [];
  const log = createLogger({ level: "debug", format: "json", write: (line) => void records.push(JSON.parse(line)) });
  return { log, records };
}

function devices(count: number, tag = "gpu"): CheckpointData {
  const ids = Array.from({ length: count }, (_, i) => `${tag}-${i}`);
  return { podDeviceEntries: [], registeredDevices: new Map([["acme.io/gpu", ids]]) };
}

test("restore of a missing checkpoint creates its directory (0750) and reports missing", async (t) => {
  const dir = path.join(tempDir(t), "state", "edgeplug");
  const store = new CheckpointStore({ path: path.join(dir, KUBELET_CHECKPOINT_NAME), log: recordingLog().log });
  assert.deepEqual(await store.restore(), { kind: "missing" });
  assert.equal(fs.statSync(dir).mode & 0o777, 0o750 & ~process.umask());
});

test("a written checkpoint has the kubelet's bytes and mode 0600, and is restored by the next store", async (t) => {
  const file = path.join(tempDir(t), KUBELET_CHECKPOINT_NAME);
  const data = devices(3);
  await new CheckpointStore({ path: file, log: recordingLog().log }).write(data);
  assert.deepEqual(new Uint8Array(fs.readFileSync(file)), encodeCheckpoint(data));
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  assert.deepEqual(fs.readdirSync(path.dirname(file)), [KUBELET_CHECKPOINT_NAME], "no temporary file is left");
  const restored = await new CheckpointStore({ path: file, log: recordingLog().log }).restore();
  assert.deepEqual(restored, { kind: "restored", data });
});

test("a checkpoint written by a kubelet is restored with its allocation", async (t) => {
  const file = path.join(tempDir(t), KUBELET_CHECKPOINT_NAME);
  fs.writeFileSync(file, tegraFile);
  const restored = await new CheckpointStore({ path: file, log: recordingLog().log }).restore();
  assert.equal(restored.kind, "restored");
  assert.equal(restored.kind === "restored" && restored.data.podDeviceEntries[0]!.podUID, "bf52b2cd-b611-4e79-86b1-280b283185c3");
});

test("a corrupt checkpoint is moved aside with its bytes unchanged, reported, and the store starts empty", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, KUBELET_CHECKPOINT_NAME);
  const torn = tegraFile.subarray(0, 100);
  fs.writeFileSync(file, torn);
  const { log, records } = recordingLog();
  const at = new Date("2026-12-01T11:18:25.123Z");
  const store = new CheckpointStore({ path: file, log, now: () => at });
  const result = await store.restore();
  assert.equal(result.kind, "corrupt");
  assert.ok(result.kind === "corrupt");
  assert.match(result.error, /not JSON/);
  assert.equal(result.movedTo, `${file}.corrupt-20261201T111825.123Z`);
  assert.deepEqual(fs.readFileSync(result.movedTo), torn);
  assert.equal(fs.existsSync(file), false);
  const report = records.find((record) => record["msg"] === "checkpoint is corrupt: moved aside, starting with no allocations");
  assert.ok(report, JSON.stringify(records));
  assert.equal(report["movedTo"], result.movedTo);

  // A second corrupt file at the same moment never replaces the first one kept aside.
  fs.writeFileSync(file, "garbage");
  const again = await store.restore();
  assert.ok(again.kind === "corrupt");
  assert.equal(again.movedTo, `${file}.corrupt-20261201T111825.123Z-2`);
  assert.deepEqual(fs.readFileSync(result.movedTo), torn);
  assert.equal(fs.readFileSync(again.movedTo, "utf8"), "garbage");
});

test("a checkpoint over the size limit is corrupt without being read", async (t) => {
  const file = path.join(tempDir(t), KUBELET_CHECKPOINT_NAME);
  fs.writeFileSync(file, Buffer.alloc(2048, 0x20));
  await assert.rejects(readCheckpointBytes(file, 1024), /over the checkpoint size limit \(2048 bytes, at most 1024\)/);
});

test("a checkpoint that cannot be read is an error, not corrupt: nothing is moved", async (t) => {
  const file = path.join(tempDir(t), KUBELET_CHECKPOINT_NAME);
  fs.mkdirSync(file);
  await assert.rejects(new CheckpointStore({ path: file, log: recordingLog().log }).restore(), /cannot read the checkpoint .*is not a regular file/);
  assert.ok(fs.statSync(file).isDirectory());
});

test("a burst of writes is coalesced and the latest data wins", async (t) => {
  const file = path.join(tempDir(t), KUBELET_CHECKPOINT_NAME);
  const store = new CheckpointStore({ path: file, log: recordingLog().log });
  const writes = Array.from({ length: 50 }, (_, i) => store.write(devices(i + 1)));
  await Promise.all(writes);
  assert.ok(store.counts.writes <= 2, `50 writes in one burst took ${store.counts.writes} file writes`);
  assert.deepEqual(new Uint8Array(fs.readFileSync(file)), encodeCheckpoint(devices(50)));

  // Writes issued while one is in flight join the next one.
  const first = store.write(devices(1, "a"));
  await Promise.resolve();
  const later = [store.write(devices(2, "b")), store.write(devices(3, "c"))];
  await Promise.all([first, ...later]);
  assert.deepEqual(new Uint8Array(fs.readFileSync(file)), encodeCheckpoint(devices(3, "c")));
  await store.idle();
  assert.equal(store.counts.failures, 0);
});

test("a failed write rejects with the path and the next write still works", async (t) => {
  const dir = tempDir(t);
  const blocker = path.join(dir, "not-a-dir");
  fs.writeFileSync(blocker, "");
  const broken = new CheckpointStore({ path: path.join(blocker, KUBELET_CHECKPOINT_NAME), log: recordingLog().log });
  await assert.rejects(broken.write(devices(1)), new RegExp(`cannot write the checkpoint ${blocker}/${KUBELET_CHECKPOINT_NAME}: .*ENOTDIR`));
  assert.deepEqual(broken.counts, { writes: 0, failures: 1 });
  fs.rmSync(blocker);
  await broken.write(devices(2));
  assert.deepEqual(broken.counts, { writes: 1, failures: 1 });
});

test("writes leave no descriptor open and no temporary file, whether they succeed or fail", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, KUBELET_CHECKPOINT_NAME);
  const store = new CheckpointStore({ path: file, log: recordingLog().log });
  const openDescriptors = () => fs.readdirSync("/proc/self/fd").length;
  await store.write(devices(1));
  await store.idle();
  const before = openDescriptors();
  for (let i = 0; i < 20; i++) await store.write(devices(i + 2));
  // A directory where the checkpoint should be: the file is written, its rename fails.
  fs.rmSync(file);
  fs.mkdirSync(file);
  for (let i = 0; i < 5; i++) await assert.rejects(store.write(devices(30 + i)), /cannot write the checkpoint .*EISDIR/);
  await store.idle();
  assert.equal(openDescriptors(), before);
  assert.deepEqual(fs.readdirSync(dir), [KUBELET_CHECKPOINT_NAME]);
  assert.deepEqual(store.counts, { writes: 21, failures: 5 });
});

test("restore removes temporary files a crashed writer left, and keeps those of a running one", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, KUBELET_CHECKPOINT_NAME);
  const abandoned = path.join(dir, `.${KUBELET_CHECKPOINT_NAME}.tmp-999999999-1`);
  const running = path.join(dir, `.${KUBELET_CHECKPOINT_NAME}.tmp-${process.ppid}-1`);
  const unrelated = path.join(dir, ".kubelet-temp");
  for (const name of [abandoned, running, unrelated]) fs.writeFileSync(name, "{");
  assert.deepEqual(await new CheckpointStore({ path: file, log: recordingLog().log }).restore(), { kind: "missing" });
  assert.deepEqual(fs.readdirSync(dir).sort(), [path.basename(running), path.basename(unrelated)].sort());
});

test("the checkpoint is not read through a symbolic link, nor when another user owns it or others may write it; no error quotes the file", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, KUBELET_CHECKPOINT_NAME);
  const secret = path.join(dir, "shadow");
  fs.writeFileSync(secret, "root:$6$s3cr3t:19000:0:99999:7:::\n", { mode: 0o600 });
  const restore = () => new CheckpointStore({ path: file, log: recordingLog().log }).restore();
  const refused = async (pattern: RegExp) => {
    const error: Error = await restore().then(() => assert.fail("restored"), (e: Error) => e);
    assert.match(error.message, pattern);
    assert.doesNotMatch(error.message, /s3cr3t|root:/);
  };
  fs.symlinkSync(secret, file);
  await refused(/^cannot read the checkpoint .*: .* is a symbolic link, which the checkpoint may not be \(it is not followed\)$/);
  assert.ok(fs.lstatSync(file).isSymbolicLink(), "left where it is");
  fs.rmSync(file);
  fs.copyFileSync(secret, file);
  fs.chownSync(file, 65534, 65534);
  await refused(/is owned by uid 65534, not by root or edgeplug's user/);
  fs.chownSync(file, process.getuid!(), process.getgid!());
  fs.chmodSync(file, 0o666);
  await refused(/has mode 0666: others than its owner may write it/);
  fs.chmodSync(file, 0o600);
  // Its own, not writable by others, but not a checkpoint: set aside as corrupt, without quoting it either.
  const { log, records } = recordingLog();
  const result = await new CheckpointStore({ path: file, log }).restore();
  assert.equal(result.kind, "corrupt");
  assert.doesNotMatch(JSON.stringify(result) + JSON.stringify(records), /s3cr3t|root:/);
});

test("a directory under a temporary file's name does not stop the start, nor the writes; a directory others may write is warned about", async (t) => {
  const dir = path.join(tempDir(t), "state");
  fs.mkdirSync(dir);
  fs.chmodSync(dir, 0o777);
  const file = path.join(dir, KUBELET_CHECKPOINT_NAME);
  const strays = [`.${KUBELET_CHECKPOINT_NAME}.tmp-999999999-1`, `.${KUBELET_CHECKPOINT_NAME}.tmp-${process.pid}-1`].map((name) => path.join(dir, name));
  for (const stray of strays) fs.mkdirSync(stray);
  const { log, records } = recordingLog();
  const store = new CheckpointStore({ path: file, log });
  assert.deepEqual(await store.restore(), { kind: "missing" });
  const warnings = records.filter((r) => r["level"] === "warn");
  assert.deepEqual(
    warnings.map((r) => [r["msg"], r["path"], r["mode"]]).sort(),
    [
      ["something other than a file has a checkpoint temporary file's name; left alone", strays[0], undefined],
      ["something other than a file has a checkpoint temporary file's name; left alone", strays[1], undefined],
      ["the checkpoint's directory is writable by others than its owner: they can replace the checkpoint; chmod go-w it", dir, "0777"],
    ].sort(),
  );
  await store.write(devices(2));
  await store.write(devices(3));
  assert.equal(decodeCheckpoint(fs.readFileSync(file)).registeredDevices.get("acme.io/gpu")?.length, 3);
  for (const stray of strays) assert.ok(fs.statSync(stray).isDirectory());
});

/**
 * The watcher under read failures, and watch roots replaced behind its back.
 *
 * Root (as these tests run) cannot make a read fail with permissions, and
 * descriptor exhaustion cannot be aimed at one directory, so the failures are
 * injected through the watcher's fileSystem option: one directory's readdir
 * or lstat throws EMFILE or EIO as the kernel would. That is fault
 * injection, not a mocked filesystem: the sockets, the directories and the
 * inotify events stay real. (test/pluginmanager-watch-faults.test.ts runs
 * out of descriptors for real.)
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { waitForEvent } from "../../test/support/fake-plugin.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { createLogger } from "../log/logger.ts";
import { realWatcherFileSystem, type WatcherFileSystem } from "./watcher.ts";
import { close, listen, paths, startWatcher, until } from "../../test/support/watcher-harness.ts";

function errno(code: string, syscall: string, target: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${code}: injected failure, ${syscall} '${target}'`);
  error.code = code;
  error.syscall = syscall;
  error.path = target;
  return error;
}

/** Node's reads, except those told to fail: `readdir` of a directory, `lstat` of a path or anything under it. */
function faultyFileSystem() {
  const readdirFails = new Map<string, string>();
  const lstatFails = new Map<string, string>();
  const lstatFailure = (target: string) => {
    for (const [failing, code] of lstatFails) if (target === failing || target.startsWith(`${failing}/`)) return code;
    return undefined;
  };
  const fileSystem: WatcherFileSystem = {
    lstat(target) {
      const code = lstatFailure(target);
      if (code !== undefined) throw errno(code, "lstat", target);
      return realWatcherFileSystem.lstat(target);
    },
    readdir(dir) {
      const code = readdirFails.get(dir);
      if (code !== undefined) throw errno(code, "scandir", dir);
      return realWatcherFileSystem.readdir(dir);
    },
  };
  const heal = () => {
    readdirFails.clear();
    lstatFails.clear();
  };
  return { fileSystem, readdirFails, lstatFails, heal };
}

/** A JSON logger whose records a test can read and wait for. */
function recordingLog() {
  const records: { level: string; msg: string; path?: string }[] = [];
  const events = new EventEmitter();
  const log = createLogger({
    level: "info",
    format: "json",
    write: (line) => {
      records.push(JSON.parse(line));
      events.emit("change");
    },
  });
  const count = (level: string, message: RegExp, target: string) => records.filter((r) => r.level === level && message.test(r.msg) && r.path === target).length;
  const waitFor = (level: string, message: RegExp, target: string) => waitForEvent(events, `a ${level} log ${message} for ${target}`, () => count(level, message, target) > 0, 5000);
  return { log, records, count, waitFor };
}

test("a watch directory that cannot be read keeps its sockets through resyncs; one removed meanwhile goes once reads succeed", async (t) => {
  const root = path.join(tempDir(t), "registry");
  const sub = path.join(root, "sub");
  fs.mkdirSync(sub, { recursive: true });
  const [top, kept, leaving] = [path.join(root, "top.sock"), path.join(sub, "kept.sock"), path.join(sub, "leaving.sock")];
  await listen(t, top);
  await listen(t, kept);
  const leavingServer = await listen(t, leaving);
  const faults = faultyFileSystem();
  const logs = recordingLog();
  const { dsw, watcher } = startWatcher(t, [{ path: root }], { log: logs.log, fileSystem: faults.fileSystem });
  assert.deepEqual(paths(dsw.sockets()), [top, kept, leaving].sort());
  const removed: string[] = [];
  dsw.subscribe((change) => change.kind === "removed" && removed.push(change.socket));

  // The whole root unlistable, as when the agent is out of descriptors.
  faults.readdirFails.set(root, "EMFILE");
  for (let i = 0; i < 3; i++) watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), [top, kept, leaving].sort(), "nothing dropped while the root cannot be read");
  assert.equal(logs.count("warn", /cannot read watch directory/, root), 1, "warned once, not at every resync");

  // The root readable again, its sub-directory failing with EIO (listing and lstat alike),
  // and a plugin really leaving meanwhile: its inotify event cannot be confirmed by lstat.
  faults.readdirFails.clear();
  faults.readdirFails.set(sub, "EIO");
  faults.lstatFails.set(leaving, "EIO");
  watcher.rescan();
  await close(leavingServer);
  await logs.waitFor("warn", /cannot stat watch path/, leaving);
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), [top, kept, leaving].sort(), "nothing dropped on a read that failed");
  assert.deepEqual(removed, []);
  assert.equal(logs.count("info", /readable again/, root), 1, "the root's recovery is logged once");

  // Reads succeed again: the retries (each path's own backoff, no resync needed) drop only the socket that left.
  faults.heal();
  await until(dsw, (sockets) => !paths(sockets).includes(leaving), "the removed socket dropped");
  await logs.waitFor("info", /readable again/, sub);
  assert.deepEqual(removed, [leaving]);
  assert.deepEqual(paths(dsw.sockets()), [top, kept].sort());
  assert.equal(logs.count("warn", /cannot read watch directory/, sub), 1);
  assert.equal(logs.count("info", /readable again/, sub), 1);
  watcher.rescan();
  assert.equal(logs.records.filter((r) => r.level === "warn").length, 3, "one warning per failing path, none after");
});

test("a path that keeps failing is read again after 200 ms, then twice as long each time up to 10 s; once it reads, nothing is retried, and a new failure starts at 200 ms", (t) => {
  const root = path.join(tempDir(t), "registry");
  fs.mkdirSync(root);
  const faults = faultyFileSystem();
  const clock = manualClock();
  const readsAt: number[] = [];
  const fileSystem: WatcherFileSystem = {
    lstat: faults.fileSystem.lstat,
    readdir(dir) {
      if (dir === root) readsAt.push(clock.now());
      return faults.fileSystem.readdir(dir);
    },
  };
  faults.readdirFails.set(root, "EIO");
  const { watcher } = startWatcher(t, [{ path: root }], { fileSystem, clock });
  clock.advance(40_000);
  assert.deepEqual(readsAt, [0, 200, 600, 1400, 3000, 6200, 12_600, 22_600, 32_600]);

  faults.heal();
  clock.advance(10_000);
  assert.deepEqual(readsAt.slice(9), [42_600], "read once more, and it succeeded");
  assert.equal(clock.pendingTimers(), 0, "nothing left to retry");

  faults.readdirFails.set(root, "EMFILE");
  watcher.rescan();
  clock.advance(700);
  assert.deepEqual(readsAt.slice(10), [50_000, 50_200, 50_600], "a new failure starts the backoff afresh");
  watcher.stop();
  assert.equal(clock.pendingTimers(), 0, "stop clears the re-read timers");
});

test("a watch root whose lstat fails keeps its sockets and its watch", async (t) => {
  const root = path.join(tempDir(t), "registry");
  fs.mkdirSync(root);
  const first = path.join(root, "first.sock");
  await listen(t, first);
  const faults = faultyFileSystem();
  const logs = recordingLog();
  const { dsw, watcher } = startWatcher(t, [{ path: root }], { log: logs.log, fileSystem: faults.fileSystem });
  faults.readdirFails.set(root, "EIO");
  faults.lstatFails.set(root, "EIO");
  watcher.rescan();
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), [first]);
  assert.equal(logs.count("warn", /cannot stat watch path/, root), 1);
  // Only the root's own lstat fails: a socket created in it is still reported by its watch.
  faults.lstatFails.clear();
  const later = path.join(root, "later.sock");
  await listen(t, later);
  await until(dsw, (sockets) => paths(sockets).includes(later), "a socket created while the root could not be read");
  assert.deepEqual(paths(dsw.sockets()), [first, later]);
});

test("a watch root removed and created again by someone else is watched again at once, without a resync", async (t) => {
  const root = path.join(tempDir(t), "registry");
  const { dsw } = startWatcher(t, [{ path: root }, { path: path.join(root, "..", "other"), recursive: false }]);
  for (let round = 0; round < 3; round++) {
    const before = path.join(root, `before-${round}.sock`);
    await listen(t, before);
    await until(dsw, (sockets) => paths(sockets).includes(before), `round ${round}: a socket in the root`);
    fs.rmSync(root, { recursive: true });
    await until(dsw, (sockets) => !paths(sockets).some((socket) => socket.startsWith(root)), `round ${round}: the root's sockets dropped`);
    // No rescan in this test: only the parent's event can bring the new root back under watch.
    fs.mkdirSync(root);
    const after = path.join(root, `after-${round}.sock`);
    await listen(t, after);
    await until(dsw, (sockets) => paths(sockets).includes(after), `round ${round}: a socket in the re-created root`);
    fs.rmSync(root, { recursive: true });
    await until(dsw, (sockets) => sockets.length === 0, `round ${round}: the re-created root's socket dropped`);
    fs.mkdirSync(root);
  }
});

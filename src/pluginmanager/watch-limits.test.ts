import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createLogger } from "../log/logger.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { close, listen, paths, startWatcher, until } from "../../test/support/watcher-harness.ts";

/** A logger whose warn and info lines the test reads. */
function recordingLog() {
  const lines: { level: string; msg: string; [field: string]: unknown }[] = [];
  const log = createLogger({ level: "info", format: "json", write: (line) => lines.push(JSON.parse(line)) });
  return { log, lines, about: (text: string) => lines.filter((line) => line.msg.startsWith(text)) };
}

test("past the directory limit a sub-directory and its sockets are left out, warned once, and taken in when a resync finds room", async (t) => {
  const root = tempDir(t);
  const sockets: string[] = [];
  for (const name of ["a", "b", "c", "d", "e"]) {
    fs.mkdirSync(path.join(root, name));
    sockets.push(path.join(root, name, "plugin.sock"));
    await listen(t, sockets.at(-1)!);
  }
  const { log, about } = recordingLog();
  let changes = 0;
  const { dsw, watcher } = startWatcher(t, [{ path: root, recursive: true }], { log, limits: { directories: 4, changed: () => changes++ } });
  assert.deepEqual(paths(dsw.sockets()), sockets.slice(0, 3), "the root and the first three directories, in name order");
  const [warning, ...more] = about("watch limits reached");
  assert.equal(more.length, 0);
  assert.deepEqual([warning?.level, warning?.directoryLimit, warning?.skippedDirectories], ["warn", 4, 2]);
  const reached = { watchedDirectories: 4, directoryLimit: 4, knownSockets: 3, socketLimit: Infinity, skippedDirectories: 2, skippedSockets: 0 };
  assert.deepEqual(watcher.limitsReached(), reached, "what status shows");
  assert.equal(changes, 1, "WatchEvents is told when something is first left out");

  // Past the limit a new socket is not seen, even on an event from a watched parent.
  fs.mkdirSync(path.join(root, "f"));
  watcher.rescan();
  assert.equal(about("watch limits reached").length, 1, "warned once while the limit holds");
  assert.deepEqual(watcher.limitsReached(), { ...reached, skippedDirectories: 3 }, "a resync's count replaces the first walk's");
  watcher.rescan();
  assert.equal(changes, 2, "told of the new count once, not of a resync that changed nothing");

  fs.rmSync(path.join(root, "a"), { recursive: true });
  fs.rmSync(path.join(root, "b"), { recursive: true });
  fs.rmSync(path.join(root, "f"), { recursive: true });
  await until(dsw, (desired) => desired.length === 1, "the removed directories' sockets forgotten");
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), sockets.slice(2), "the resync took in what fits now");
  assert.equal(about("watch limits no longer reached").length, 1);
  assert.equal(watcher.limitsReached(), null);
  assert.equal(changes, 3, "told when nothing is left out any more");
});

test("past the socket limit new sockets are left out until a resync finds room; known ones stay", async (t) => {
  const dir = tempDir(t);
  const { log, about } = recordingLog();
  let limit = 2;
  const { dsw, watcher } = startWatcher(t, [{ path: dir }], { log, limits: { sockets: () => limit } });
  const servers = [];
  for (const name of ["a", "b", "c"]) servers.push(await listen(t, path.join(dir, `${name}.sock`)));
  await until(dsw, (desired) => desired.length === 2, "two sockets known");
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), ["a", "b"].map((name) => path.join(dir, `${name}.sock`)), "the third left out, even by a resync");
  const [warning] = about("watch limits reached");
  assert.deepEqual([warning?.socketLimit, warning?.knownSockets, warning?.skippedSockets], [2, 2, 1]);
  assert.deepEqual(
    watcher.limitsReached(),
    { watchedDirectories: 1, directoryLimit: 1024, knownSockets: 2, socketLimit: 2, skippedDirectories: 0, skippedSockets: 1 },
  );

  await close(servers[0]!);
  await until(dsw, (desired) => desired.length === 1, "a.sock forgotten");
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), ["b", "c"].map((name) => path.join(dir, `${name}.sock`)), "c.sock taken in by the resync");
  assert.equal(about("watch limits no longer reached").length, 1);
  assert.equal(watcher.limitsReached(), null);

  limit = 1;
  watcher.rescan();
  assert.equal(dsw.sockets().length, 2, "a lower limit (a reload) forgets no known socket");
});

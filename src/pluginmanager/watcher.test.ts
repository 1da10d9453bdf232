import assert from "node:assert/strict";
import * as fs from "node:fs";
import type * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { tempDir } from "../../test/support/temp-dir.ts";
import { DesiredStateOfWorld } from "./state-of-world.ts";
import { PluginWatcher } from "./watcher.ts";
import { close, listen, paths, quietLog, startWatcher, until } from "../../test/support/watcher-harness.ts";

const log = quietLog;

test("a socket that appears is desired, and forgotten when it goes, ten times over (plugin_watcher_test.go)", async (t) => {
  const dir = tempDir(t);
  const { dsw } = startWatcher(t, [{ path: dir }]);
  for (let i = 0; i < 10; i++) {
    const socket = path.join(dir, `plugin-${i}.sock`);
    const server = await listen(t, socket);
    await until(dsw, (sockets) => sockets.length === 1 && sockets[0]!.socket === socket, `${socket} desired`);
    await close(server);
    await until(dsw, (sockets) => sockets.length === 0, `${socket} forgotten`);
  }
});

test("sockets present before start are found by the initial walk (plugin_watcher_test.go)", async (t) => {
  const dir = tempDir(t);
  const expected: string[] = [];
  for (let i = 0; i < 10; i++) {
    expected.push(path.join(dir, `plugin-${i}.sock`));
    await listen(t, expected.at(-1)!);
  }
  const { dsw } = startWatcher(t, [{ path: dir }]);
  assert.deepEqual(paths(dsw.sockets()), expected.sort(), "found synchronously by start()");
});

test("a socket re-created at the same path is a new entry each time, never a duplicate (plugin_watcher_test.go)", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "plugin.sock");
  const { dsw } = startWatcher(t, [{ path: dir }]);
  const seen = new Set<string>();
  for (let i = 0; i < 10; i++) {
    const server = await listen(t, socket);
    await until(dsw, (sockets) => sockets.length === 1 && !seen.has(sockets[0]!.inode), `re-creation ${i} desired`);
    seen.add(dsw.get(socket)!.inode);
    await close(server);
    // Deno reports birth times in whole milliseconds and ext4 hands the next
    // socket the same inode number, so two sockets bound within one
    // millisecond would share an identity there. Hold the thread past it.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2);
    await until(dsw, (sockets) => sockets.length === 0, `re-creation ${i} forgotten`);
  }
  assert.equal(seen.size, 10, "ten distinct identities although Linux reuses the inode number");
});

test("a socket replaced in one step (renamed over the old one) is seen as one replacement", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "plugin.sock");
  await listen(t, socket);
  const { dsw } = startWatcher(t, [{ path: dir }]);
  const kinds: string[] = [];
  dsw.subscribe((change) => kinds.push(change.kind));
  const before = dsw.get(socket)!.inode;
  // A plugin that binds a dot-name and renames it over its old socket leaves
  // no moment where the path is missing: the watcher must see a replacement,
  // never a removal followed by an addition. Both sockets exist at once, so
  // their identities differ without relying on birth-time resolution.
  const staging = path.join(dir, ".plugin.sock.new");
  await listen(t, staging);
  fs.renameSync(staging, socket);
  await until(dsw, () => dsw.get(socket) !== undefined && dsw.get(socket)!.inode !== before, "the new socket");
  assert.deepEqual(kinds, ["replaced"]);
});

test("dot-names, regular files, directories and symlinks to sockets are not sockets to register", async (t) => {
  const dir = tempDir(t);
  const elsewhere = tempDir(t);
  await listen(t, path.join(elsewhere, "real.sock"));
  await listen(t, path.join(dir, ".hidden.sock"));
  fs.writeFileSync(path.join(dir, "notes.sock"), "not a socket");
  fs.symlinkSync(path.join(elsewhere, "real.sock"), path.join(dir, "link.sock"));
  fs.mkdirSync(path.join(dir, ".tmp"));
  await listen(t, path.join(dir, ".tmp", "inside-dot-dir.sock"));
  const { dsw } = startWatcher(t, [{ path: dir }]);
  await listen(t, path.join(dir, ".later.sock"));
  fs.symlinkSync(path.join(elsewhere, "real.sock"), path.join(dir, "later-link.sock"));
  const marker = path.join(dir, "marker.sock");
  await listen(t, marker);
  await until(dsw, (sockets) => sockets.some((s) => s.socket === marker), "the marker socket");
  assert.deepEqual(paths(dsw.sockets()), [marker]);
});

test("sub-directories at depth 0, 1 and 2 created after start are watched and their sockets found (plugin_manager_test.go)", async (t) => {
  const dir = tempDir(t);
  const { dsw } = startWatcher(t, [{ path: dir }]);
  const expected: string[] = [];
  for (let depth = 0; depth <= 2; depth++) {
    const subdir = path.join(dir, ...Array.from({ length: depth }, (_, i) => String(i)));
    fs.mkdirSync(subdir, { recursive: true });
    // The socket follows mkdir at once: it may exist before the directory is watched.
    expected.push(path.join(subdir, `plugin-${depth}.sock`));
    await listen(t, expected.at(-1)!);
    await until(dsw, (sockets) => sockets.length === depth + 1, `the socket at depth ${depth}`);
  }
  assert.deepEqual(paths(dsw.sockets()), expected.sort());
});

test("recursive: false watches only the top directory", async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, "sub"));
  await listen(t, path.join(dir, "sub", "early.sock"));
  const { dsw } = startWatcher(t, [{ path: dir, recursive: false }]);
  fs.mkdirSync(path.join(dir, "later"));
  await listen(t, path.join(dir, "later", "late.sock"));
  await listen(t, path.join(dir, "sub", "late.sock"));
  const top = path.join(dir, "top.sock");
  await listen(t, top);
  await until(dsw, (sockets) => sockets.length > 0, "the top-level socket");
  assert.deepEqual(paths(dsw.sockets()), [top]);
});

test("a watched subtree removed with rm -r drops its sockets and the watcher keeps working", async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, "a", "b", "c"), { recursive: true });
  const servers: net.Server[] = [];
  for (const sub of ["a", "a/b", "a/b/c"]) servers.push(await listen(t, path.join(dir, sub, "p.sock")));
  const { dsw } = startWatcher(t, [{ path: dir }]);
  assert.equal(dsw.sockets().length, 3);
  fs.rmSync(path.join(dir, "a"), { recursive: true });
  await until(dsw, (sockets) => sockets.length === 0, "the removed subtree's sockets forgotten");
  for (const server of servers) await close(server);
  fs.mkdirSync(path.join(dir, "a"));
  const again = path.join(dir, "a", "again.sock");
  await listen(t, again);
  await until(dsw, (sockets) => sockets.length === 1, "a socket in the re-created directory");
  assert.deepEqual(paths(dsw.sockets()), [again]);
});

test("a watch directory that is missing is created; one that cannot be created fails start naming it", (t) => {
  const dir = tempDir(t);
  const missing = path.join(dir, "x", "plugins_registry");
  startWatcher(t, [{ path: missing }]);
  assert.ok(fs.statSync(missing).isDirectory());
  fs.writeFileSync(path.join(dir, "file"), "");
  const underFile = path.join(dir, "file", "registry");
  const watcher = new PluginWatcher({ dirs: [{ path: underFile, recursive: true, types: null }], dsw: new DesiredStateOfWorld(), log });
  assert.throws(() => watcher.start(), new RegExp(`cannot create watch directory ${underFile}`));
});

test("after stop, nothing is watched and no directory is re-created", async (t) => {
  const dir = tempDir(t);
  const root = path.join(dir, "registry");
  const { dsw, watcher } = startWatcher(t, [{ path: root }]);
  watcher.stop();
  await listen(t, path.join(root, "after-stop.sock"));
  fs.rmSync(root, { recursive: true });
  watcher.rescan();
  assert.equal(fs.existsSync(root), false);
  assert.deepEqual(dsw.sockets(), []);
});

test("rescan adds a socket an event missed and drops one that vanished unseen", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  await listen(t, socket);
  const { dsw, watcher } = startWatcher(t, [{ path: dir }]);
  dsw.remove(socket);
  const ghost = path.join(dir, "ghost.sock");
  dsw.addOrUpdate(ghost, "0:0:0");
  watcher.rescan();
  assert.deepEqual(paths(dsw.sockets()), [socket]);
});

test("setDirs: an added root is created and walked, a removed root's sockets are forgotten, recursive turned off drops sub-directories", async (t) => {
  const dir = tempDir(t);
  const [a, b, c] = ["a", "b", "c"].map((name) => path.join(dir, name));
  fs.mkdirSync(path.join(a, "sub"), { recursive: true });
  fs.mkdirSync(b);
  await listen(t, path.join(a, "top.sock"));
  await listen(t, path.join(a, "sub", "deep.sock"));
  await listen(t, path.join(b, "b.sock"));
  const { dsw, watcher } = startWatcher(t, [{ path: a }]);
  assert.deepEqual(paths(dsw.sockets()), [path.join(a, "sub", "deep.sock"), path.join(a, "top.sock")]);

  watcher.setDirs([{ path: a, recursive: false, types: null }, { path: b, recursive: true, types: null }, { path: c, recursive: true, types: null }]);
  assert.deepEqual(paths(dsw.sockets()), [path.join(a, "top.sock"), path.join(b, "b.sock")]);
  assert.ok(fs.statSync(c).isDirectory(), "the added root was created");
  await listen(t, path.join(c, "c.sock"));
  await until(dsw, (sockets) => paths(sockets).includes(path.join(c, "c.sock")), "the added root watched");

  watcher.setDirs([{ path: c, recursive: true, types: null }]);
  assert.deepEqual(paths(dsw.sockets()), [path.join(c, "c.sock")]);
  // No longer watched: a socket in a removed root goes unseen, while the kept root still reports.
  await listen(t, path.join(b, "late.sock"));
  await listen(t, path.join(c, "marker.sock"));
  await until(dsw, (sockets) => paths(sockets).includes(path.join(c, "marker.sock")), "the marker");
  assert.deepEqual(paths(dsw.sockets()), [path.join(c, "c.sock"), path.join(c, "marker.sock")]);
});

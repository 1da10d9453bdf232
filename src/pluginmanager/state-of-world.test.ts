import assert from "node:assert/strict";
import { test } from "node:test";
import { ActualStateOfWorld, DesiredStateOfWorld } from "./state-of-world.ts";
import type { DesiredChange, RegisteredPlugin } from "./state-of-world.ts";
import type { PluginHandler } from "./types.ts";

const noopHandler: PluginHandler = {
  async validatePlugin() {},
  async registerPlugin() {},
  deregisterPlugin() {},
};

function registered(socket: string, inode: string): RegisteredPlugin {
  return {
    socket,
    inode,
    handler: noopHandler,
    registration: { socket, type: "acme.io/Sensor", name: "acme.io/s", endpoint: socket, versions: ["v1"] },
  };
}

test("desired state: a new socket is added once and reported", () => {
  const dsw = new DesiredStateOfWorld();
  const changes: DesiredChange[] = [];
  dsw.subscribe((change) => changes.push(change));
  const at = new Date("2026-11-30T12:00:00Z");
  dsw.addOrUpdate("/r/a.sock", "1:10:5", at);
  assert.deepEqual(dsw.sockets(), [{ socket: "/r/a.sock", inode: "1:10:5", discoveredAt: at }]);
  assert.equal(dsw.get("/r/a.sock") !== undefined, true);
  assert.deepEqual(changes.map((change) => change.kind), ["added"]);
});

test("desired state: the same inode again changes nothing, a new inode replaces the entry (desired_state_of_world_test.go; inode, not UUID)", () => {
  const dsw = new DesiredStateOfWorld();
  const changes: DesiredChange[] = [];
  dsw.subscribe((change) => changes.push(change));
  dsw.addOrUpdate("/r/a.sock", "1:10:5");
  dsw.addOrUpdate("/r/a.sock", "1:10:5");
  dsw.addOrUpdate("/r/a.sock", "1:10:6");
  assert.equal(dsw.sockets().length, 1);
  assert.equal(dsw.get("/r/a.sock")?.inode, "1:10:6");
  assert.deepEqual(changes.map((change) => [change.kind, change.previous?.inode, change.current?.inode]), [
    ["added", undefined, "1:10:5"],
    ["replaced", "1:10:5", "1:10:6"],
  ]);
});

test("desired state: remove forgets the socket; removing an unknown one is a no-op", () => {
  const dsw = new DesiredStateOfWorld();
  const changes: DesiredChange[] = [];
  dsw.addOrUpdate("/r/a.sock", "1:10:5");
  dsw.subscribe((change) => changes.push(change));
  dsw.remove("/r/a.sock");
  dsw.remove("/r/a.sock");
  assert.equal(dsw.get("/r/a.sock") !== undefined, false);
  assert.deepEqual(changes.map((change) => [change.kind, change.previous?.socket]), [["removed", "/r/a.sock"]]);
});

test("desired state: sockets are listed sorted by path", () => {
  const dsw = new DesiredStateOfWorld();
  for (const name of ["c", "a", "b"]) dsw.addOrUpdate(`/r/${name}.sock`, name);
  assert.deepEqual(dsw.sockets().map((entry) => entry.socket), ["/r/a.sock", "/r/b.sock", "/r/c.sock"]);
});

test("actual state: an added plugin is returned as added and matches its path and inode only (actual_state_of_world_test.go)", () => {
  const asw = new ActualStateOfWorld();
  const plugin = registered("/r/a.sock", "1:10:5");
  asw.add(plugin);
  assert.deepEqual(asw.plugins(), [plugin]);
  assert.equal(asw.has("/r/a.sock", "1:10:5"), true);
  assert.equal(asw.has("/r/a.sock", "1:10:6"), false, "same path, other inode: a re-created socket");
});

test("actual state: remove forgets the plugin, and only that one", () => {
  const asw = new ActualStateOfWorld();
  const plugin = registered("/r/a.sock", "1:10:5");
  asw.add(plugin);
  asw.remove(registered("/r/a.sock", "1:10:5"));
  assert.equal(asw.get("/r/a.sock"), plugin, "another registration at the path is not removed");
  asw.remove(plugin);
  assert.deepEqual(asw.plugins(), []);
  assert.equal(asw.has("/r/a.sock", "1:10:5"), false);
});

test("actual state: slots count registered plugins and reservations, and a release frees one once", () => {
  const asw = new ActualStateOfWorld();
  asw.add(registered("/r/a.sock", "1"));
  const release = asw.reserveSlot(2);
  assert.ok(release);
  assert.equal(asw.reserveSlot(2), null, "one registered + one reserved fill a limit of 2");
  release();
  release();
  const again = asw.reserveSlot(2);
  assert.ok(again, "the released slot is free again");
  assert.equal(asw.reserveSlot(2), null, "a double release freed only one slot");
});

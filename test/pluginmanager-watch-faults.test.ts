/**
 * The plugin manager when its watch directories misbehave (issue 7, defects
 * 2 and 9): a process out of descriptors (EMFILE, for real) cannot list its
 * watch directory at resync, which must not deregister the plugins it has;
 * a watch root removed and created again is watched again without a resync.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as readline from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { startManager, stateOf, until } from "./support/manager-harness.ts";
import { tempDir } from "./support/temp-dir.ts";

const CHILD = fileURLToPath(new URL("./fixtures/processes/fd-starved-manager.ts", import.meta.url));
/** Enough for the runtime and a few plugins; small so that filling it takes no time. */
const DESCRIPTOR_LIMIT = 256;

interface PluginState {
  socket: string;
  state: string;
}

test("a manager out of descriptors keeps its plugins registered through failing resyncs (EMFILE, for real)", async (t) => {
  const dir = tempDir(t);
  const sockets = [path.join(dir, "a.sock"), path.join(dir, "b.sock")];
  for (const [i, socket] of sockets.entries()) await startTestPlugin(t, { socketPath: socket, info: sensor(`acme.io/sensor-${i}`) });
  // `ulimit -n` lowers the soft and the hard limit, so the runtime cannot raise it back at start.
  const child = spawn("bash", ["-c", `ulimit -n ${DESCRIPTOR_LIMIT} && exec "$0" "$@"`, process.execPath, CHILD, dir, String(sockets.length)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  t.after(() => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });
  const steps = new Map<string, Record<string, unknown>>();
  for await (const line of readline.createInterface({ input: child.stdout })) {
    const step = JSON.parse(line) as Record<string, unknown>;
    steps.set(String(step.step), step);
  }
  assert.equal(await exited, 0, `the child failed: ${stderr}`);
  const allRegistered = (plugins: unknown) =>
    assert.deepEqual(
      (plugins as PluginState[]).map((plugin) => [plugin.socket, plugin.state]),
      sockets.map((socket) => [socket, "registered"]),
    );

  assert.equal(steps.get("registered")?.registered, true, `registered before the fault: ${stderr}`);
  const starved = steps.get("starved")!;
  assert.equal(starved.readdirError, "EMFILE", "the watch directory really could not be listed");
  assert.deepEqual(starved.changes, [], "no plugin changed (none deregistered) while descriptors were exhausted");
  allRegistered(starved.plugins);
  allRegistered(steps.get("recovered")?.plugins);
  assert.match(stderr, /cannot read watch directory/, "the failure is logged");
  assert.equal(stderr.match(/cannot read watch directory/g)?.length, 1, "once, not at every resync");
  assert.match(stderr, /watch path readable again/);
});

test("a watch root removed and created again registers a plugin started in it, with resync an hour away", async (t) => {
  const root = path.join(tempDir(t), "plugins_registry");
  const { status } = await startManager(t, { watch: [root], resyncMs: 3_600_000 });
  const first = path.join(root, "first.sock");
  const plugin = await startTestPlugin(t, { socketPath: first, info: sensor("acme.io/first") });
  await until(status, () => stateOf(status, first) === "registered", "the first plugin registered");
  await plugin.stop();
  fs.rmSync(root, { recursive: true, force: true });
  await until(status, (plugins) => plugins.length === 0, "the first plugin gone with its directory");
  fs.mkdirSync(root);
  const again = path.join(root, "again.sock");
  await startTestPlugin(t, { socketPath: again, info: sensor("acme.io/again") });
  await until(status, () => stateOf(status, again) === "registered", "a plugin in the re-created root registered");
});

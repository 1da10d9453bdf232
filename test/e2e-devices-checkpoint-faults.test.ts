/**
 * End to end on dist/edgeplug: the checkpoint cannot be written (its path
 * taken by a directory, its disk full, its disk read-only). The agent keeps
 * running, `edgeplug allocate` and `edgeplug release` are refused with the
 * cause (exit 1) and change nothing, status reports the failing write, and
 * once the disk is writable again the agent writes by itself and allocates
 * again. An allocation refused this way is never given after a kill -9 and
 * a restart (docs/devices.md, "Checkpoint and restarts").
 *
 * The disk-full and read-only cases mount a small tmpfs, which needs root
 * (CI runs as root).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { type AgentProcess, runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { type DeviceNode, deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { startExample } from "./support/example-process.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";
import { waitUntil } from "./support/wait.ts";

const WIDGET = "example.io/widget";
const RECOVERED = "checkpoint written again after failed writes";

async function allocate(node: DeviceNode, owner: string, count = 1) {
  return runEdgeplug(["allocate", "--owner", owner, `${WIDGET}=${count}`, "--api", node.apiSocket, "--output", "json"]);
}

async function widgetsReady(node: DeviceNode, devices: number): Promise<void> {
  const agent = await watchAgent(node, node.apiSocket);
  await agent.until(`${devices} healthy widgets`, (view) => view.resources.get(WIDGET)?.connected === true && view.resources.get(WIDGET)?.healthy.length === devices);
}

/** Resolves once the agent has logged `message` `times` times. */
async function loggedTimes(agent: AgentProcess, message: string, times: number): Promise<void> {
  await waitUntil(() => agent.logs().filter((record) => record.msg === message).length >= times, `${times} × log ${JSON.stringify(message)}`, 20_000, 20);
}

test("the checkpoint replaced by a directory: allocate is refused with the cause, and after kill -9 and a restart the device was never given", async (t) => {
  const node = deviceNode(t);
  let agent = await startAgent(node);
  startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--devices", "1", "--numa-nodes", "0"]);
  await widgetsReady(node, 1);
  const checkpoint = path.join(node.pluginsDir, "kubelet_internal_checkpoint");
  fs.rmSync(checkpoint, { force: true });
  fs.mkdirSync(checkpoint);
  fs.writeFileSync(path.join(checkpoint, "keep"), "");

  const refused = await allocate(node, "victim");
  assert.equal(refused.code, 1, refused.stdout);
  assert.match(refused.stderr, new RegExp(`^edgeplug allocate: refused: nothing was allocated to owner victim(, the allocation was undone)?: cannot write the checkpoint ${checkpoint}: EISDIR`));
  const status = await statusJson(node.apiSocket);
  assert.deepEqual(status.allocations, []);
  assert.match(status.checkpoint?.writeError ?? "", /EISDIR/);
  assert.equal(status.ok, false);

  agent.child.kill("SIGKILL");
  await agent.exited;
  fs.rmSync(checkpoint, { recursive: true });
  agent = await startAgent(node);
  await widgetsReady(node, 1);
  const second = await allocate(node, "second");
  assert.equal(second.code, 0, second.stderr);
  assert.deepEqual((await statusJson(node.apiSocket)).allocations.map((a) => [a.owner, a.devices]), [["second", ["widget0"]]], "one owner, the one that was answered");
});

test("the checkpoint's disk full, then read-only: the agent runs on, refuses with the cause, reports it, and recovers by itself", async (t) => {
  const node = deviceNode(t);
  const stateDir = path.join(node.dir, "state");
  fs.mkdirSync(stateDir);
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=256k,mode=0750", "tmpfs", stateDir]);
  // Registered first, so it runs last: after the agent is gone.
  node.after(() => execFileSync("umount", ["-l", stateDir]));
  const checkpoint = path.join(stateDir, "kubelet_internal_checkpoint");
  fs.writeFileSync(node.policy, fs.readFileSync(node.policy, "utf8").replace(/^ {2}path: .*kubelet_internal_checkpoint$/m, `  path: ${checkpoint}`));
  const agent = await startAgent(node);
  startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--devices", "3", "--numa-nodes", "0"]);
  await widgetsReady(node, 3);
  assert.equal((await allocate(node, "first")).code, 0);

  // Disk full.
  const filler = path.join(stateDir, "filler");
  assert.throws(() => fs.writeFileSync(filler, Buffer.alloc(1024 * 1024)), { code: "ENOSPC" });
  const full = await allocate(node, "second");
  assert.equal(full.code, 1, full.stdout);
  assert.match(full.stderr, /^edgeplug allocate: refused: nothing was allocated to owner second.*: cannot write the checkpoint .*ENOSPC/);
  const fullStatus = await statusJson(node.apiSocket);
  assert.match(fullStatus.checkpoint?.writeError ?? "", /ENOSPC/);
  assert.deepEqual(fullStatus.allocations.map((a) => a.owner), ["first"]);
  fs.rmSync(filler);
  await loggedTimes(agent, RECOVERED, 1);
  assert.equal((await statusJson(node.apiSocket)).checkpoint?.writeError, null, "recovered without a new request");
  assert.equal((await allocate(node, "second")).code, 0);

  // Read-only.
  execFileSync("mount", ["-o", "remount,ro", stateDir]);
  const readOnly = await allocate(node, "third");
  assert.equal(readOnly.code, 1, readOnly.stdout);
  assert.match(readOnly.stderr, /^edgeplug allocate: refused: nothing was allocated to owner third.*EROFS/);
  const release = await runEdgeplug(["release", "--owner", "first", "--api", node.apiSocket]);
  assert.equal(release.code, 1, release.stdout);
  assert.match(release.stderr, /refused: owner first was not released, its devices stay held: .*EROFS/);
  assert.deepEqual((await statusJson(node.apiSocket)).allocations.map((a) => a.owner), ["first", "second"]);
  execFileSync("mount", ["-o", "remount,rw", stateDir]);
  await loggedTimes(agent, RECOVERED, 2);
  assert.equal((await allocate(node, "third")).code, 0);
  assert.equal((await runEdgeplug(["release", "--owner", "first", "--api", node.apiSocket])).code, 0);
  const verified = await runEdgeplug(["checkpoint", "verify", checkpoint, "--output", "json"]);
  assert.equal(verified.code, 0, verified.stderr);
  assert.doesNotMatch(verified.stdout, /"first"/);
  assert.match(verified.stdout, /"second"[\s\S]*"third"|"third"[\s\S]*"second"/);
  assert.equal(agent.child.exitCode, null, "the agent ran on throughout");
});

test("a checkpoint that is a symbolic link to a secret stops the start without quoting it; a stray temporary directory and a directory others may write do not", async (t) => {
  const node = deviceNode(t);
  const checkpoint = path.join(node.pluginsDir, "kubelet_internal_checkpoint");
  const secret = path.join(node.dir, "shadow");
  fs.writeFileSync(secret, "root:$6$s3cr3t:19000:0:99999:7:::\n", { mode: 0o600 });
  fs.mkdirSync(node.pluginsDir);
  fs.symlinkSync(secret, checkpoint);
  const refused = await runEdgeplug(["run", "--config", node.policy]);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /is a symbolic link, which the checkpoint may not be \(it is not followed\)/);
  assert.doesNotMatch(refused.stderr + refused.stdout, /s3cr3t|root:/);

  fs.rmSync(checkpoint);
  fs.mkdirSync(path.join(node.pluginsDir, ".kubelet_internal_checkpoint.tmp-999999999-1"));
  fs.chmodSync(node.pluginsDir, 0o777);
  const agent = await startAgent(node);
  await agent.waitForLog("something other than a file has a checkpoint temporary file's name; left alone");
  const warned = await agent.waitForLog("the checkpoint's directory is writable by others than its owner: they can replace the checkpoint; chmod go-w it");
  assert.equal(warned.mode, "0777");
  startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--devices", "1", "--numa-nodes", "0"]);
  await widgetsReady(node, 1);
  assert.equal((await allocate(node, "job")).code, 0);
});

test("a plugin flapping its devices' health costs the checkpoint at most a write per 10 s; an allocation is still written before it is answered", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  const devices = healthyDevices(10);
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "flapping.sock"), devices });
  node.after(() => plugin.stop());
  await registerDevicePlugin(path.join(node.pluginsDir, "kubelet.sock"), { endpoint: "flapping.sock", resource_name: "acme.io/flapping" });
  const agent = await watchAgent(node, node.apiSocket);
  await agent.until("10 healthy devices", (view) => view.resources.get("acme.io/flapping")?.healthy.length === 10);
  const writesBefore = (await statusJson(node.apiSocket)).checkpoint!.writes;
  const started = performance.now();
  for (let flap = 1; flap <= 200; flap++) {
    plugin.setDevices(devices.map((device, index) => (index === 9 && flap % 2 === 1 ? { ...device, health: "Unhealthy" } : device)));
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await agent.until("the last list seen", (view) => view.resources.get("acme.io/flapping")?.healthy.length === 10);
  const seconds = (performance.now() - started) / 1000;
  const writes = (await statusJson(node.apiSocket)).checkpoint!.writes - writesBefore;
  assert.ok(writes <= 1 + Math.floor(seconds / 10), `${writes} checkpoint writes in ${seconds.toFixed(1)} s of flapping`);
  const granted = await runEdgeplug(["allocate", "--owner", "job", "acme.io/flapping=1", "--api", node.apiSocket]);
  assert.equal(granted.code, 0, granted.stderr);
  const verified = await runEdgeplug(["checkpoint", "verify", path.join(node.pluginsDir, "kubelet_internal_checkpoint"), "--output", "json"]);
  assert.match(verified.stdout, /"job"/, "answered once on disk");
});

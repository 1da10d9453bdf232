/**
 * `run --reconcile-once` with device plugins (docs/commands.md): it
 * restores the checkpoint, collects the first device list of every device
 * plugin (watched directory and registration socket), reports resources
 * and allocations as status does, writes the checkpoint, and is ok only
 * when every resource is connected. A daemon beside it keeps its
 * checkpoint and its registration socket.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import type { ReportJson } from "../src/api/report.ts";
import { reconcileOnce } from "../src/cli/reconcile-once.ts";
import { decodeCheckpoint } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { waitForPath } from "./support/agent-process.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const quiet = createLogger({ level: "error", write: () => {} });
const tegra = fs.readFileSync(new URL("fixtures/checkpoint/kubelet-tegra-allocated.json", import.meta.url));

function policyIn(dir: string): Policy {
  const base = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} } });
  return { ...base, devicePlugins: { registrationSocket: path.join(dir, "dp", "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" } };
}

async function run(policy: Policy, timeoutMs = 10_000) {
  let stdout = "";
  const code = await reconcileOnce(
    policy,
    { stdout: (text) => void (stdout += text), stderr: () => {}, signal: new AbortController().signal, log: quiet },
    { timeoutMs, expectations: { expect: null, require: [], resources: {}, strict: false }, output: "json" },
  );
  return { code, report: JSON.parse(stdout) as ReportJson };
}

async function watchedPlugin(t: TestContext, policy: Policy, name: string, resource: string, count: number) {
  fs.mkdirSync(policy.watch[0]!.path, { recursive: true });
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(policy.watch[0]!.path, name), devices: healthyDevices(count, "w"), watchedAs: { name: resource } });
  t.after(() => plugin.stop());
  return plugin;
}

test("both registration paths: every plugin's first device list is in the report and in the checkpoint; allocations come back", async (t) => {
  const dir = tempDir(t);
  const policy = policyIn(dir);
  await watchedPlugin(t, policy, "watched.sock", "acme.io/fpga", 2);
  // The checkpoint knows nvidia.com/gpu (a kubelet's, with an allocation): the run waits for its plugin to return.
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  fs.writeFileSync(policy.checkpoint.path, tegra);
  const running = run(policy);
  const registrationSocket = policy.devicePlugins.registrationSocket!;
  await waitForPath(registrationSocket);
  const direct = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(registrationSocket), "gpu.sock"), devices: [{ ID: "tegra", health: "Healthy" }] });
  t.after(() => direct.stop());
  await registerDevicePlugin(registrationSocket, { endpoint: "gpu.sock", resource_name: "nvidia.com/gpu" });
  const { code, report } = await running;

  assert.equal(code, 0, JSON.stringify(report));
  assert.equal(report.ok, true);
  assert.deepEqual(
    report.resources.map((r) => [r.name, r.capacity, r.allocatable, r.healthy, r.connected]),
    [["acme.io/fpga", 2, 2, ["w0", "w1"], true], ["nvidia.com/gpu", 1, 1, ["tegra"], true]],
  );
  assert.deepEqual(report.allocations, [
    {
      owner: "bf52b2cd-b611-4e79-86b1-280b283185c3",
      container: "check",
      resource: "nvidia.com/gpu",
      devices: ["tegra"],
      allocatedAt: null,
      ageSeconds: null,
      kind: "plain",
      ownerPid: null,
      leaseExpiresAt: null,
    },
  ]);
  assert.equal(report.checkpoint?.restore, "restored");
  assert.ok((report.checkpoint?.writes ?? 0) >= 1);
  const written = decodeCheckpoint(fs.readFileSync(policy.checkpoint.path));
  assert.deepEqual([...written.registeredDevices].sort(), [["acme.io/fpga", ["w0", "w1"]], ["nvidia.com/gpu", ["tegra"]]]);
  assert.equal(written.podDeviceEntries[0]?.podUID, "bf52b2cd-b611-4e79-86b1-280b283185c3");
  assert.equal(fs.existsSync(registrationSocket), false, "the registration socket is removed on exit");
});

test("a resource from the checkpoint whose plugin does not return makes the report not ok after --timeout; its allocation is kept", async (t) => {
  const dir = tempDir(t);
  const policy = policyIn(dir);
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  fs.writeFileSync(policy.checkpoint.path, tegra);
  const { code, report } = await run(policy, 300);
  assert.equal(code, 1);
  assert.equal(report.ok, false);
  assert.deepEqual(report.resources.map((r) => [r.name, r.capacity, r.allocatable, r.connected]), [["nvidia.com/gpu", 0, 0, false]]);
  assert.equal(report.allocations.length, 1);
  const written = decodeCheckpoint(fs.readFileSync(policy.checkpoint.path));
  assert.equal(written.podDeviceEntries.length, 1, "the allocation is written back");
});

test("security.maxPlugins counts the registration socket's plugins beside the watched ones", async (t) => {
  const dir = tempDir(t);
  const policy = { ...policyIn(dir), security: { ...policyIn(dir).security, maxPlugins: 1 } };
  const watched = await watchedPlugin(t, policy, "watched.sock", "acme.io/fpga", 1);
  // nvidia.com/gpu from the checkpoint keeps the run waiting until --timeout.
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  fs.writeFileSync(policy.checkpoint.path, tegra);
  const running = run(policy, 1500);
  await watched.waitForStreams(1);
  const registrationSocket = policy.devicePlugins.registrationSocket!;
  const direct = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(registrationSocket), "gpu.sock"), devices: [{ ID: "tegra", health: "Healthy" }] });
  t.after(() => direct.stop());
  await assert.rejects(registerDevicePlugin(registrationSocket, { endpoint: "gpu.sock", resource_name: "nvidia.com/gpu" }), {
    details: "maxPlugins limit of 1 reached",
  });
  const { code, report } = await running;
  assert.equal(code, 1);
  assert.deepEqual(report.resources.map((r) => [r.name, r.connected]), [["acme.io/fpga", true], ["nvidia.com/gpu", false]]);
});

test("without any device state the run still leaves a checkpoint behind", async (t) => {
  const dir = tempDir(t);
  const policy = policyIn(dir);
  const { code, report } = await run(policy);
  assert.equal(code, 0);
  assert.deepEqual([report.checkpoint?.restore, report.checkpoint?.writes], ["missing", 1]);
  assert.deepEqual(decodeCheckpoint(fs.readFileSync(policy.checkpoint.path)), { podDeviceEntries: [], registeredDevices: new Map() });
});

test("a checkpoint directory that cannot be created: exit 3, and the JSON says why", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "a-file"), "");
  const policy = { ...policyIn(dir), checkpoint: { path: path.join(dir, "a-file", "kubelet_internal_checkpoint") } };
  const { code, report } = await run(policy);
  assert.equal(code, 3);
  assert.match((report as unknown as { error: string }).error, new RegExp(`^cannot start: cannot create the checkpoint directory ${path.join(dir, "a-file")}: (ENOTDIR|EEXIST)`));
});

test("a daemon beside the run keeps its checkpoint and its registration socket", async (t) => {
  const dir = tempDir(t);
  const policy: Policy = { ...policyIn(dir), api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: null } };
  const daemon = new EdgeplugAgent({ policy, log: quiet });
  t.after(() => daemon.stop());
  await daemon.start();
  await watchedPlugin(t, policy, "watched.sock", "acme.io/fpga", 1);
  await waitForDeviceState(daemon.devices, "the daemon has the plugin", () => daemon.devices.resource("acme.io/fpga")?.allocatable === 1);
  assert.equal(await daemon.devices.flush(), true);
  const before = fs.statSync(policy.checkpoint.path);
  const { code, report } = await run(policy);
  assert.equal(code, 0, JSON.stringify(report));
  assert.deepEqual(report.resources.map((r) => [r.name, r.capacity]), [["acme.io/fpga", 1]]);
  assert.equal(report.checkpoint?.writes, 0, "the daemon's checkpoint is not written");
  assert.equal(fs.statSync(policy.checkpoint.path).mtimeMs, before.mtimeMs);
  assert.ok(fs.existsSync(policy.devicePlugins.registrationSocket!), "the daemon's registration socket is still there");
  // The report says that device plugins registered with the daemon on kubelet.sock are out of its sight.
  assert.equal(report.registrationSocketHeldBy, `the edgeplug daemon serving ${policy.api.socket}`);
});

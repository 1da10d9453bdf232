/**
 * Devices never leak, on dist/edgeplug: an owner named by a process
 * (`allocate --owner-pid`) is released when that process exits, and one
 * with a lease (`--lease`) when its lease lapses unless renewed; a PID that
 * names another process than the caller's (reused) holds nothing; after a
 * restart, an owner whose process died meanwhile is released at start.
 * Each automatic release is an event with its cause and a log line.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { processIdentity } from "../src/platform/process-watch.ts";
import { runEdgeplug } from "./support/agent-process.ts";
import { type AgentWatch, watchAgent } from "./support/agent-events.ts";
import { type DeviceNode, deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";

const GPU = "example.com/gpu";

async function nodeWithPlugin(
  t: Parameters<typeof deviceNode>[0],
  options: { metrics?: boolean } = {},
): Promise<{ node: DeviceNode; agent: AgentWatch; stderr: () => string; metricsUrl: () => Promise<string>; restart: (whileStopped: () => Promise<void>) => Promise<AgentWatch> }> {
  const node = deviceNode(t);
  if (options.metrics) fs.writeFileSync(node.policy, fs.readFileSync(node.policy, "utf8").replace("  metrics: null\n", "  metrics: 127.0.0.1:0\n"));
  let process = await startAgent(node);
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "gpu.sock"), devices: healthyDevices(4) });
  node.after(() => plugin.stop());
  const kubeletSock = path.join(node.pluginsDir, "kubelet.sock");
  await registerDevicePlugin(kubeletSock, { endpoint: "gpu.sock", resource_name: GPU });
  const agent = await watchAgent(node, node.apiSocket);
  await agent.until("4 healthy devices", (view) => view.resources.get(GPU)?.healthy.length === 4);
  let logs = "";
  return {
    node,
    agent,
    stderr: () => logs + process.stderr(),
    metricsUrl: async () => String((await process.waitForLog("edgeplug running")).metrics),
    restart: async (whileStopped) => {
      logs += process.stderr();
      process.child.kill("SIGKILL");
      await process.exited;
      await whileStopped();
      // The plugin's socket is gone (the restart contract): the allocations come back from the checkpoint without it.
      process = await startAgent(node);
      return watchAgent(node, node.apiSocket);
    },
  };
}

/** A process that runs until killed, killed after the test. */
function startSleeper(t: { after: (cleanup: () => unknown) => void }): ChildProcess {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1 << 30)"], { stdio: "ignore" });
  t.after(() => child.kill("SIGKILL"));
  return child;
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", () => resolve())));
}

async function allocate(node: DeviceNode, owner: string, ...flags: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runEdgeplug(["allocate", "--owner", owner, ...flags, `${GPU}=1`, "--api", node.apiSocket, "--output", "json"]);
}

function releasedBy(agent: AgentWatch, owner: string): string | undefined {
  for (const event of agent.view.events) {
    if (event.kind.case === "allocation" && event.kind.value.owner === owner && event.kind.value.released) return event.kind.value.releaseCause ?? "release";
  }
  return undefined;
}

test("dist/edgeplug: an owner named by a process holds its devices until that process exits, and no longer", async (t) => {
  const { node, agent, stderr } = await nodeWithPlugin(t);
  const sleeper = startSleeper(node);
  const plain = await allocate(node, "plain-job");
  assert.equal(plain.code, 0, plain.stderr);
  const granted = await allocate(node, "pid-job", "--owner-pid", String(sleeper.pid));
  assert.equal(granted.code, 0, granted.stderr);

  const status = await statusJson(node.apiSocket);
  const held = status.allocations.find((a) => a.owner === "pid-job");
  assert.deepEqual([held?.kind, held?.ownerPid, held?.leaseExpiresAt], ["process", sleeper.pid, null]);
  assert.ok(held?.allocatedAt !== null && Number(held?.ageSeconds) >= 0, "a fresh allocation has an age");
  assert.equal(status.allocations.find((a) => a.owner === "plain-job")?.kind, "plain");
  const text = await runEdgeplug(["status", "--api", node.apiSocket, "--exit-zero"]);
  assert.match(text.stdout, new RegExp(`pid-job .* pid ${sleeper.pid}\\b`));
  assert.match(text.stdout, /plain-job .* until released/);

  // Asking again for the same owner as another process, or as a plain owner, is refused.
  const other = startSleeper(node);
  const again = await allocate(node, "pid-job", "--owner-pid", String(other.pid));
  assert.equal(again.code, 1);
  assert.match(again.stderr, new RegExp(`owner pid-job holds its devices while process ${sleeper.pid} runs, not process ${other.pid}`));

  sleeper.kill("SIGKILL");
  await agent.until("pid-job released", () => releasedBy(agent, "pid-job") !== undefined);
  assert.equal(releasedBy(agent, "pid-job"), "process_exited");
  const after = await statusJson(node.apiSocket);
  assert.deepEqual(after.allocations.map((a) => a.owner), ["plain-job"], "the plain owner keeps its devices");
  const line = stderr().split("\n").find((l) => l.includes('"devices released automatically"'));
  assert.ok(line, "an automatic release is logged");
  assert.deepEqual([JSON.parse(line).owner, JSON.parse(line).cause, JSON.parse(line).pid], ["pid-job", "process_exited", sleeper.pid]);
});

test("dist/edgeplug: a PID held by another process than the caller's holds no devices, at allocate and after a restart", async (t) => {
  const { node, agent, stderr, restart } = await nodeWithPlugin(t);
  const sleeper = startSleeper(node);
  const identity = processIdentity(sleeper.pid!);
  assert.ok(identity);
  // The caller read another start time for this PID: by now another process holds it.
  const channel = dialUnix(node.apiSocket);
  node.after(() => channel.close());
  const client = createClient(Agent, channel.transport);
  await assert.rejects(
    client.allocate({ owner: "reused", resources: [{ resource: GPU, count: 1 }], ownerPid: sleeper.pid, ownerPidStartTime: BigInt(identity.startTime) + 1n }),
    /process \d+ is not the process named: it started at \d+, not \d+ \(clock ticks after boot\): the PID was reused/,
  );
  assert.deepEqual((await statusJson(node.apiSocket)).allocations, [], "nothing was allocated");

  // Held by a live process, then the agent stops; meanwhile the process exits and its PID, in the side file, names another.
  const granted = await allocate(node, "restarted", "--owner-pid", String(sleeper.pid));
  assert.equal(granted.code, 0, granted.stderr);
  const gone = startSleeper(node);
  const goneGranted = await allocate(node, "gone", "--owner-pid", String(gone.pid));
  assert.equal(goneGranted.code, 0, goneGranted.stderr);
  agent.close();
  const sideFile = path.join(node.pluginsDir, "kubelet_internal_checkpoint.edgeplug-owners.json");
  const watched = await restart(async () => {
    gone.kill("SIGKILL");
    await exited(gone);
    const content = JSON.parse(fs.readFileSync(sideFile, "utf8")) as { owners: Record<string, { pid: number; startTime: string }> };
    // "restarted" now names the test's own process by PID, with the sleeper's start time: a reused PID.
    content.owners.restarted!.pid = process.pid;
    fs.writeFileSync(sideFile, JSON.stringify(content));
  });
  // Released before the agent serves its API: the first status already holds neither.
  assert.deepEqual((await statusJson(node.apiSocket)).allocations, [], "neither the dead process's owner nor the reused PID's holds devices");
  assert.equal(watched.view.allocations.size, 0);
  const causes = stderr()
    .split("\n")
    .filter((l) => l.includes('"devices released automatically"'))
    .map((l) => [JSON.parse(l).owner, JSON.parse(l).cause])
    .sort();
  assert.deepEqual(causes, [
    ["gone", "process_gone_at_start"],
    ["restarted", "process_gone_at_start"],
  ]);
});

test("dist/edgeplug: a lease that lapses frees its devices; one renewed in time keeps them", async (t) => {
  const { node, agent, stderr, metricsUrl } = await nodeWithPlugin(t, { metrics: true });
  const lapsing = await allocate(node, "lapsing", "--lease", "1s");
  assert.equal(lapsing.code, 0, lapsing.stderr);
  const renewed = await allocate(node, "renewed", "--container", "c", "--lease", "1s");
  assert.equal(renewed.code, 0, renewed.stderr);
  const first = JSON.parse(renewed.stdout) as { allocations: { devices: string[] }[] };
  const status = await statusJson(node.apiSocket);
  const leased = status.allocations.find((a) => a.owner === "renewed");
  assert.equal(leased?.kind, "lease");
  assert.ok(leased?.leaseExpiresAt !== null && Date.parse(leased!.leaseExpiresAt!) > Date.now() - 1000);

  // Renewed (the same request again) until the other lease has lapsed.
  while (releasedBy(agent, "lapsing") === undefined) {
    const again = await allocate(node, "renewed", "--container", "c", "--lease", "1s");
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual((JSON.parse(again.stdout) as typeof first).allocations[0]?.devices, first.allocations[0]?.devices, "a renewal keeps the same devices");
    await agent.until("a quarter of the lease", () => releasedBy(agent, "lapsing") !== undefined, 250).catch(() => {});
  }
  assert.equal(releasedBy(agent, "lapsing"), "lease_lapsed");
  assert.deepEqual((await statusJson(node.apiSocket)).allocations.map((a) => a.owner), ["renewed"], "the renewed lease holds its devices");
  // No longer renewed: it lapses too.
  await agent.until("renewed released", () => releasedBy(agent, "renewed") !== undefined);
  assert.equal(releasedBy(agent, "renewed"), "lease_lapsed");
  assert.equal(stderr().split("\n").filter((l) => l.includes('"devices released automatically"') && l.includes('"lease_lapsed"')).length, 2);
  const metrics = await (await fetch(`${await metricsUrl()}/metrics`)).text();
  assert.match(metrics, /^edgeplug_automatic_releases_total\{cause="lease_lapsed"\} 2$/m);
  assert.match(metrics, /^edgeplug_automatic_releases_total\{cause="process_exited"\} 0$/m);
});

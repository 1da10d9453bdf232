/**
 * kill -9 of dist/edgeplug at random moments while a device plugin
 * registers, flaps its devices' health, and owners allocate and release,
 * each kill followed by a restart (docs/devices.md, "Checkpoint and
 * restarts"). After every restart: the checkpoint verifies; every
 * allocation that was answered (and not released since) is back with its
 * devices; every release that was answered stays released; no device is
 * held by two owners; and no answered allocation was ever given a device
 * another owner held by an earlier answer. Requests cut by the kill count
 * as whichever way the checkpoint says, and are judged from then on.
 *
 * CI runs EDGEPLUG_CRASH_KILLS=30 kills by default (under a minute); set it
 * to 200 or more for the long form.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { test } from "node:test";
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { decodeCheckpoint } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { type AgentProcess, startEdgeplug } from "./support/agent-process.ts";
import { deviceNode } from "./support/device-node.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, type TestDevice } from "./support/fake-device-plugin.ts";
import { seededRandom } from "./support/seeded-random.ts";

const KILLS = Math.max(1, Number(process.env.EDGEPLUG_CRASH_KILLS) || 30);
const RESOURCE = "acme.io/crash";
const DEVICES = 8;
/** The kill comes this long at most after the agent runs: early ones hit the registration, later ones the requests. */
const MAX_KILL_DELAY_MS = 400;
const READY_TIMEOUT_MS = 30_000;

/** What the answers said, and what the kill left undecided. */
interface Model {
  /** Owners whose allocation was answered, with its devices. */
  held: Map<string, string[]>;
  /** Requests the kill cut before their answer: decided by the checkpoint after the restart. */
  undecidedAllocations: Set<string>;
  undecidedReleases: Set<string>;
  /** Answers received: the test must have made the kills meet requests, not an idle agent. */
  answered: { allocations: number; releases: number };
}

function checkpointEntries(file: string): Map<string, string[]> {
  const owners = new Map<string, string[]>();
  if (!fs.existsSync(file)) return owners;
  // decodeCheckpoint verifies the checksum: it throws on a torn or corrupt file.
  for (const entry of decodeCheckpoint(fs.readFileSync(file)).podDeviceEntries) {
    assert.equal(entry.resourceName, RESOURCE);
    owners.set(entry.podUID, [...new Set([...entry.deviceIDs.values()].flat())].sort());
  }
  return owners;
}

/** Checks the restarted agent's checkpoint against the model, then settles what the kill left undecided. */
function judge(model: Model, file: string, kill: number): void {
  const onDisk = checkpointEntries(file);
  const holders = new Map<string, string>();
  for (const [owner, devices] of onDisk) {
    for (const device of devices) {
      assert.equal(holders.get(device), undefined, `kill ${kill}: ${device} is held by ${holders.get(device)} and ${owner}`);
      holders.set(device, owner);
    }
  }
  for (const [owner, devices] of model.held) {
    if (model.undecidedReleases.has(owner)) continue;
    assert.deepEqual(onDisk.get(owner), devices, `kill ${kill}: the answered allocation of ${owner} is not as answered`);
  }
  for (const owner of onDisk.keys()) {
    const known = model.held.has(owner) || model.undecidedAllocations.has(owner);
    assert.ok(known, `kill ${kill}: ${owner} holds devices nobody asked for`);
  }
  for (const owner of model.undecidedAllocations) {
    const devices = onDisk.get(owner);
    if (devices) model.held.set(owner, devices);
  }
  for (const owner of model.undecidedReleases) if (!onDisk.has(owner)) model.held.delete(owner);
  model.undecidedAllocations.clear();
  model.undecidedReleases.clear();
}

function isRateLimited(error: unknown): boolean {
  return error instanceof ConnectError && error.code === Code.ResourceExhausted;
}

/** Resolves once status shows the plugin connected again with a healthy device. */
async function resourceBack(api: Client<typeof Agent>, kill: number): Promise<void> {
  const deadline = performance.now() + READY_TIMEOUT_MS;
  for (;;) {
    const status = await api.status({}).catch((error: unknown) => {
      if (isRateLimited(error)) return null;
      throw error;
    });
    const resource = status?.resources.find((r) => r.name === RESOURCE);
    if (resource?.connected && resource.healthy.length > 0) return;
    if (performance.now() > deadline) throw new Error(`kill ${kill}: the plugin was not back within ${READY_TIMEOUT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Requests against the running agent until `stopped`: allocations, releases and health changes, two at a time. */
async function churn(api: Client<typeof Agent>, model: Model, random: () => number, flap: () => void, stopped: () => boolean, prefix: string): Promise<void> {
  let next = 0;
  const busy = new Set<string>();
  const one = async (): Promise<void> => {
    const roll = random();
    if (roll < 0.2) return flap();
    const releasable = [...model.held.keys()].filter((owner) => !busy.has(owner));
    if (roll < 0.55 && releasable.length > 0) {
      const owner = releasable[Math.floor(random() * releasable.length)]!;
      busy.add(owner);
      model.undecidedReleases.add(owner);
      try {
        await api.release({ owner });
        model.held.delete(owner);
        model.undecidedReleases.delete(owner);
        model.answered.releases++;
      } catch (error) {
        if (stopped()) return;
        // The API's rate limit refused it before doing anything: the owner still holds its devices.
        if (!isRateLimited(error)) throw error;
        model.undecidedReleases.delete(owner);
      } finally {
        busy.delete(owner);
      }
      return;
    }
    const owner = `${prefix}-${next++}`;
    model.undecidedAllocations.add(owner);
    try {
      const answer = await api.allocate({ owner, resources: [{ resource: RESOURCE, count: 1 + Math.floor(random() * 2) }] });
      const devices = [...(answer.allocations[0]?.devices ?? [])].sort();
      for (const [other, theirs] of model.held) {
        assert.ok(!theirs.some((device) => devices.includes(device)), `${owner} was given ${devices} while ${other} holds ${theirs}`);
      }
      model.held.set(owner, devices);
      model.undecidedAllocations.delete(owner);
      model.answered.allocations++;
    } catch {
      // Refused (no free healthy device, the plugin not back yet): nothing was allocated, as its answer said.
      if (!stopped()) model.undecidedAllocations.delete(owner);
    }
  };
  const lane = async () => {
    while (!stopped()) await one().catch((error: unknown) => (stopped() ? undefined : Promise.reject(error)));
  };
  await Promise.all([lane(), lane()]);
}

test(`kill -9 of the agent at random moments (${KILLS} kills): no answered allocation is lost, no device is held twice`, { timeout: 60_000 + KILLS * 10_000 }, async (t) => {
  const node = deviceNode(t);
  const checkpoint = path.join(node.pluginsDir, "kubelet_internal_checkpoint");
  const devices: TestDevice[] = healthyDevices(DEVICES);
  fs.mkdirSync(node.pluginsDir, { recursive: true });
  // Served again after each start, as a plugin does when the kubelet restarts (the agent clears the directory's sockets).
  let plugin: Awaited<ReturnType<typeof startFakeDevicePlugin>> | undefined;
  node.after(() => plugin?.stop());
  const random = seededRandom(0x5eed + KILLS);
  const flap = () => plugin?.setDevices(devices.map((device) => (random() < 0.15 ? { ...device, health: "Unhealthy" } : device)));
  const model: Model = { held: new Map(), undecidedAllocations: new Set(), undecidedReleases: new Set(), answered: { allocations: 0, releases: 0 } };
  let agent: AgentProcess | undefined;
  node.after(() => agent?.child.kill("SIGKILL"));
  for (let kill = 1; kill <= KILLS; kill++) {
    agent = startEdgeplug(["run", "--config", node.policy]);
    await agent.waitForLog("edgeplug running", READY_TIMEOUT_MS);
    const channel = dialUnix(node.apiSocket);
    const api = createClient(Agent, channel.transport);
    let killed = false;
    await plugin?.stop();
    plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "crash.sock"), devices });
    const registered = registerDevicePlugin(path.join(node.pluginsDir, "kubelet.sock"), { endpoint: "crash.sock", resource_name: RESOURCE }).catch((error: unknown) => {
      if (!killed) throw error;
    });
    // One kill in five meets the registration; the others come once the plugin's devices are back, among the requests.
    if (random() >= 0.2) await resourceBack(api, kill);
    const requests = churn(api, model, random, flap, () => killed, `k${kill}`);
    await new Promise((resolve) => setTimeout(resolve, random() * MAX_KILL_DELAY_MS));
    killed = true;
    agent.child.kill("SIGKILL");
    const { signal } = await agent.exited;
    assert.equal(signal, "SIGKILL", `kill ${kill}: the agent ended before the kill: ${agent.stderr()}`);
    await Promise.all([registered, requests]);
    channel.close();
    judge(model, checkpoint, kill);
  }
  // A last start: the agent reads what the last kill left and agrees with the model.
  agent = startEdgeplug(["run", "--config", node.policy]);
  await agent.waitForLog("edgeplug running", READY_TIMEOUT_MS);
  const channel = dialUnix(node.apiSocket);
  t.after(() => channel.close());
  const status = await createClient(Agent, channel.transport).status({});
  assert.deepEqual(
    new Map(status.allocations.map((a) => [a.owner, [...a.devices].sort()])),
    model.held,
    "the restarted agent holds exactly the answered allocations",
  );
  assert.equal(await agent.terminate(), 0);
  t.diagnostic(`${model.answered.allocations} allocations and ${model.answered.releases} releases answered across ${KILLS} kills`);
  assert.ok(model.answered.allocations >= KILLS / 3 && model.answered.releases >= KILLS / 6, "the kills met allocations and releases");
});

/**
 * End-to-end on the built executable, for operators (issue 9): /healthz and
 * /readyz answer on the API socket with the metrics port off, and the build
 * and reload metrics follow what SIGHUP did (a good reload, a refused one,
 * a good one again).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import { test } from "node:test";
import { promisify } from "node:util";
import { type AgentProcess, runEdgeplug, startEdgeplug, writePolicy } from "./support/agent-process.ts";
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";
import * as path from "node:path";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { healthyDevices, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";
import { waitUntil } from "./support/wait.ts";

async function curl(...args: string[]): Promise<{ status: number; body: string }> {
  const { stdout } = await promisify(execFile)("curl", ["--silent", "--write-out", "\n%{http_code}", ...args]);
  const lines = stdout.split("\n");
  return { status: Number(lines.pop()), body: lines.join("\n") };
}

test("dist/edgeplug answers /healthz and /readyz on its API socket, over HTTP/1.1 and HTTP/2, with the metrics port off", async (t) => {
  const policy = writePolicy(tempDir(t));
  assert.match(fs.readFileSync(policy.path, "utf8"), /^ {2}metrics: null$/m);
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  // "edgeplug running" is logged once the initial walk is done: ready from then on.
  await agent.waitForLog("edgeplug running");

  for (const version of ["--http1.1", "--http2-prior-knowledge"]) {
    const health = await curl(version, "--unix-socket", policy.apiSocket, "http://localhost/healthz");
    assert.deepEqual([health.status, health.body.trim()], [200, "ok"], version);
    const ready = await curl(version, "--unix-socket", policy.apiSocket, "http://localhost/readyz");
    assert.equal(ready.status, 200, `${version}: ${ready.body}`);
    assert.match(ready.body, /^\[\+\]initial-walk ok$/m);
    assert.match(ready.body, /^\[\+\]api-serving ok$/m);
  }
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("dist/edgeplug exports edgeplug_build_info, and the reload gauges follow a good, a refused and a good SIGHUP", async (t) => {
  const policy = writePolicy(tempDir(t));
  const original = fs.readFileSync(policy.path, "utf8").replace(/^ {2}metrics: null$/m, "  metrics: 127.0.0.1:0");
  fs.writeFileSync(policy.path, original);
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  const { url } = (await agent.waitForLog("metrics endpoint serving")) as { url: string };
  await agent.waitForLog("edgeplug running");
  const scrape = async () => {
    const text = (await curl(`${url}/metrics`)).body;
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
    return {
      text,
      successful: value("edgeplug_config_last_reload_successful"),
      at: value("edgeplug_config_last_reload_success_timestamp_seconds"),
    };
  };

  // The build: the same version, runtime and commit as `edgeplug version` prints.
  const version = (await runEdgeplug(["version"])).stdout.trim().split(" ");
  const started = await scrape();
  const build = /^edgeplug_build_info\{version="([^"]+)",commit="([^"]+)",runtime="([^"]+)"\} 1$/m.exec(started.text);
  assert.ok(build, started.text);
  assert.deepEqual([build[1], build[3], build[2]], [version[1], `${version[2]} ${version[3]}`, version[5]]);
  assert.equal(started.successful, 1, "the policy loaded at start counts as a successful load");
  assert.ok(Math.abs(started.at - Date.now() / 1000) < 600, `loaded at ${started.at}`);

  // A good reload: still 1, and the timestamp moves to the reload (gauge resolution: milliseconds or better).
  fs.writeFileSync(policy.path, original.replace("reconcile:\n", "reconcile:\n  resync: 20s\n"));
  agent.child.kill("SIGHUP");
  await agent.waitForLog("policy reloaded");
  const reloaded = await scrape();
  assert.equal(reloaded.successful, 1);
  assert.ok(reloaded.at > started.at, `reloaded at ${reloaded.at}, started at ${started.at}`);

  // A refused reload: 0, and the timestamp stays that of the policy still in force.
  fs.writeFileSync(policy.path, original.replace("reconcile:\n", "reconcile:\n  resync: soon\n"));
  agent.child.kill("SIGHUP");
  await agent.waitForLog("policy reload refused; the running policy stays in force");
  const refused = await scrape();
  assert.equal(refused.successful, 0);
  assert.equal(refused.at, reloaded.at);

  // Fixed again: back to 1.
  fs.writeFileSync(policy.path, original);
  agent.child.kill("SIGHUP");
  await logCount(agent, "policy reloaded", 2);
  assert.ok((await scrape()).at > refused.at);

  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

/** Resolves once the agent has logged `message` `count` times (checked on each stderr chunk). */
function logCount(agent: AgentProcess, message: string, count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const stderr = agent.child.stderr!;
    const check = () => {
      if (agent.logs().filter((record) => record.msg === message).length < count) return;
      stderr.off("data", check);
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      stderr.off("data", check);
      reject(new Error(`the agent did not log "${message}" ${count} times within 10 s`));
    }, 10_000);
    stderr.on("data", check);
    check();
  });
}

test("the agent's version is in its start line, status (text and JSON) and the API; a device turning unhealthy and back is one log line each", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const version = (await runEdgeplug(["version"])).stdout.split(" ");
  const [edgeplugVersion, commit] = [version[1]!, version[5]!.trim()];
  const running = await agent.waitForLog("edgeplug running");
  assert.deepEqual([running.version, running.commit], [edgeplugVersion, commit]);
  const status = await statusJson(node.apiSocket);
  assert.deepEqual([status.version, status.commit], [edgeplugVersion, commit]);
  const text = await runEdgeplug(["status", "--api", node.apiSocket, "--exit-zero"]);
  assert.equal(text.stdout.split("\n")[1], `agent edgeplug ${edgeplugVersion} (${commit})`);

  fs.mkdirSync(node.registry, { recursive: true });
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.registry, "gpu.sock"), devices: healthyDevices(3, "gpu"), watchedAs: { name: "acme.io/gpu" } });
  node.after(() => plugin.stop());
  await plugin.waitForStreams();
  plugin.setDevices([{ ID: "gpu0", health: "Healthy" }, { ID: "gpu1", health: "Unhealthy" }, { ID: "gpu2", health: "Healthy" }]);
  const down = await agent.waitForLog("device health changed");
  assert.deepEqual([down.resource, down.healthy, down.unhealthy, down.turnedUnhealthy, down.turnedHealthy], ["acme.io/gpu", 2, 1, ["gpu1"], []]);
  plugin.setDevices(healthyDevices(3, "gpu"));
  await waitUntil(() => agent.logs().filter((record) => record.msg === "device health changed").length === 2, "the second health line", 5000);
  const up = agent.logs().filter((record) => record.msg === "device health changed")[1]!;
  assert.deepEqual([up.healthy, up.unhealthy, up.turnedUnhealthy, up.turnedHealthy], [3, 0, [], ["gpu1"]]);
});

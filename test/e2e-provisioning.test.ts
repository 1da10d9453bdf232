/**
 * Provisioning scripts on `dist/edgeplug run --reconcile-once` (docs/commands.md,
 * `--reconcile-once`): the script the page shows, run as written; device
 * plugins that register on kubelet.sock count for `--expect` and `--require`
 * and are waited for by `--expect-resource` and by a run without options; a
 * resource the checkpoint names and no plugin brought back is named in the
 * report, counting or not.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { ReportJson } from "../src/api/report.ts";
import { requireBinary, runEdgeplug } from "./support/agent-process.ts";
import { type DeviceNode, deviceNode } from "./support/device-node.ts";
import { startExample } from "./support/example-process.ts";
import { healthyDevices, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";

const COMMANDS_PAGE = fs.readFileSync(new URL("../docs/commands.md", import.meta.url), "utf8");

/** The shell script under "A provisioning script" in docs/commands.md. */
function provisioningScript(): string {
  const section = COMMANDS_PAGE.slice(COMMANDS_PAGE.indexOf("#### A provisioning script"));
  const script = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(script, 'docs/commands.md: no sh block under "#### A provisioning script"');
  return script;
}

const once_ = (node: DeviceNode, ...flags: string[]) => ["run", "--config", node.policy, "--reconcile-once", ...flags];

/** examples/device-plugin.ts on kubelet.sock: registers when it sees kubelet.sock, with `devices` healthy devices. */
function kubeletSockPlugin(node: DeviceNode, resource: string, devices: number) {
  return startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--resource", resource, "--devices", String(devices), "--numa-nodes", "0"]);
}

test("the provisioning script of docs/commands.md waits for example.com/dev=2 and carries on once a plugin registered both on kubelet.sock", async (t) => {
  const node = deviceNode(t);
  const bin = path.join(node.dir, "bin");
  fs.mkdirSync(bin);
  fs.symlinkSync(requireBinary(), path.join(bin, "edgeplug"));
  const script = provisioningScript().replaceAll("/etc/edgeplug/policy.yaml", node.policy);
  assert.notEqual(script, provisioningScript(), "the script names the policy it uses");
  const shell = spawn("sh", ["-c", script], { env: { PATH: `${bin}:${process.env.PATH ?? "/usr/bin:/bin"}` }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  shell.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  shell.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = once(shell, "close");
  node.after(() => {
    if (shell.exitCode === null) shell.kill("SIGKILL");
    return exited;
  });
  // The plugin starts after the script, as on a booting node: it registers once it sees kubelet.sock.
  const plugin = kubeletSockPlugin(node, "example.com/dev", 2);
  await plugin.waitForLine(/^registered$/, { timeoutMs: 30_000 });
  const [code] = await exited;
  assert.equal(code, 0, stdout + stderr);
  assert.match(stdout, /^example\.com\/dev is ready$/m);
  assert.match(stdout, /registered on kubelet\.sock: example\.com\/dev at /);
  assert.match(stdout, /^reconcile-once ok in \d+ ms$/m);
});

test("--expect and --require count a device plugin on kubelet.sock beside a watched one; --expect-resource reads either", async (t) => {
  const node = deviceNode(t);
  fs.mkdirSync(node.registry, { recursive: true });
  const watched = await startFakeDevicePlugin({ socketPath: path.join(node.registry, "fpga.sock"), devices: healthyDevices(1, "f"), watchedAs: { name: "acme.io/fpga" } });
  node.after(() => watched.stop());
  const plugin = kubeletSockPlugin(node, "example.com/dev", 2);
  await plugin.waitForLine(/^serving /);

  const result = await runEdgeplug(
    once_(node, "--expect", "2", "--require", "example.com/dev", "--expect-resource", "example.com/dev=2", "--expect-resource", "acme.io/fpga=1", "--timeout", "30s", "--output", "json"),
  );
  assert.equal(result.code, 0, result.stdout + result.stderr);
  const report = JSON.parse(result.stdout) as ReportJson;
  assert.equal(report.verdictBy, "expectations");
  assert.deepEqual(report.expectations.unmet, []);
  assert.deepEqual(report.expectations.resources, { "example.com/dev": 2, "acme.io/fpga": 1 });
  assert.deepEqual(report.registrationSocketPlugins.map((p) => p.resource), ["example.com/dev"]);
  assert.ok(report.registrationSocketPlugins[0]!.socket.startsWith(fs.realpathSync(node.pluginsDir)));
  assert.deepEqual(report.resources.map((r) => [r.name, r.healthy.length, r.connected]), [["acme.io/fpga", 1, true], ["example.com/dev", 2, true]]);
});

test("without options the run waits for the device plugin already running to register again on kubelet.sock", async (t) => {
  const node = deviceNode(t);
  const plugin = kubeletSockPlugin(node, "example.com/dev", 2);
  await plugin.waitForLine(/^waiting for /);
  const result = await runEdgeplug(once_(node, "--timeout", "30s", "--output", "json"));
  assert.equal(result.code, 0, result.stdout + result.stderr);
  const report = JSON.parse(result.stdout) as ReportJson;
  assert.equal(report.verdictBy, "every socket");
  assert.deepEqual(report.resources.map((r) => [r.name, r.healthy, r.connected]), [["example.com/dev", ["dev0", "dev1"], true]]);
  assert.deepEqual(report.failed, []);
});

test("--expect-resource not met ends at --timeout naming what is missing; a plugin already running that never registers fails a run without options", async (t) => {
  const node = deviceNode(t);
  const short = kubeletSockPlugin(node, "example.com/dev", 1);
  await short.waitForLine(/^waiting for /);
  const unmet = await runEdgeplug(once_(node, "--expect-resource", "example.com/dev=2", "--timeout", "3s"));
  assert.equal(unmet.code, 1, unmet.stdout + unmet.stderr);
  assert.match(unmet.stdout, /^unmet: expected resource example\.com\/dev with at least 2 healthy devices, found 1 healthy of 1$/m);
  assert.match(unmet.stdout, /^reconcile-once FAILED in \d+ ms$/m);
  await short.stop();

  // A device plugin socket that accepts connections but whose plugin never calls Register.
  fs.mkdirSync(node.pluginsDir, { recursive: true });
  const silent = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "silent.sock"), devices: healthyDevices(1) });
  node.after(() => silent.stop());
  const result = await runEdgeplug(once_(node, "--timeout", "2s", "--output", "json"));
  assert.equal(result.code, 1, result.stdout + result.stderr);
  const report = JSON.parse(result.stdout) as ReportJson;
  assert.equal(report.ok, false);
  const socket = path.join(fs.realpathSync(node.pluginsDir), "silent.sock");
  assert.deepEqual(
    report.failed.filter((f) => f.socket === socket).map((f) => [f.type, f.reason, f.error]),
    [["DevicePlugin", "timeout", `accepted connections when the run started, but no device plugin registered it on ${path.join(node.pluginsDir, "kubelet.sock")} within 2s`]],
  );
});

test("a resource in the checkpoint that no plugin brings back is named in the report; with expectations it counts only when named", async (t) => {
  const node = deviceNode(t);
  const plugin = kubeletSockPlugin(node, "example.com/dev", 2);
  await plugin.waitForLine(/^waiting for /);
  const first = await runEdgeplug(once_(node, "--expect-resource", "example.com/dev=2", "--timeout", "30s"));
  assert.equal(first.code, 0, first.stdout + first.stderr);
  await plugin.stop();

  fs.mkdirSync(node.registry, { recursive: true });
  const watched = await startFakeDevicePlugin({ socketPath: path.join(node.registry, "fpga.sock"), devices: healthyDevices(1, "f"), watchedAs: { name: "acme.io/fpga" } });
  node.after(() => watched.stop());
  const lenient = await runEdgeplug(once_(node, "--require", "acme.io/fpga", "--timeout", "30s"));
  assert.equal(lenient.code, 0, lenient.stdout + lenient.stderr);
  assert.match(
    lenient.stdout,
    /^not connected: example\.com\/dev: in the checkpoint, but no device plugin registered it during this run \(not counted: the expectations decide; --expect-resource example\.com\/dev=N or --strict counts it\)$/m,
  );

  const json = await runEdgeplug(once_(node, "--timeout", "1s", "--output", "json"));
  assert.equal(json.code, 1, json.stdout + json.stderr);
  const report = JSON.parse(json.stdout) as ReportJson;
  assert.deepEqual(report.disconnected, [{ resource: "example.com/dev", error: "in the checkpoint, but no device plugin registered it during this run", counts: true }]);
});

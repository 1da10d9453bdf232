/**
 * `edgeplug checkpoint verify PATH` on the shipped executable (dist/edgeplug,
 * built by `npm test`): a kubelet's checkpoint verifies and is printed for
 * people and for scripts; a corrupt or missing one exits 1 with the reason and
 * is left untouched.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { tempDir } from "./support/temp-dir.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const binary = path.join(repoRoot, "dist", "edgeplug");
const fixtures = path.join(repoRoot, "test", "fixtures", "checkpoint");
const tegra = path.join(fixtures, "kubelet-tegra-allocated.json");

function verify(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(binary, ["checkpoint", ...args], { env: {}, encoding: "utf8", timeout: 30_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") return reject(error);
      resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

test("checkpoint verify prints a kubelet's checkpoint for people and exits 0", async () => {
  const { code, stdout, stderr } = await verify("verify", tegra);
  assert.equal(code, 0, stderr);
  assert.equal(
    stdout,
    [
      `${tegra}: valid (checksum 3660592824)`,
      "registered devices (healthy, per resource):",
      "  nvidia.com/gpu (1): tegra",
      "allocations:",
      "  owner bf52b2cd-b611-4e79-86b1-280b283185c3 container check nvidia.com/gpu: tegra (NUMA none)",
      '    allocate response: {"envs":{"NVIDIA_VISIBLE_DEVICES":"tegra"}}',
      "",
    ].join("\n"),
  );
});

test("checkpoint verify --output json gives the content with the decoded Allocate response", async () => {
  const { code, stdout } = await verify("verify", tegra, "--output", "json");
  assert.equal(code, 0);
  assert.deepEqual(JSON.parse(stdout), {
    path: tegra,
    valid: true,
    checksum: 3660592824,
    layout: "1.20",
    registeredDevices: { "nvidia.com/gpu": ["tegra"] },
    podDeviceEntries: [
      {
        podUID: "bf52b2cd-b611-4e79-86b1-280b283185c3",
        containerName: "check",
        resourceName: "nvidia.com/gpu",
        deviceIDs: { "-1": ["tegra"] },
        allocResp: { envs: { NVIDIA_VISIBLE_DEVICES: "tegra" } },
        allocRespError: null,
      },
    ],
  });
  const empty = await verify("verify", path.join(fixtures, "kubelet-gpu-registered.json"), "--output", "json");
  assert.equal(empty.code, 0);
  assert.deepEqual(JSON.parse(empty.stdout).podDeviceEntries, []);
});

test("checkpoint verify reads a kubelet 1.19's checkpoint as newer kubelets do, and says so", async () => {
  const { code, stdout } = await verify("verify", path.join(fixtures, "kubelet-1.19-allocated.json"));
  assert.equal(code, 0);
  const lines = stdout.split("\n");
  assert.match(lines[0]!, /: valid \(checksum 2493634608, written by a kubelet up to 1\.19: devices without NUMA nodes, read as on node 0 as newer kubelets do\)$/);
  assert.ok(lines.includes("  owner 6d1a2f3e-0c4b-4d5e-9f60-7a8b9c0d1e2f container worker acme.io/fpga: fpga1 fpga0 (NUMA 0)"), stdout);
});

test("checkpoint verify exits 1 with the reason for a corrupt file, and leaves it as it was", async (t) => {
  const file = path.join(tempDir(t), "kubelet_internal_checkpoint");
  const tampered = fs.readFileSync(tegra, "utf8").replace('"tegra"]}}', '"tegra2"]}}');
  fs.writeFileSync(file, tampered);
  const { code, stdout, stderr } = await verify("verify", file);
  assert.equal(code, 1);
  assert.equal(stdout, "");
  assert.equal(stderr, `edgeplug checkpoint verify: ${file}: corrupt: checkpoint is corrupted: its Checksum is 3660592824 but its Data hashes to ${/hashes to (\d+)/.exec(stderr)?.[1]}\n`);
  assert.equal(fs.readFileSync(file, "utf8"), tampered);
  assert.deepEqual(fs.readdirSync(path.dirname(file)), ["kubelet_internal_checkpoint"]);

  const json = await verify("verify", file, "--output", "json");
  assert.equal(json.code, 1);
  assert.equal(JSON.parse(json.stdout).valid, false);
  assert.match(JSON.parse(json.stdout).error, /^corrupt: checkpoint is corrupted/);
});

test("checkpoint verify exits 1 for a missing file and 2 for bad usage", async (t) => {
  const missing = path.join(tempDir(t), "none");
  const result = await verify("verify", missing);
  assert.equal(result.code, 1);
  assert.equal(result.stderr, `edgeplug checkpoint verify: ${missing}: missing: no such file\n`);
  assert.equal((await verify("verify")).code, 2);
  assert.equal((await verify("check", tegra)).code, 2);
  assert.equal((await verify("verify", tegra, "--output", "yaml")).code, 2);
});

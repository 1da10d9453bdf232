/**
 * The single executable as shipped (dist/edgeplug, made by `npm run build`,
 * which `npm test` runs first): an ELF file that carries Node 24 and the
 * bundle, runs with an empty environment from an empty directory, knows it is
 * the SEA, and validates policies.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { waitUntil } from "./support/wait.ts";
import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import packageJson from "../package.json" with { type: "json" };
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { STOPPED_WELL_INSIDE_UNIT_TIMEOUT_MS } from "./support/agent-process.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const binary = path.join(repoRoot, "dist", "edgeplug");
const configDir = path.join(repoRoot, "config");

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs dist/edgeplug the way `env -i` would: no environment variables, from `cwd`. */
function runBinary(args: string[], cwd: string): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { cwd, env: {}, encoding: "utf8", timeout: 30_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") return reject(error);
      resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

/** Writes dir/policy.yaml as a user would: watch dir/registry, defaults elsewhere; `apiSocket` null for none. */
function writeBarePolicy(dir: string, apiSocket: string | null): string {
  const policy = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policy,
    [
      "version: 1",
      "watch:",
      `  - path: ${dir}/registry`,
      "devicePlugins: { registrationSocket: null }",
      "podResources: { socket: null }",
      `checkpoint: { path: ${dir}/state/checkpoint }`,
      `api: { socket: ${apiSocket ?? "null"}, metrics: null }`,
      "",
    ].join("\n"),
  );
  return policy;
}

test("dist/edgeplug exists (npm run build) and is an ELF executable", () => {
  assert.ok(fs.existsSync(binary), `${binary} is missing: run npm run build`);
  const header = Buffer.alloc(4);
  const fd = fs.openSync(binary, "r");
  try {
    fs.readSync(fd, header, 0, 4, 0);
  } finally {
    fs.closeSync(fd);
  }
  assert.deepEqual([...header], [0x7f, 0x45, 0x4c, 0x46], "ELF magic");
  assert.ok((fs.statSync(binary).mode & 0o111) !== 0, "executable bits");
});

test("env -i dist/edgeplug version from an empty directory prints the documented line naming Node 24", async (t) => {
  const result = await runBinary(["version"], tempDir(t));
  assert.equal(result.code, 0, result.stderr);
  const version = packageJson.version.replaceAll(".", "\\.");
  assert.match(result.stdout, new RegExp(`^edgeplug ${version} node v24\\.\\d+\\.\\d+ ${process.platform}-${process.arch} [0-9a-f]{4,40}\\n$`));
  assert.equal(result.stderr, "", "no experimental-feature warning or other noise");
});

test("version --verbose shows node:sea's isSea() is true inside the executable", async (t) => {
  const result = await runBinary(["version", "--verbose"], tempDir(t));
  assert.equal(result.code, 0, result.stderr);
  const lines = result.stdout.trimEnd().split("\n");
  assert.ok(lines.includes("sea: true"), result.stdout);
  assert.ok(lines.includes(`executable: ${binary}`), result.stdout);
});

test("the executable validates every policy in config/ (--offline: they are examples for other hosts)", { concurrency: true }, async (t) => {
  const cwd = tempDir(t);
  const files = fs.readdirSync(configDir).filter((name) => name.endsWith(".yaml"));
  assert.ok(files.includes("dev.yaml"));
  await Promise.all(
    files.map((file) =>
      t.test(file, async () => {
        const result = await runBinary(["validate", "--offline", "--config", path.join(configDir, file)], cwd);
        assert.equal(result.code, 0, result.stderr);
        assert.equal(result.stdout, "ok\n");
      })
    ),
  );
});

test("the executable rejects a bad policy with exit 2 and a located error", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "bad.yaml");
  fs.writeFileSync(file, "version: 1\nwatch:\n  - path: /var/lib/kubelet/plugins_registry\nreconcile:\n  resync: fast\n");
  const result = await runBinary(["validate", "--config", file], dir);
  assert.equal(result.code, 2);
  assert.equal(result.stdout, "");
  assert.match(result.stderr, new RegExp(`^${file.replaceAll(".", "\\.")}:5:11: reconcile\\.resync: .*"fast"`, "m"));
});

test("the executable answers --help and bad usage like the source", async (t) => {
  const cwd = tempDir(t);
  const [help, unknown] = await Promise.all([runBinary(["--help"], cwd), runBinary(["frobnicate"], cwd)]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^Usage: edgeplug /);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown command "frobnicate"/);
});

test("the executable runs one reconcile pass over an empty registration directory", async (t) => {
  const dir = tempDir(t);
  const policy = writeBarePolicy(dir, null);
  const result = await runBinary(["run", "--config", policy, "--reconcile-once", "--timeout", "2s", "--output", "json"], dir);
  assert.equal(result.code, 0, result.stderr);
  const report = JSON.parse(result.stdout);
  assert.equal(report.ok, true);
  assert.deepEqual(report.plugins, []);
  assert.ok(fs.statSync(path.join(dir, "registry")).isDirectory(), "the watched directory was created");
});

/** Resolves once `check()` is true; fails after `timeoutMs`. For filesystem-visible state only. */
test("the executable's agent stops on SIGTERM by itself with exit 0, well inside the unit's stop timeout, and removes its API socket", async (t) => {
  const dir = tempDir(t);
  const apiSocket = path.join(dir, "api.sock");
  const policy = writeBarePolicy(dir, apiSocket);
  const agent = spawn(binary, ["run", "--config", policy], { cwd: dir, env: {}, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  agent.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = once(agent, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  killAfter(t, agent);

  await waitUntil(() => fs.existsSync(apiSocket) || agent.exitCode !== null, "the API socket", 10_000);
  assert.equal(agent.exitCode, null, `the agent exited early: ${stderr}`);
  const stoppedAt = performance.now();
  agent.kill("SIGTERM");
  const [code, signal] = await exited;
  const stopMs = performance.now() - stoppedAt;
  assert.equal(signal, null, "it exits by itself, not killed by the signal");
  assert.equal(code, 0, stderr);
  assert.ok(stopMs < STOPPED_WELL_INSIDE_UNIT_TIMEOUT_MS, `exited ${Math.round(stopMs)} ms after SIGTERM: near the unit's stop timeout`);
  assert.doesNotMatch(stderr, /open handles kept the process alive/, "nothing left open held the process after the stop");
  assert.equal(fs.existsSync(apiSocket), false, "the API socket is removed");
});

test("validate fails on what would stop run on this host (a missing socketGroup, a directory that cannot be created, a socket path too long); --offline checks the policy only", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "file"), "");
  const file = path.join(dir, "host.yaml");
  const longSocket = path.join(dir, "d".repeat(100), "api.sock");
  fs.writeFileSync(
    file,
    [
      "version: 1",
      "watch:",
      `  - path: ${dir}/registry`,
      `  - path: ${dir}/file/registry`,
      "devicePlugins: { registrationSocket: null }",
      `checkpoint: { path: ${dir}/state/checkpoint }`,
      `api: { socket: ${longSocket}, socketGroup: no-such-group-edgeplug, metrics: null }`,
      "",
    ].join("\n"),
  );
  const online = await runBinary(["validate", "--config", file], dir);
  assert.equal(online.code, 2, online.stderr);
  assert.equal(online.stdout, "");
  assert.deepEqual(online.stderr.trimEnd().split("\n"), [
    `${file}: on this host: api.socketGroup: no group named "no-such-group-edgeplug" in /etc/group`,
    `${file}: on this host: api.socket: ${longSocket} is too long for a unix socket path (at most 107 bytes, and the directory's path 13 bytes less)`,
    `${file}: on this host: watch[1].path: ${dir}/file/registry cannot be created: ${dir}/file is not a directory`,
  ]);
  const offline = await runBinary(["validate", "--offline", "--config", file], dir);
  assert.equal(offline.code, 0, offline.stderr);
  assert.equal(offline.stdout, "ok\n");
  // What validate said is what run meets.
  const run = await runBinary(["run", "--config", file], dir);
  assert.equal(run.code, 1);
  assert.match(run.stderr, /"msg":"cannot start","error":"(api\.socketGroup: no group named \\"no-such-group-edgeplug\\"|cannot create watch directory)/);
});

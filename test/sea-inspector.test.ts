/**
 * The shipped executable (dist/edgeplug) runs as root: it must never open the
 * Node inspector because of a signal (SIGUSR1), an inspector flag on its command
 * line, or NODE_OPTIONS in its environment. Only the documented debug switch,
 * `--node-options=...` as the first argument, may open it (docs/install.md).
 *
 * Listeners are found through the process's own descriptors (/proc/PID/fd ->
 * socket inodes -> /proc/net/tcp{,6} rows in LISTEN state), so an unrelated
 * process on this machine that uses port 9229 cannot fail or fool the test.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { waitUntil } from "./support/wait.ts";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const binary = path.join(repoRoot, "dist", "edgeplug");
const INSPECTOR_DEFAULT_PORT = 9229;
const TCP_LISTEN = "0A";

/** TCP ports the process `pid` listens on (IPv4 and IPv6). */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      const match = /^socket:\[(\d+)\]$/.exec(target);
      if (match) inodes.add(match[1]!);
    } catch {
      // the descriptor closed between readdir and readlink
    }
  }
  const ports: number[] = [];
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const row of fs.readFileSync(table, "utf8").split("\n").slice(1)) {
      const fields = row.trim().split(/\s+/);
      if (fields.length < 10 || fields[3] !== TCP_LISTEN || !inodes.has(fields[9]!)) continue;
      ports.push(Number.parseInt(fields[1]!.split(":")[1]!, 16));
    }
  }
  return ports;
}

/** Resolves once `check()` is true; fails after `timeoutMs`. For state visible in /proc or the filesystem only. */
/** Starts a child, kills it after the test, and keeps its stderr for messages. */
function start(t: { after(fn: () => void): void }, file: string, args: string[], env: NodeJS.ProcessEnv, cwd: string) {
  const child = spawn(file, args, { cwd, env, stdio: ["ignore", "ignore", "pipe"] });
  const output = { stderr: "" };
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (output.stderr += chunk));
  killAfter(t, child);
  return { child, output };
}

/** A policy that binds no TCP port of its own (metrics off), with an API socket whose file says "running". */
function agentPolicy(dir: string): { policy: string; apiSocket: string } {
  const apiSocket = path.join(dir, "api.sock");
  const policy = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policy,
    `version: 1\nwatch:\n  - path: ${dir}/registry\ndevicePlugins: { registrationSocket: null }\n` +
      "podResources: { socket: null }\n" +
      `checkpoint: { path: ${dir}/state/checkpoint }\napi: { socket: ${apiSocket}, metrics: null }\n`,
  );
  return { policy, apiSocket };
}

async function startAgent(t: { after(fn: () => void): void }, dir: string, env: NodeJS.ProcessEnv, extraArgs: string[] = []) {
  const { policy, apiSocket } = agentPolicy(dir);
  const agent = start(t, binary, [...extraArgs, "run", "--config", policy], env, dir);
  await waitUntil(() => fs.existsSync(apiSocket) || agent.child.exitCode !== null, "the agent's API socket", 15_000);
  assert.equal(agent.child.exitCode, null, `the agent exited early: ${agent.output.stderr}`);
  return agent;
}

function alive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

test("SIGUSR1 opens no inspector in the executable, and the agent keeps running", async (t) => {
  const dir = tempDir(t);
  // NODE_OPTIONS asks for a random inspector port: were it honoured, SIGUSR1 would open it there.
  const agent = await startAgent(t, dir, { NODE_OPTIONS: "--inspect-port=0" });
  // The control: the same Node 24 without the executable's settings opens its inspector on SIGUSR1.
  const nodeBinary = path.join(repoRoot, "node_modules", "node", "bin", "node");
  // It says "ready" once its program runs: before that, Node has no SIGUSR1 handler and the signal kills it.
  const control = start(t, nodeBinary, ["--inspect-port=0", "-e", "setInterval(() => {}, 1000); console.error('ready')"], {}, dir);
  await waitUntil(() => control.output.stderr.includes("ready") || control.child.exitCode !== null, "the control", 15_000);

  agent.child.kill("SIGUSR1");
  control.child.kill("SIGUSR1");
  await waitUntil(() => listeningPorts(control.child.pid!).length > 0, "the control's inspector to open", 15_000);

  assert.ok(alive(agent.child), `SIGUSR1 stopped the agent: ${agent.output.stderr}`);
  assert.deepEqual(listeningPorts(agent.child.pid!), [], "the agent listens on no TCP port after SIGUSR1");
  assert.doesNotMatch(agent.output.stderr, /Debugger listening/);
  // Still serving: `status` through its API socket answers.
  const status = await runBinary(["status", "--api", path.join(dir, "api.sock"), "--output", "json"], dir);
  assert.equal(status.code, 0, status.stderr);
});

test("NODE_OPTIONS=--inspect in the environment opens nothing on 9229", async (t) => {
  const dir = tempDir(t);
  // Node opens an inspector asked for by flag before the first line of the program runs,
  // so it would already listen once the agent's API socket exists.
  const agent = await startAgent(t, dir, { NODE_OPTIONS: "--inspect" });
  const ports = listeningPorts(agent.child.pid!);
  assert.ok(!ports.includes(INSPECTOR_DEFAULT_PORT), `the agent listens on ${ports.join(", ")}`);
  assert.deepEqual(ports, []);
  assert.doesNotMatch(agent.output.stderr, /Debugger listening/);
});

test("an inspector flag on the command line is bad usage, not a Node option", async (t) => {
  const dir = tempDir(t);
  for (const flag of ["--inspect", "--inspect-brk=127.0.0.1:0"]) {
    const result = await runBinary([flag, "version"], dir);
    assert.equal(result.code, 2, `${flag}: ${result.stderr}`);
    assert.doesNotMatch(result.stderr, /Debugger listening/);
  }
});

test("the documented debug switch --node-options opens the inspector, and says so on stderr", async (t) => {
  const dir = tempDir(t);
  const agent = await startAgent(t, dir, {}, ["--node-options=--inspect=127.0.0.1:0"]);
  assert.equal(listeningPorts(agent.child.pid!).length, 1, "one inspector listener");
  assert.match(agent.output.stderr, /inspector is open/);
});

function runBinary(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { cwd, env: {}, encoding: "utf8", timeout: 30_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") return reject(error);
      resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

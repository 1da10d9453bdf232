/**
 * The shipped executable runs as root, and its environment is untrusted: the
 * variables through which Node, libuv or a bundled library would take
 * orders from it are ignored (src/platform/runtime-environment.ts), those
 * the runtime read at start by restarting the same process without them.
 * Each test shows what the executable before this did with them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import path from "node:path";
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { requireBinary, runEdgeplug, startEdgeplug, writePolicy } from "./support/agent-process.ts";
import { hostTarget } from "../scripts/targets.ts";
import { LIBRARY_VARIABLES } from "../src/platform/runtime-environment.ts";

const WARNING = /^edgeplug: warning: ignoring ([A-Z0-9_, ]+) from the environment: /m;

/** Names the executable's warning lists, in its order; [] without a warning. */
function warnedAbout(stderr: string): string[] {
  const lines = stderr.split("\n").filter((line) => WARNING.test(line));
  assert.ok(lines.length <= 1, `one warning at most:\n${stderr}`);
  return lines.length === 0 ? [] : WARNING.exec(lines[0]!)![1]!.split(", ");
}

/** Every regular file under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((entry) => fs.statSync(path.join(dir, entry)).isFile());
}

/** Rejects naming `what` unless `event` comes first; for an event the old executable never emitted. */
function before<T>(event: Promise<T>, what: string, timeoutMs = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([event, deadline]).finally(() => clearTimeout(timer));
}

test("NODE_V8_COVERAGE: nothing is written into the directory it names, and the warning names it", async (t) => {
  const dir = tempDir(t);
  const coverage = path.join(dir, "coverage");
  fs.mkdirSync(coverage);
  const result = await runEdgeplug(["version"], { cwd: dir, env: { NODE_V8_COVERAGE: coverage } });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /^edgeplug \S+ node v24\./);
  assert.deepEqual(fs.readdirSync(coverage), [], "no coverage file");
  assert.deepEqual(warnedAbout(result.stderr), ["NODE_V8_COVERAGE"]);
});

test("NODE_DEBUG=net,http2: neither the agent nor a client prints Node's debug lines", async (t) => {
  const dir = tempDir(t);
  const policy = writePolicy(dir);
  const env = { NODE_DEBUG: "net,http2", PATH: process.env.PATH ?? "/usr/bin:/bin" };
  const agent = startEdgeplug(["run", "--config", policy.path], { cwd: dir, env });
  killAfter(t, agent.child);
  await agent.waitForLog("edgeplug running");
  // The agent restarted itself in place: the process systemd would know runs without the variable.
  const environ = fs.readFileSync(`/proc/${agent.child.pid}/environ`, "utf8").split("\0");
  assert.ok(!environ.some((entry) => entry.startsWith("NODE_DEBUG=")), "the running agent's environment has no NODE_DEBUG");
  const status = await runEdgeplug(["status", "--api", policy.apiSocket], { cwd: dir, env });
  assert.equal(status.code, 0, status.stderr);
  assert.equal(await agent.terminate(), 0, agent.stderr());
  for (const [who, stderr] of [["agent", agent.stderr()], ["status", status.stderr]] as const) {
    assert.doesNotMatch(stderr, /^(NET|HTTP2) \d+: /m, `${who} printed Node's debug lines`);
    assert.deepEqual(warnedAbout(stderr), ["NODE_DEBUG"], who);
  }
});

test("the warning names each ignored variable once; the result and the compile cache's directory stay clean", async (t) => {
  const dir = tempDir(t);
  const cache = path.join(dir, "compile-cache");
  const policy = writePolicy(dir);
  const env = { NODE_COMPILE_CACHE: cache, UV_THREADPOOL_SIZE: "200", LOG_TOKENS: "1", TZ: "UTC" };
  const result = await runEdgeplug(["validate", "--config", policy.path], { cwd: dir, env });
  assert.equal(result.code, 0, result.stderr);
  // LOG_TOKENS made the yaml library print the policy's tokens on stdout.
  assert.equal(result.stdout, "ok\n");
  assert.deepEqual(warnedAbout(result.stderr), ["NODE_COMPILE_CACHE", "UV_THREADPOOL_SIZE", "LOG_TOKENS"]);
  assert.equal(result.stderr.trimEnd().split("\n").length, 1, `the warning is all it says:\n${result.stderr}`);
  // Node creates the cache's version directory before any JavaScript runs; it must stay empty.
  assert.deepEqual(filesUnder(cache), []);
});

test("UV_THREADPOOL_SIZE does not size the agent's thread pool", async (t) => {
  const dir = tempDir(t);
  const policy = writePolicy(dir);
  const agent = startEdgeplug(["run", "--config", policy.path], { cwd: dir, env: { UV_THREADPOOL_SIZE: "128" } });
  killAfter(t, agent.child);
  await agent.waitForLog("edgeplug running");
  const threads = Number(/^Threads:\s+(\d+)$/m.exec(fs.readFileSync(`/proc/${agent.child.pid}/status`, "utf8"))![1]);
  // The unit allows 64 tasks (TasksMax=64); 128 pool threads would be started at the first file operation.
  assert.ok(threads < 32, `${threads} threads`);
  assert.equal(await agent.terminate(), 0, agent.stderr());
});

test("NODE_CHANNEL_FD with NODE_UNIQUE_ID: the agent serves its own sockets and closes the IPC channel", async (t) => {
  const dir = tempDir(t);
  const policy = writePolicy(dir);
  // Node's own child_process sets NODE_CHANNEL_FD for the "ipc" descriptor; NODE_UNIQUE_ID
  // made the old executable a cluster worker that asked this end for its API socket and waited.
  const child = spawn(requireBinary(), ["run", "--config", policy.path], {
    cwd: dir,
    env: { NODE_UNIQUE_ID: "1" },
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  killAfter(t, child);
  const asked: unknown[] = [];
  child.on("internalMessage", (message: { act?: string }) => {
    if (message.act !== "online") asked.push(message); // "online" goes out before any JavaScript of edgeplug runs
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  await before(once(child, "disconnect"), "the executable to close its end of the IPC channel");
  await before(
    new Promise<void>((resolve, reject) => {
      const check = () => (stderr.includes('"msg":"edgeplug running"') ? resolve() : child.exitCode !== null && reject(new Error(stderr)));
      child.stderr!.on("data", check);
      child.once("exit", check);
      check();
    }),
    `the agent to run (stderr so far: ${stderr})`,
  );
  assert.deepEqual(asked, [], "it asked the other end of the channel for nothing");
  const status = await runEdgeplug(["status", "--api", policy.apiSocket], { cwd: dir });
  assert.equal(status.code, 0, status.stderr);
  assert.deepEqual(warnedAbout(stderr), ["NODE_CHANNEL_FD", "NODE_UNIQUE_ID"]);
  child.kill("SIGTERM");
  assert.deepEqual(await once(child, "exit"), [0, null], stderr);
});

test("the debug switch --node-options survives the restart", async (t) => {
  const dir = tempDir(t);
  const result = await runEdgeplug(["--node-options=--no-opt", "version", "--verbose"], { cwd: dir, env: { NODE_DEBUG: "timer" } });
  assert.equal(result.code, 0, result.stderr);
  // V8 rejects the build's code cache under other V8 flags: the restarted runtime had --no-opt.
  assert.ok(result.stdout.split("\n").includes("code cache: rejected by V8 (other V8 flags than the build's)"), result.stdout);
  assert.deepEqual(warnedAbout(result.stderr), ["NODE_DEBUG"]);
  assert.doesNotMatch(result.stderr, /^TIMER \d+: /m);
});

test("every environment variable the bundle reads by name is edgeplug's own or one it ignores", () => {
  // The bundle scripts/build.ts made for this machine's executable; names read through a
  // computed key (process.env[name]) are not found this way.
  const bundle = fs.readFileSync(new URL(`../dist/build-${hostTarget().name}/edgeplug.cjs`, import.meta.url), "utf8");
  const read = new Set([...bundle.matchAll(/\benv\.([A-Z][A-Z0-9_]*)\b/g)].map((match) => match[1]!));
  const edgeplugOwn = ["NOTIFY_SOCKET"];
  const known = new Set([...edgeplugOwn, ...LIBRARY_VARIABLES.map(({ name }) => name)]);
  assert.deepEqual([...read].filter((name) => !known.has(name)), [], "a library reads these: add them to LIBRARY_VARIABLES");
  assert.ok(read.has("NOTIFY_SOCKET"), "the scan finds edgeplug's own");
});

/**
 * Runs the built executable (dist/edgeplug) as a child process for
 * end-to-end tests: a policy file in a temp dir, stderr parsed as JSON log
 * lines, and helpers that wait for what the agent says or does.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { makeShortTempDir, removeDir, tempDir } from "./temp-dir.ts";
import type { CleansUpAfter } from "./temp-dir.ts";
import { waitUntil } from "./wait.ts";
import { killAfter } from "./child-cleanup.ts";

export const EDGEPLUG_BINARY = fileURLToPath(new URL("../../dist/edgeplug", import.meta.url));

/**
 * A clean stop is checked against the stop timeout of the packaged unit (docs/install.md: TimeoutStopSec=10s, then
 * systemd kills the agent): the agent must have exited by itself well inside it, in under a third of it. That tells
 * "stopped on SIGTERM" from "held until killed", and is never near what a loaded machine takes; the agent's own 2 s
 * (docs/commands.md) is the sum of its stop graces, which the stop only waits for with work still in flight.
 */
export const STOPPED_WELL_INSIDE_UNIT_TIMEOUT_MS = 10_000 / 3;

/** Fails with a clear message when the executable has not been built. */
export function requireBinary(): string {
  if (!fs.existsSync(EDGEPLUG_BINARY)) {
    throw new Error(`${EDGEPLUG_BINARY} is missing: run "npm run build" first (npm test does)`);
  }
  return EDGEPLUG_BINARY;
}

/**
 * A short temp dir (unix socket paths must stay under 108 bytes), removed by
 * the returned cleanup; for code without a test context (tests use tempDir).
 */
export function shortTempDir(prefix = "ep-"): { dir: string; cleanup: () => void } {
  const dir = makeShortTempDir(prefix);
  return { dir, cleanup: () => removeDir(dir) };
}

export interface TestPolicyFile {
  path: string;
  registry: string;
  apiSocket: string;
}

/** Sections of the policy writePolicy writes: `handlers`, `reconcile` and `security` are indented YAML bodies. */
export interface PolicyFileOptions {
  handlers?: string;
  reconcile?: string;
  security?: string;
  /** false: no API socket. */
  api?: boolean;
}

/** Writes a policy for an agent living entirely under `dir`, the given sections replacing the defaults. */
export function writePolicy(dir: string, options: PolicyFileOptions = {}): TestPolicyFile {
  const registry = path.join(dir, "registry");
  const apiSocket = path.join(dir, "api.sock");
  const file = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    file,
    [
      "version: 1",
      "nodeName: e2e-node",
      "watch:",
      `  - path: ${registry}`,
      "handlers:",
      options.handlers ??
        ["  DevicePlugin: {}", "  acme.io/Sensor:", "    kind: generic", "    versions: [v1]"].join("\n"),
      "devicePlugins:",
      "  registrationSocket: null",
      "podResources: { socket: null }",
      "checkpoint:",
      `  path: ${path.join(dir, "state", "kubelet_internal_checkpoint")}`,
      "reconcile:",
      options.reconcile ?? "  backoff: { initial: 50ms, max: 500ms }",
      ...(options.security === undefined ? [] : ["security:", options.security]),
      "api:",
      `  socket: ${options.api === false ? "null" : apiSocket}`,
      "  metrics: null",
      "log: { level: info, format: json }",
      "",
    ].join("\n"),
  );
  return { path: file, registry, apiSocket };
}

export interface AgentProcess {
  child: ChildProcess;
  /** Log records so far (stderr JSON lines). */
  logs(): Array<Record<string, unknown>>;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first log record whose `msg` is `message` and for which `match` holds (already logged or not). */
  waitForLog(message: string, timeoutMs?: number, match?: (record: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  /** Resolves with the exit code. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, SIGKILL if it is still running `killAfterMs` later; resolves with the exit code. */
  terminate(killAfterMs?: number): Promise<number | null>;
}

/** Starts `dist/edgeplug ...args` (or another build's executable: `binary`, for paired benchmarks). */
export function startEdgeplug(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; binary?: string } = {}): AgentProcess {
  const child = spawn(options.binary ?? requireBinary(), args, {
    cwd: options.cwd,
    env: options.env ?? { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const records: Array<Record<string, unknown>> = [];
  const waiters = new Set<() => void>();
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  let unparsed = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
    // Only complete lines are parsed, each once: a busy agent logs thousands.
    const lines = (unparsed + chunk).split("\n");
    unparsed = lines.pop()!;
    for (const line of lines) {
      if (!line.startsWith("{")) continue;
      try {
        records.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // not a log record (e.g. a usage message)
      }
    }
    for (const wake of waiters) wake();
  });
  const exited = once(child, "close").then(([code, signal]) => {
    for (const wake of waiters) wake();
    return { code: code as number | null, signal: signal as NodeJS.Signals | null };
  });
  let done = false;
  void exited.then(() => (done = true));
  return {
    child,
    logs: () => [...records],
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    async terminate(killAfterMs = 3000) {
      if (done) return (await exited).code;
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
      const { code } = await exited;
      clearTimeout(killer);
      return code;
    },
    waitForLog(message, timeoutMs = 10_000, match = () => true) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = records.find((record) => record.msg === message && match(record));
          if (found) {
            finish();
            resolve(found);
          } else if (done) {
            finish();
            reject(new Error(`edgeplug exited before logging ${JSON.stringify(message)}; stderr:\n${stderr}`));
          }
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`timed out waiting for log ${JSON.stringify(message)}; stderr:\n${stderr}`));
        }, timeoutMs);
        const finish = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/**
 * A policy (see writePolicy) in a fresh temp dir removed after the test `t`,
 * with its watch dir created already, so plugins can listen before the agent starts.
 */
export function policyWithRegistry(t: CleansUpAfter, policyOptions: PolicyFileOptions = {}): TestPolicyFile {
  const policy = writePolicy(tempDir(t), policyOptions);
  fs.mkdirSync(policy.registry, { recursive: true });
  return policy;
}

/**
 * Starts `dist/edgeplug run` on a policy (see writePolicy) in a fresh temp
 * dir, and resolves once it logs "edgeplug running". After the test `t` the
 * agent is killed (if still running) and the dir removed.
 */
export async function startDaemon(
  t: CleansUpAfter,
  policyOptions: PolicyFileOptions = {},
): Promise<{ policy: TestPolicyFile; agent: AgentProcess }> {
  const policy = writePolicy(tempDir(t), policyOptions);
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await agent.waitForLog("edgeplug running");
  return { policy, agent };
}

/** Runs `dist/edgeplug ...args` to completion. */
export async function runEdgeplug(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const agent = startEdgeplug(args, options);
  const { code } = await agent.exited;
  return { code, stdout: agent.stdout(), stderr: agent.stderr() };
}

/** Open descriptors of a process, by /proc. */
export function openDescriptors(pid: number): number {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

/** Resolves once `target` exists (state only the filesystem shows, so it is polled, with a deadline). */
export async function waitForPath(target: string, timeoutMs = 10_000): Promise<void> {
  await waitUntil(() => fs.existsSync(target), `${target} to exist`, timeoutMs);
}

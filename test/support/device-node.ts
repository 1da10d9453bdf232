/**
 * An edgeplug node for end-to-end tests of device plugins: a policy under a
 * fresh temp dir with both registration paths (a watched directory and
 * kubelet.sock in a device-plugins directory) and a checkpoint, and the
 * built executable run on it.
 *
 * The node is itself where its processes register their cleanup
 * (`startExample(node, ...)`, `watchAgent(node, ...)`): after the test they
 * are stopped, newest first, and only then is the directory removed, so no
 * agent writing its checkpoint and no plugin re-creating its socket races
 * the removal.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import type { TestContext } from "node:test";
import type { StatusJson } from "../../src/api/status.ts";
import { type AgentProcess, runEdgeplug, startEdgeplug } from "./agent-process.ts";
import { type CleansUpAfter, makeShortTempDir, removeDir } from "./temp-dir.ts";

export interface DeviceNode extends CleansUpAfter {
  dir: string;
  policy: string;
  registry: string;
  pluginsDir: string;
  apiSocket: string;
  /** podResources.socket, in a directory the agent creates. */
  podResourcesSocket: string;
}

/**
 * A fresh short temp dir whose cleanups (registered with `after`) run
 * after the test `t`, newest first and each awaited, before the dir is removed.
 */
export function scopedTempDir(t: TestContext): CleansUpAfter & { dir: string } {
  const dir = makeShortTempDir();
  const cleanups: Array<() => unknown> = [];
  t.after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    removeDir(dir);
  });
  return { dir, after: (cleanup) => void cleanups.push(cleanup) };
}

/** A policy for an agent under a fresh temp dir with both device-plugin registration paths and a checkpoint. */
export function deviceNode(t: TestContext): DeviceNode {
  const { dir, after } = scopedTempDir(t);
  const node: DeviceNode = {
    after,
    dir,
    policy: path.join(dir, "policy.yaml"),
    registry: path.join(dir, "registry"),
    pluginsDir: path.join(dir, "dp"),
    apiSocket: path.join(dir, "api.sock"),
    podResourcesSocket: path.join(dir, "pod-resources", "kubelet.sock"),
  };
  fs.writeFileSync(
    node.policy,
    [
      "version: 1",
      "nodeName: e2e-node",
      "watch:",
      `  - path: ${node.registry}`,
      "handlers:",
      "  DevicePlugin: {}",
      "devicePlugins:",
      `  registrationSocket: ${path.join(node.pluginsDir, "kubelet.sock")}`,
      "  gracePeriod: 5m",
      "checkpoint:",
      `  path: ${path.join(node.pluginsDir, "kubelet_internal_checkpoint")}`,
      "podResources:",
      `  socket: ${node.podResourcesSocket}`,
      "reconcile:",
      "  backoff: { initial: 50ms, max: 500ms }",
      "api:",
      `  socket: ${node.apiSocket}`,
      "  metrics: null",
      "log: { level: info, format: json }",
      "",
    ].join("\n"),
  );
  return node;
}

/** Starts `dist/edgeplug run` on the node's policy; resolves once it runs. Killed (and awaited) after the test. */
export async function startAgent(node: DeviceNode): Promise<AgentProcess> {
  const agent = startEdgeplug(["run", "--config", node.policy]);
  node.after(() => {
    agent.child.kill("SIGKILL");
    return agent.exited;
  });
  await agent.waitForLog("edgeplug running");
  return agent;
}

/**
 * Allocations as a restarted agent shows them: a plain owner restored from
 * the checkpoint has no age (the kubelet's format keeps no time).
 */
export function restoredPlain<T extends { allocatedAt: string | null; ageSeconds: string | null }>(allocations: T[]): T[] {
  return allocations.map((allocation) => ({ ...allocation, allocatedAt: null, ageSeconds: null }));
}

/** `edgeplug status --output json`, whatever the verdict. */
export async function statusJson(apiSocket: string): Promise<StatusJson> {
  const result = await runEdgeplug(["status", "--api", apiSocket, "--output", "json", "--exit-zero"]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout) as StatusJson;
}

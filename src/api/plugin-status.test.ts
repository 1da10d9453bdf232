import assert from "node:assert/strict";
import { test } from "node:test";
import { createLogger } from "../log/logger.ts";
import { PluginStatusCache } from "./plugin-status.ts";

const socket = "/var/lib/kubelet/plugins_registry/hostpath.csi.k8s.io-reg.sock";
const inode = "7:42";
const refused = "RegisterPlugin error -- plugin registration failed with err: rpc error: code = Unavailable desc = node not ready";
const stale = `RegisterPlugin error -- dial failed at socket ${socket}, err: connection refused (stale socket: no plugin is listening)`;
const info = { type: "CSIPlugin", name: "hostpath.csi.k8s.io", endpoint: "/csi/csi.sock", versions: ["1.0.0"] };

function attempt(cache: PluginStatusCache, outcome: { state: "failed" | "stale" | "registered"; reason: "register" | "stale" | null; error: string | null }) {
  cache.attemptEnded({ socket, inode, info: outcome.state === "stale" ? null : info, endedAt: Date.now(), durationMs: 1, ...outcome });
  return cache.plugins()[0]!;
}

test("a registrar that exits after a refusal leaves a stale socket, and status still names what it was refused for", () => {
  const cache = new PluginStatusCache({ log: createLogger({ level: "error", write: () => {} }) });
  cache.socketChanged({ kind: "added", socket, current: { socket, inode, discoveredAt: new Date() } });
  assert.equal(attempt(cache, { state: "failed", reason: "register", error: refused }).error, refused);
  const after = attempt(cache, { state: "stale", reason: "stale", error: stale });
  assert.equal(after.state, "stale");
  assert.equal(after.error, `${stale} (before that: ${refused})`);
  assert.equal(attempt(cache, { state: "stale", reason: "stale", error: stale }).error, after.error, "the same while it stays stale");
  // Registered once, a later stale socket has nothing earlier to name.
  attempt(cache, { state: "registered", reason: null, error: null });
  assert.equal(attempt(cache, { state: "stale", reason: "stale", error: stale }).error, stale);
});

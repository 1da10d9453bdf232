/**
 * The policy loader's results: every default filled in from the schema,
 * given values kept, the embedded default and the files in config/, and
 * which policy a command resolves to.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { EMBEDDED_DEFAULT_SOURCE } from "./default-policy.ts";
import { PolicyError } from "./errors.ts";
import { loadDefaultPolicy, loadPolicyFile, parsePolicy, resolvePolicy } from "./load.ts";
import type { Policy } from "./types.ts";
import { minimal } from "../../test/support/policy-text.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const configDir = path.join(repoRoot, "config");
const policyDoc = path.join(repoRoot, "docs", "policy.md");

function withoutSource(policy: Policy): Omit<Policy, "source"> {
  const { source: _source, ...rest } = policy;
  return rest;
}

test("a minimal policy gets every default", () => {
  const policy = parsePolicy(minimal, "minimal.yaml");
  const uid = process.getuid?.() ?? 0;
  assert.deepEqual(policy, {
    version: 1,
    nodeName: os.hostname().trim().toLowerCase(),
    watch: [{ path: "/var/lib/kubelet/plugins_registry", recursive: true, types: null }],
    handlers: new Map([
      ["DevicePlugin", { type: "DevicePlugin", kind: "builtin", versions: null, allow: ["*"], deny: [] }],
      ["CSIPlugin", { type: "CSIPlugin", kind: "builtin", versions: null, allow: ["*"], deny: [] }],
      ["DRAPlugin", { type: "DRAPlugin", kind: "builtin", versions: null, allow: ["*"], deny: [] }],
    ]),
    devicePlugins: { registrationSocket: "/var/lib/kubelet/device-plugins/kubelet.sock", gracePeriodMs: 300_000, topologyPolicy: "none", removeSocketsAtStart: true },
    podResources: { socket: "/var/lib/kubelet/pod-resources/kubelet.sock" },
    checkpoint: { path: "/var/lib/edgeplug/kubelet_internal_checkpoint" },
    reconcile: {
      resyncMs: 10_000,
      backoff: { initialMs: 500, maxMs: 122_000 },
      timeouts: { dialMs: 10_000, getInfoMs: 1_000, notifyMs: 5_000 },
      liveness: { intervalMs: 0 },
    },
    security: { socketOwners: uid === 0 ? [0] : [0, uid], maxPlugins: 1024, maxDevicesPerResource: 100_000 },
    api: { socket: "/run/edgeplug/api.sock", socketGroup: null, metrics: null },
    log: { level: "info", format: "json" },
    fleet: null,
    source: "minimal.yaml",
  });
});

test("given values replace the defaults; a socketOwners list is exact; null disables sockets", () => {
  const policy = parsePolicy(
    `version: 1
nodeName: node-7
watch:
  - path: /srv/plugins//registry/
    recursive: false
    types: [example.io/Greeter]
  - path: /srv/other
handlers:
  example.io/Greeter: { kind: generic, versions: [v1, v2], allow: ["example.io/*"], deny: ["*-beta"] }
  "42": { kind: generic }
  DevicePlugin:
devicePlugins: { registrationSocket: null, gracePeriod: "0", removeSocketsAtStart: false, topologyPolicy: single-numa-node }
podResources: { socket: null }
reconcile: { resync: 1h, backoff: { initial: 1.5s, max: 1m }, timeouts: { dial: 250ms, getInfo: 2s, notify: 3s }, liveness: { interval: 30s } }
security: { socketOwners: [1000], maxPlugins: 3, maxDevicesPerResource: 8 }
api: { socket: null, socketGroup: edgeplug, metrics: "[::1]:9478" }
log: { level: debug, format: text }
`,
    "given.yaml",
  );
  assert.equal(policy.nodeName, "node-7");
  assert.deepEqual(policy.watch, [
    { path: "/srv/plugins/registry", recursive: false, types: ["example.io/Greeter"] },
    { path: "/srv/other", recursive: true, types: null },
  ]);
  assert.deepEqual([...policy.handlers.keys()], ["example.io/Greeter", "42", "DevicePlugin"], "declared order kept");
  assert.deepEqual(policy.handlers.get("example.io/Greeter"), {
    type: "example.io/Greeter",
    kind: "generic",
    versions: ["v1", "v2"],
    allow: ["example.io/*"],
    deny: ["*-beta"],
  });
  assert.deepEqual(policy.handlers.get("DevicePlugin"), {
    type: "DevicePlugin",
    kind: "builtin",
    versions: null,
    allow: ["*"],
    deny: [],
  });
  assert.deepEqual(policy.devicePlugins, { registrationSocket: null, gracePeriodMs: 0, topologyPolicy: "single-numa-node", removeSocketsAtStart: false });
  assert.deepEqual(policy.podResources, { socket: null });
  assert.deepEqual(policy.reconcile, {
    resyncMs: 3_600_000,
    backoff: { initialMs: 1500, maxMs: 60_000 },
    timeouts: { dialMs: 250, getInfoMs: 2000, notifyMs: 3000 },
    liveness: { intervalMs: 30_000 },
  });
  assert.deepEqual(policy.security, { socketOwners: [1000], maxPlugins: 3, maxDevicesPerResource: 8 });
  assert.deepEqual(policy.api, { socket: null, socketGroup: "edgeplug", metrics: "[::1]:9478" });
  assert.deepEqual(policy.log, { level: "debug", format: "text" });
});

test("handlers omitted: a dir's types may name only the three built-ins", () => {
  const policy = parsePolicy(`${minimal}    types: [DRAPlugin, CSIPlugin]\n`, "p.yaml");
  assert.deepEqual(policy.watch[0]!.types, ["DRAPlugin", "CSIPlugin"]);
});

test("the annotated example of docs/policy.md is config/example.yaml, and it validates verbatim", () => {
  const example = fs.readFileSync(path.join(configDir, "example.yaml"), "utf8");
  const doc = fs.readFileSync(policyDoc, "utf8");
  const block = /```yaml\n([\s\S]*?)```/.exec(doc.slice(doc.indexOf("\n## Example")));
  assert.ok(block, "no ```yaml block under docs/policy.md's ## Example");
  assert.equal(example, block[1], "config/example.yaml differs from the example in docs/policy.md");

  const policy = parsePolicy(example, "example.yaml");
  assert.equal(policy.nodeName, "edge-01");
  assert.deepEqual(policy.watch[0]!.types, ["CSIPlugin", "DevicePlugin", "DRAPlugin", "acme.io/Sensor"]);
  assert.deepEqual(policy.handlers.get("acme.io/Sensor"), {
    type: "acme.io/Sensor",
    kind: "generic",
    versions: ["v1"],
    allow: ["acme.io/*"],
    deny: [],
  });
  assert.deepEqual(policy.security.socketOwners, [0]);
  assert.equal(policy.api.socketGroup, "edgeplug");
  assert.equal(policy.api.metrics, "127.0.0.1:9478");
});

test("the embedded default follows docs/policy.md and equals config/default.yaml, which spells out every default", () => {
  const embedded = loadDefaultPolicy();
  assert.equal(embedded.source, EMBEDDED_DEFAULT_SOURCE);
  assert.deepEqual(
    embedded.watch.map((dir) => dir.path),
    ["/var/lib/kubelet/plugins_registry"],
  );
  assert.deepEqual([...embedded.handlers.keys()], ["DevicePlugin", "CSIPlugin", "DRAPlugin"]);
  assert.equal(embedded.devicePlugins.registrationSocket, "/var/lib/kubelet/device-plugins/kubelet.sock");
  assert.ok(embedded.checkpoint.path.startsWith("/var/lib/edgeplug/"));
  assert.equal(embedded.api.socket, "/run/edgeplug/api.sock");
  assert.equal(embedded.api.metrics, null);

  const fromFile = parsePolicy(fs.readFileSync(path.join(configDir, "default.yaml"), "utf8"), "default.yaml");
  assert.deepEqual(withoutSource(fromFile), withoutSource(embedded));
  const text = fs.readFileSync(path.join(configDir, "default.yaml"), "utf8");
  for (const key of ["recursive:", "gracePeriod:", "resync:", "initial:", "max:", "dial:", "getInfo:", "notify:", "maxPlugins:"]) {
    assert.match(text, new RegExp(`^ +${key} `, "m"), `config/default.yaml does not spell out ${key}`);
  }
});

test("every file in config/ validates", async () => {
  const files = fs.readdirSync(configDir).filter((name) => /\.ya?ml$/.test(name));
  assert.ok(files.includes("dev.yaml") && files.includes("example.yaml") && files.includes("default.yaml"), files.join());
  for (const name of files) {
    const policy = await loadPolicyFile(path.join(configDir, name));
    assert.equal(policy.source, path.join(configDir, name));
  }
});

test("config/dev.yaml runs without root: every path under /tmp/edgeplug-dev/", async () => {
  const dev = await loadPolicyFile(path.join(configDir, "dev.yaml"));
  const paths = [
    ...dev.watch.map((dir) => dir.path),
    dev.devicePlugins.registrationSocket,
    dev.checkpoint.path,
    dev.api.socket,
    dev.podResources.socket,
  ];
  for (const item of paths) assert.ok(item?.startsWith("/tmp/edgeplug-dev/"), `${item} is not under /tmp/edgeplug-dev/`);
  assert.equal(dev.devicePlugins.registrationSocket, "/tmp/edgeplug-dev/device-plugins/kubelet.sock");
  assert.equal(dev.handlers.get("example.io/Greeter")?.kind, "generic");
  assert.deepEqual(dev.handlers.get("example.io/Greeter")?.versions, ["v1"]);
  assert.deepEqual(dev.log, { level: "info", format: "text" });
  assert.equal(dev.api.metrics, "127.0.0.1:9478");
});

test("resolvePolicy: --config, else the system policy when present, else the embedded default", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ep-pol-"));
  try {
    const given = path.join(dir, "given.yaml");
    const system = path.join(dir, "system.yaml");
    fs.writeFileSync(given, "version: 1\nwatch: [{ path: /given }]\n");

    assert.equal((await resolvePolicy(given, { systemPolicyPath: system })).watch[0]!.path, "/given");
    const embedded = await resolvePolicy(undefined, { systemPolicyPath: system });
    assert.equal(embedded.source, "<embedded default>");

    fs.writeFileSync(system, "version: 1\nwatch: [{ path: /system }]\n");
    const fromSystem = await resolvePolicy(undefined, { systemPolicyPath: system });
    assert.equal(fromSystem.source, system);
    assert.equal(fromSystem.watch[0]!.path, "/system");

    // A present but invalid system policy is an error, never a silent fallback.
    fs.writeFileSync(system, "version: 1\n");
    await assert.rejects(resolvePolicy(undefined, { systemPolicyPath: system }), PolicyError);
    await assert.rejects(resolvePolicy(path.join(dir, "missing.yaml")), /cannot read/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

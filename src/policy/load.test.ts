import { test } from "node:test";
import assert from "node:assert/strict";
import console from "node:console";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { DEFAULT_POLICY_YAML, EMBEDDED_DEFAULT_SOURCE, loadDefaultPolicy } from "./default-policy.ts";
import { PolicyError, type PolicyIssue } from "./errors.ts";
import { loadPolicyFile, parsePolicy, resolvePolicy } from "./load.ts";
import type { Policy } from "./types.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const configDir = path.join(repoRoot, "config");
const badDir = path.join(repoRoot, "test", "fixtures", "policies", "bad");
const specPath = path.resolve(repoRoot, "..", "shared", "SPEC.md");

const minimal = "version: 1\nwatch:\n  - path: /var/lib/kubelet/plugins_registry\n";

/** The issues a policy text is rejected with; fails the test when it is accepted. */
function rejection(text: string, file = "policy.yaml"): PolicyError {
  try {
    parsePolicy(text, file);
  } catch (error) {
    assert.ok(error instanceof PolicyError, `expected a PolicyError, got ${String(error)}`);
    return error;
  }
  assert.fail(`the policy was accepted:\n${text}`);
}

/** `LINE:COLUMN path: message`, the form of the `# expect:` lines of the fixtures. */
function located(issue: PolicyIssue): string {
  return `${issue.line}:${issue.column} ${issue.path === "" ? "" : `${issue.path}: `}${issue.message}`;
}

function withoutSource(policy: Policy): Omit<Policy, "source"> {
  const { source: _source, ...rest } = policy;
  return rest;
}

// Each file under test/fixtures/policies/bad/ ends with `# expect: LINE:COLUMN path: message`
// lines: exactly those issues, in that order, must be reported.
const badFixtures = fs.readdirSync(badDir).filter((name) => name.endsWith(".yaml")).sort();

test("there are at least 15 distinct bad policies", () => {
  assert.ok(badFixtures.length >= 15, `only ${badFixtures.length} fixtures in ${badDir}`);
  const bodies = new Set(badFixtures.map((name) => fs.readFileSync(path.join(badDir, name), "utf8")));
  assert.equal(bodies.size, badFixtures.length);
});

for (const name of badFixtures) {
  test(`bad policy ${name} is rejected with each error located`, () => {
    const text = fs.readFileSync(path.join(badDir, name), "utf8");
    const expected = [...text.matchAll(/^# expect: (.*)$/gm)].map((match) => match[1]);
    assert.ok(expected.length > 0, `${name} has no "# expect:" line`);
    const error = rejection(text, name);
    assert.deepEqual(error.issues.map(located), expected);
    for (const issue of error.issues) {
      assert.equal(issue.file, name);
      assert.match(issue.message, /expected .+, got .+|invalid YAML: .+/);
    }
  });
}

test("a policy with three errors reports all three, each located, in file order", () => {
  const error = rejection(fs.readFileSync(path.join(badDir, "three-errors.yaml"), "utf8"), "/etc/edgeplug/policy.yaml");
  assert.deepEqual(
    error.issues.map(({ line, column, path }) => ({ line, column, path })),
    [
      { line: 4, column: 16, path: "watch[0].recursive" },
      { line: 6, column: 16, path: "devicePlugins.gracePeriod" },
      { line: 9, column: 3, path: "log.colour" },
    ],
  );
  assert.equal(
    error.message,
    [
      '/etc/edgeplug/policy.yaml:4:16: watch[0].recursive: expected true or false, got "maybe"',
      '/etc/edgeplug/policy.yaml:6:16: devicePlugins.gracePeriod: expected a duration like "30s", got "5 minutes"',
      '/etc/edgeplug/policy.yaml:9:3: log.colour: expected one of the keys level, format, got unknown key "colour"',
    ].join("\n"),
  );
});

test("errors are reported in SPEC's FILE:LINE:COLUMN: key.path: expected ..., got ... form", () => {
  const text = `${minimal}reconcile:\n  backoff:\n    initial: 1s\n    max: fast\n`;
  assert.equal(rejection(text).message, 'policy.yaml:7:10: reconcile.backoff.max: expected a duration like "30s", got "fast"');
});

test("an unknown key is located at the key, a wrong value at the value", () => {
  const error = rejection(`${minimal}security:\n  maxPlugin: 10\n  maxDevicesPerResource: lots\n`);
  assert.deepEqual(
    error.issues.map(({ line, column, path }) => ({ line, column, path })),
    [
      { line: 5, column: 3, path: "security.maxPlugin" },
      { line: 6, column: 26, path: "security.maxDevicesPerResource" },
    ],
  );
  assert.match(error.issues[0]!.message, /\(did you mean "maxPlugins"\?\)$/);
});

test("one wrong value is reported once even when it breaks two schema rules", () => {
  const error = rejection(`${minimal}log:\n  level: 3\n`);
  assert.deepEqual(error.issues.map(located), ["5:10 log.level: expected one of debug, info, warn, error, got 3"]);
});

test("a handler type with a key path containing dots and slashes is named verbatim", () => {
  const error = rejection(`${minimal}handlers:\n  acme.io/Sensor:\n    kind: generic\n    versions: v1\n`);
  assert.deepEqual(error.issues.map(located), [
    '7:15 handlers.acme.io/Sensor.versions: expected a non-empty list of version strings, got "v1"',
  ]);
});

test("a file that cannot be read is a PolicyError that names the path and says cannot read", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ep-pol-"));
  const missing = path.join(dir, "nope.yaml");
  try {
    await assert.rejects(loadPolicyFile(missing), (error: unknown) => {
      assert.ok(error instanceof PolicyError);
      assert.equal(error.issues.length, 1);
      assert.equal(error.issues[0]!.file, missing);
      assert.equal(error.issues[0]!.line, 0);
      assert.equal(error.issues[0]!.column, 0);
      assert.ok(error.message.startsWith(`${missing}:0:0: cannot read the policy file`), error.message);
      return true;
    });
    await assert.rejects(loadPolicyFile(dir), (error: unknown) => error instanceof PolicyError && /cannot read/.test(error.message));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

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
    devicePlugins: { registrationSocket: "/var/lib/kubelet/device-plugins/kubelet.sock", gracePeriodMs: 300_000 },
    checkpoint: { path: "/var/lib/edgeplug/kubelet_internal_checkpoint" },
    reconcile: {
      resyncMs: 10_000,
      backoff: { initialMs: 500, maxMs: 122_000 },
      timeouts: { dialMs: 10_000, getInfoMs: 1_000, notifyMs: 5_000 },
    },
    security: { socketOwners: uid === 0 ? [0] : [0, uid], maxPlugins: 1024, maxDevicesPerResource: 100_000 },
    api: { socket: "/run/edgeplug/api.sock", socketGroup: null, metrics: null },
    log: { level: "info", format: "json" },
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
devicePlugins: { registrationSocket: null, gracePeriod: "0" }
reconcile: { resync: 1h, backoff: { initial: 1.5s, max: 1m }, timeouts: { dial: 250ms, getInfo: 2s, notify: 3s } }
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
  assert.deepEqual(policy.devicePlugins, { registrationSocket: null, gracePeriodMs: 0 });
  assert.deepEqual(policy.reconcile, {
    resyncMs: 3_600_000,
    backoff: { initialMs: 1500, maxMs: 60_000 },
    timeouts: { dialMs: 250, getInfoMs: 2000, notifyMs: 3000 },
  });
  assert.deepEqual(policy.security, { socketOwners: [1000], maxPlugins: 3, maxDevicesPerResource: 8 });
  assert.deepEqual(policy.api, { socket: null, socketGroup: "edgeplug", metrics: "[::1]:9478" });
  assert.deepEqual(policy.log, { level: "debug", format: "text" });
});

test("handlers omitted: a dir's types may name only the three built-ins", () => {
  const policy = parsePolicy(`${minimal}    types: [DRAPlugin, CSIPlugin]\n`, "p.yaml");
  assert.deepEqual(policy.watch[0]!.types, ["DRAPlugin", "CSIPlugin"]);
});

test("handlers declared: built-ins not listed are not available to types", () => {
  const error = rejection(
    `${minimal}    types: [CSIPlugin]\nhandlers:\n  DevicePlugin: {}\n`,
  );
  assert.deepEqual(error.issues.map(located), ['4:13 watch[0].types[0]: expected a declared handler type (DevicePlugin), got "CSIPlugin"']);
});

test("backoff.max below the default initial is located at max", () => {
  const error = rejection(`${minimal}reconcile:\n  backoff:\n    max: 100ms\n`);
  assert.deepEqual(error.issues.map(located), [
    '6:10 reconcile.backoff.max: expected at least reconcile.backoff.initial (500ms), got "100ms"',
  ]);
});

test("an empty file and a file of comments are rejected at 1:1", () => {
  for (const text of ["", "# nothing here\n"]) {
    assert.deepEqual(rejection(text).issues.map(located), [
      "1:1 expected a mapping (the policy) with at least version and watch, got an empty document",
    ]);
  }
});

test("every YAML syntax error is reported, located", () => {
  const error = rejection("version: 1\nwatch:\n\t- path: /x\nlog: {level: info\n");
  assert.ok(error.issues.length >= 2, error.message);
  for (const issue of error.issues) {
    assert.ok(issue.line >= 3, error.message);
    assert.match(issue.message, /^invalid YAML: /);
  }
  assert.match(error.message, /^policy\.yaml:3:1: invalid YAML: Tabs are not allowed as indentation/);
});

test("the SPEC section 2 example (config/example.yaml) validates verbatim", () => {
  const example = fs.readFileSync(path.join(configDir, "example.yaml"), "utf8");
  if (!fs.existsSync(specPath)) {
    assert.fail(`SPEC.md not found at ${specPath}: the shared dir must sit beside the repo (../shared) to compare the example`);
  }
  const spec = fs.readFileSync(specPath, "utf8");
  const section = spec.slice(spec.indexOf("\n## 2."));
  const block = /```yaml\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "no ```yaml block in SPEC.md section 2");
  assert.equal(example, block[1], "config/example.yaml differs from the YAML block of SPEC.md section 2");

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

test("the embedded default follows SPEC section 1 and equals config/default.yaml", () => {
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
  assert.deepEqual(withoutSource(parsePolicy(DEFAULT_POLICY_YAML, "x")), withoutSource(embedded));
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

test("a list used as a key is an error, located, and the yaml package prints nothing to stderr", () => {
  const printed: unknown[] = [];
  const { emitWarning } = process;
  const { warn } = console;
  process.emitWarning = ((warning: unknown) => void printed.push(warning)) as typeof process.emitWarning;
  console.warn = (...args: unknown[]) => void printed.push(args);
  try {
    const error = rejection(`${minimal}handlers:\n  ? [a, b]\n  : { kind: generic }\n`);
    assert.deepEqual(error.issues.map(located), ["5:5 handlers: expected a plain key, got a list as a key"]);
  } finally {
    process.emitWarning = emitWarning;
    console.warn = warn;
  }
  assert.deepEqual(printed, []);
});

test("an unknown key gets a suggestion only when a known key is close", () => {
  const close = rejection(`${minimal}reconcile: { resycn: 5s }\n`).issues[0]!.message;
  assert.match(close, /got unknown key "resycn" \(did you mean "resync"\?\)$/);
  const far = rejection(`${minimal}a: 1\n`).issues[0]!.message;
  assert.match(far, /got unknown key "a"$/);
});

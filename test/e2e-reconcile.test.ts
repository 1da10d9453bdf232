/**
 * `run --reconcile-once` as a provisioning script relies on it (docs/commands.md,
 * `--reconcile-once`): its own exit code when it cannot start, with JSON still on
 * stdout; a verdict that follows --expect/--require when given (--strict
 * makes every socket count); failed sockets always listed with their
 * reasons; permanent refusals that do not wait out --timeout.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { policyWithRegistry, runEdgeplug } from "./support/agent-process.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };
/** A plugin of a type no handler in writePolicy's default policy takes. */
const thing = { type: "other.io/Thing", name: "other.io/thing" };
const once = (policyPath: string, ...flags: string[]) => ["run", "--config", policyPath, "--reconcile-once", ...flags];

/**
 * A run that must end once its verdict is known, not at `--timeout`: what is timed is only which of the two ended
 * it, so the bound is a third of the timeout (these runs take about a second; a loaded machine stays far from it).
 */
function assertEndedBeforeTimeout(report: { durationMs: number }, timeoutS: number, why: string): void {
  assert.ok(report.durationMs < (timeoutS * 1000) / 3, `${why}: took ${report.durationMs} ms of --timeout ${timeoutS}s`);
}

test("--reconcile-once that cannot start exits 3, and still prints a JSON object saying why", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "file"), "");
  const policy = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policy,
    [
      "version: 1",
      "watch:",
      `  - path: ${dir}/file/registry`,
      "devicePlugins: { registrationSocket: null }",
      `checkpoint: { path: ${dir}/state/checkpoint }`,
      "api: { socket: null, metrics: null }",
      "",
    ].join("\n"),
  );
  const json = await runEdgeplug(once(policy, "--output", "json"));
  assert.equal(json.code, 3, json.stderr);
  const answer = JSON.parse(json.stdout);
  assert.deepEqual(Object.keys(answer), ["schema", "ok", "error"]);
  assert.equal(answer.ok, false);
  assert.match(answer.error, /^cannot start: cannot create watch directory \S+\/file\/registry: ENOTDIR/);
  // The policy's logs are JSON (the default): so is every line on stderr, the reason included.
  const records = json.stderr.trimEnd().split("\n").map((line) => JSON.parse(line) as { level: string; msg: string; error?: string });
  const reason = records.find((record) => record.msg === "cannot start");
  assert.equal(reason?.level, "error", json.stderr);
  assert.match(reason?.error ?? "", /^cannot create watch directory \S+\/file\/registry: ENOTDIR/);

  const text = await runEdgeplug(once(policy));
  assert.equal(text.code, 3);
  assert.equal(text.stdout, "");
  assert.ok(text.stderr.trimEnd().split("\n").every((line) => line.startsWith("{")), text.stderr);

  // With text logs the reason is the plain line.
  fs.writeFileSync(policy, fs.readFileSync(policy, "utf8") + "log: { format: text }\n");
  const plain = await runEdgeplug(once(policy));
  assert.equal(plain.code, 3);
  assert.match(plain.stderr, /^edgeplug: cannot start: cannot create watch directory/m);
});

test("--reconcile-once with an invalid policy exits 2, with the errors in JSON for --output json", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "bad.yaml");
  fs.writeFileSync(file, `version: 1\nwatch:\n  - path: ${dir}/registry\nreconcile:\n  resync: fast\n`);
  const result = await runEdgeplug(once(file, "--output", "json"));
  assert.equal(result.code, 2);
  assert.deepEqual(JSON.parse(result.stdout), {
    schema: 1,
    ok: false,
    error: "invalid policy",
    errors: [`${file}:5:11: reconcile.resync: expected a duration like "30s", got "fast"`],
  });
  assert.match(result.stderr, /bad\.yaml:5:11: reconcile\.resync/);
});

test("with --expect met, a stray refused socket is listed with its reason but does not fail the run; --strict counts it", async (t) => {
  const policy = policyWithRegistry(t);
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const stray = await startTestPlugin(t, { socketPath: path.join(policy.registry, "stray.sock"), info: thing });

  const lenient = await runEdgeplug(once(policy.path, "--expect", "1", "--timeout", "30s", "--output", "json"));
  assert.equal(lenient.code, 0, lenient.stdout + lenient.stderr);
  const report = JSON.parse(lenient.stdout);
  assert.equal(report.ok, true);
  assert.equal(report.verdictBy, "expectations");
  assert.deepEqual(report.expectations, { expect: 1, require: [], resources: {}, strict: false, unmet: [] });
  assert.deepEqual(report.failed, [
    {
      socket: stray.socketPath,
      type: thing.type,
      name: thing.name,
      state: "failed",
      error: `RegisterPlugin error -- no handler registered for plugin type: other.io/Thing at socket ${stray.socketPath}`,
      reason: "no_handler",
    },
  ]);
  assertEndedBeforeTimeout(report, 30, "the stray made it wait");

  const text = await runEdgeplug(once(policy.path, "--expect", "1", "--timeout", "20s"));
  assert.equal(text.code, 0);
  assert.match(text.stdout, new RegExp(`^failed: ${stray.socketPath} \\(other\\.io/thing\\): RegisterPlugin error -- no handler`, "m"));
  assert.match(text.stdout, /^reconcile-once ok \(failed sockets ignored: the expectations decide; --strict counts them\) in \d+ ms$/m);

  const strict = await runEdgeplug(once(policy.path, "--expect", "1", "--strict", "--timeout", "30s", "--output", "json"));
  assert.equal(strict.code, 1, strict.stderr);
  const strictReport = JSON.parse(strict.stdout);
  assert.deepEqual([strictReport.ok, strictReport.verdictBy, strictReport.expectations.unmet], [false, "every socket", []]);
  assert.equal(strictReport.failed[0].socket, stray.socketPath);
  assertEndedBeforeTimeout(strictReport, 30, "a permanent refusal waited out --timeout");
  assert.equal((await good.waitForNotify()).registered, true);
});

test("without expectations a permanent refusal ends the run at once, not at --timeout", async (t) => {
  const policy = policyWithRegistry(t);
  await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const stray = await startTestPlugin(t, { socketPath: path.join(policy.registry, "stray.sock"), info: thing });
  const result = await runEdgeplug(once(policy.path, "--timeout", "60s", "--output", "json"));
  assert.equal(result.code, 1, result.stderr);
  const report = JSON.parse(result.stdout);
  assertEndedBeforeTimeout(report, 60, "a permanent refusal waited out --timeout");
  assert.deepEqual([report.ok, report.verdictBy], [false, "every socket"]);
  assert.deepEqual(report.failed.map((f: Record<string, unknown>) => f.socket), [stray.socketPath]);
  assert.equal((await stray.waitForNotify()).registered, false);
});

test("a --require of a refused plugin fails at once, quoting the refusal", async (t) => {
  const policy = policyWithRegistry(t, {
    handlers: ["  acme.io/Sensor:", "    kind: generic", "    versions: [v2]"].join("\n"),
  });
  const old = await startTestPlugin(t, { socketPath: path.join(policy.registry, "old.sock"), info: sensor });
  const result = await runEdgeplug(once(policy.path, "--require", sensor.name, "--timeout", "60s", "--output", "json"));
  assert.equal(result.code, 1, result.stderr);
  const report = JSON.parse(result.stdout);
  const refusal = `none of the plugin's versions ["v1"] is accepted by handler acme.io/Sensor (versions ["v2"])`;
  assert.deepEqual(report.expectations.unmet, [`required plugin acme.io/thermo is not registered (${old.socketPath} failed: ${refusal})`]);
  assert.deepEqual(report.failed.map((f: Record<string, unknown>) => f.error), [refusal]);
  assertEndedBeforeTimeout(report, 60, "a refused --require waited out --timeout");
  assert.equal((await old.waitForNotify()).error, refusal);

  const missing = await runEdgeplug(once(policy.path, "--require", "acme.io/absent", "--timeout", "300ms"));
  assert.equal(missing.code, 1);
  assert.match(missing.stdout, /^unmet: required plugin acme\.io\/absent is not registered \(no socket advertises it\)$/m);
});

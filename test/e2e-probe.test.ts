/**
 * `probe` for plugin authors (issue 9), on the built executable: it names
 * the handler that refuses a plugin, never dials a socket whose owner the
 * policy excludes, and says when the socket lies outside every watched
 * directory.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { policyWithRegistry, runEdgeplug } from "./support/agent-process.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };

test("probe names the handler that refuses a version it does not accept", async (t) => {
  const policy = policyWithRegistry(t, { handlers: ["  acme.io/Sensor:", "    kind: generic", "    versions: [v2]"].join("\n") });
  const plugin = await startTestPlugin(t, { socketPath: path.join(policy.registry, "v1.sock"), info: sensor });

  const text = await runEdgeplug(["probe", plugin.socketPath, "--config", policy.path]);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^handler:\s+acme\.io\/Sensor$/m);
  assert.match(text.stdout, /^verdict:\s+would be refused: none of the plugin's versions \["v1"\] is accepted by handler acme\.io\/Sensor \(versions \["v2"\]\)$/m);

  const json = JSON.parse((await runEdgeplug(["probe", plugin.socketPath, "--config", policy.path, "--output", "json"])).stdout);
  assert.deepEqual([json.handler, json.accepted, json.dialled], ["acme.io/Sensor", false, true]);
  assert.deepEqual(plugin.notifications(), [], "probe sends no NotifyRegistrationStatus");
});

test("probe never dials a socket whose owner security.socketOwners excludes", async (t) => {
  const policy = policyWithRegistry(t, { security: "  socketOwners: [4242]" });
  const plugin = await startTestPlugin(t, { socketPath: path.join(policy.registry, "root.sock"), info: sensor });
  const uid = fs.statSync(plugin.socketPath).uid;

  const text = await runEdgeplug(["probe", plugin.socketPath, "--config", policy.path]);
  assert.equal(text.code, 1, "not answered: not dialled");
  assert.match(text.stdout, /^answered:\s+not dialled$/m);
  assert.match(text.stdout, new RegExp(`^verdict:\\s+would be refused: socket owned by uid ${uid}, not in security\\.socketOwners \\[4242\\]; not dialled$`, "m"));

  const json = JSON.parse((await runEdgeplug(["probe", plugin.socketPath, "--config", policy.path, "--output", "json"])).stdout);
  assert.deepEqual([json.dialled, json.answered, json.info, json.accepted], [false, false, null, false]);
  assert.equal(plugin.getInfoCalls(), 0, "the plugin was never called");
});

test("probe says when the socket lies outside every watched directory", async (t) => {
  const policy = policyWithRegistry(t);
  const elsewhere = tempDir(t);
  const outside = await startTestPlugin(t, { socketPath: path.join(elsewhere, "p.sock"), info: sensor });
  const inside = await startTestPlugin(t, { socketPath: path.join(policy.registry, "p.sock"), info: sensor });

  const text = await runEdgeplug(["probe", outside.socketPath, "--config", policy.path]);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^watched:\s+no: outside every watched directory, the agent would not discover it$/m);
  const json = JSON.parse((await runEdgeplug(["probe", outside.socketPath, "--config", policy.path, "--output", "json"])).stdout);
  assert.equal(json.watchDir, null);

  const watched = await runEdgeplug(["probe", inside.socketPath, "--config", policy.path]);
  assert.match(watched.stdout, new RegExp(`^watched:\\s+${policy.registry}$`, "m"));
});

test("run --help does not show --config as required", async () => {
  const result = await runEdgeplug(["run", "--help"]);
  assert.equal(result.code, 0);
  const synopsis = result.stdout.slice(0, result.stdout.indexOf("\n\n"));
  assert.doesNotMatch(synopsis, /(?<!\[)--config PATH(?!\])/, `every --config PATH in the synopsis is in brackets:\n${synopsis}`);
  assert.match(result.stdout, /^ {7}edgeplug \[run\] \[--config PATH\] --reconcile-once/m);
});

/**
 * `status` as a health check and a monitor relies on it (docs/commands.md),
 * on the built executable: exit 1 when the agent reports not ok (--exit-zero
 * keeps 0), `--watch` exits 1 saying so when the agent goes away, and the
 * JSON of `status --output json` is the API's JSON (curl) with nulls added.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { policyWithRegistry, runEdgeplug, startDaemon, startEdgeplug } from "./support/agent-process.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { curlAgentStatus } from "./support/curl.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };

test("status exits 0 when the agent reports ok, 1 when not ok, and --exit-zero keeps 0", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  await good.waitForNotify();
  const ok = await runEdgeplug(["status", "--api", policy.apiSocket]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /^node e2e-node: ok$/m);

  const stranger = await startTestPlugin(t, { socketPath: path.join(policy.registry, "x.sock"), info: { type: "other.io/Thing", name: "x" } });
  await stranger.waitForNotify();
  for (const output of ["text", "json"]) {
    const notOk = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", output]);
    assert.equal(notOk.code, 1, `${output}: ${notOk.stderr}`);
    assert.equal(notOk.stderr, "", "the output says it; stderr stays for failures to answer");
    const kept = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", output, "--exit-zero"]);
    assert.equal(kept.code, 0, kept.stderr);
    assert.equal(kept.stdout.includes("x.sock"), true);
  }
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("status --watch exits 1 with a message on stderr when the agent stops", async (t) => {
  for (const output of ["text", "json"]) {
    const { policy, agent } = await startDaemon(t);
    const watcher = startEdgeplug(["status", "--api", policy.apiSocket, "--watch", "--output", output]);
    killAfter(t, watcher.child);
    await new Promise<void>((resolve) => watcher.child.stdout!.once("data", () => resolve()));
    agent.child.kill("SIGTERM");
    assert.equal((await agent.exited).code, 0);
    const { code } = await watcher.exited;
    assert.equal(code, 1, `${output}: ${watcher.stderr()}`);
    assert.match(watcher.stderr(), new RegExp(`^edgeplug status: .*agent at ${policy.apiSocket} went away`, "m"));
  }
});

test("status --output json is the API's JSON (curl on Agent/Status) with absent values as null", async (t) => {
  const policy = policyWithRegistry(t, { reconcile: "  timeouts: { getInfo: 60s }" });
  // One registered plugin and one whose GetInfo never answers: every optional field both set and unset, and nothing moves.
  const silent = await startTestPlugin(t, { socketPath: path.join(policy.registry, "silent.sock"), info: sensor, hangGetInfo: true });
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await good.waitForNotify();
  await silent.waitForGetInfo();

  const cli = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json", "--exit-zero"]);
  assert.equal(cli.code, 0, cli.stderr);
  const fromCli = JSON.parse(cli.stdout);
  const fromApi = await curlAgentStatus(policy.apiSocket);
  assert.deepEqual(withoutNulls(fromCli), fromApi);
  // Same members in the same order, where the API leaves a field out the CLI says null.
  const pending = fromCli.plugins.find((p: Record<string, unknown>) => p.socket === silent.socketPath);
  assert.deepEqual(Object.keys(pending).slice(0, 12), [
    "socket",
    "type",
    "name",
    "endpoint",
    "versions",
    "state",
    "attempts",
    "registeredAt",
    "error",
    "discoveredAt",
    "lastAttemptAt",
    "reason",
  ]);
  assert.deepEqual([pending.type, pending.name, pending.endpoint, pending.registeredAt, pending.error, pending.reason], [null, null, null, null, null, null]);
  const apiPending = fromApi.plugins.find((p: Record<string, unknown>) => p.socket === silent.socketPath);
  assert.equal("type" in apiPending, false);
  assert.equal(JSON.stringify(withoutNulls(fromCli)), JSON.stringify(fromApi), "member order too");
  // And the other way round: the API's JSON with null written for exactly the fields
  // docs/status-json.md lists as "left out when they have no value" is the CLI's JSON.
  const documented = documentedOmissions();
  const filled = {
    ...withNullsFor(fromApi, documented.top),
    plugins: fromApi.plugins.map((plugin: Record<string, unknown>) => withNullsFor(plugin, documented.plugins)),
    resources: fromApi.resources.map((resource: Record<string, unknown>) => withNullsFor(resource, documented.resources)),
    ...(fromApi.checkpoint ? { checkpoint: withNullsFor(fromApi.checkpoint, documented.checkpoint) } : {}),
  };
  assert.deepEqual(fromCli, filled);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

/** The fields docs/status-json.md says the API leaves out when they have no value, by message. */
function documentedOmissions(): Record<"top" | "plugins" | "resources" | "checkpoint", string[]> {
  const whole = fs.readFileSync(new URL("../docs/status-json.md", import.meta.url), "utf8");
  const doc = whole.slice(whole.indexOf("## The API's JSON"));
  const row = (message: string) => {
    const line = doc.split("\n").find((text) => text.startsWith(`| \`${message}\` |`) || text.startsWith(`| ${message} |`));
    assert.ok(line, `docs/status-json.md has a row for ${message}`);
    return [...line.split("|")[2]!.matchAll(/`(\w+)`/g)].map((match) => match[1]!);
  };
  return { top: row("the top level"), plugins: row("plugins[]"), resources: row("resources[]"), checkpoint: row("checkpoint") };
}

/** `entry` with null for each of `fields` it lacks. */
function withNullsFor(entry: Record<string, unknown>, fields: string[]): Record<string, unknown> {
  return { ...Object.fromEntries(fields.map((field) => [field, null])), ...entry };
}

/** `value` with every null member of every object left out. */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(Object.entries(value).filter(([, member]) => member !== null).map(([key, member]) => [key, withoutNulls(member)]));
}

test("while a watch limit leaves a directory out, status says so and is not ok; the resync that takes it in makes it ok", async (t) => {
  const policy = policyWithRegistry(t, { reconcile: "  backoff: { initial: 50ms, max: 500ms }\n  resync: 500ms" });
  // The root and 1,023 sub-directories fill the 1,024 watches; "zz", last in name order, is left out with its plugin.
  const fillers = Array.from({ length: 1023 }, (_, i) => path.join(policy.registry, `d${String(i).padStart(4, "0")}`));
  for (const dir of fillers) fs.mkdirSync(dir);
  fs.mkdirSync(path.join(policy.registry, "zz"));
  const seen = await startTestPlugin(t, { socketPath: path.join(policy.registry, "seen.sock"), info: sensor });
  const leftOut = await startTestPlugin(t, { socketPath: path.join(policy.registry, "zz", "left-out.sock"), info: sensor });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await seen.waitForNotify();

  const json = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json"]);
  assert.equal(json.code, 1, "not ok, although every plugin it knows is registered");
  const status = JSON.parse(json.stdout);
  assert.equal(status.ok, false);
  assert.deepEqual(status.plugins.map((plugin: { socket: string }) => plugin.socket), [path.join(policy.registry, "seen.sock")]);
  assert.deepEqual(status.watchLimits, {
    watchedDirectories: 1024,
    directoryLimit: 1024,
    knownSockets: 1,
    socketLimit: 4096,
    skippedDirectories: 1,
    skippedSockets: 0,
  });
  const text = await runEdgeplug(["status", "--api", policy.apiSocket]);
  assert.equal(text.code, 1);
  assert.match(text.stdout, /^watch limits reached: 1 directory and 0 sockets left out \(1024 of 1024 directories watched, 1 of 4096 sockets known\)$/m);

  const jsonWatch = startEdgeplug(["status", "--api", policy.apiSocket, "--watch", "--output", "json"]);
  const textWatch = startEdgeplug(["status", "--api", policy.apiSocket, "--watch"]);
  killAfter(t, jsonWatch.child);
  killAfter(t, textWatch.child);
  const watchLimitsEvent = (line: string) => line.startsWith("{") && (JSON.parse(line) as { kind?: string }).kind === "watchLimits";
  await Promise.all([
    nextLine(jsonWatch.child, (line) => line.includes('"kind":"snapshot"')),
    nextLine(textWatch.child, (line) => line.startsWith("node ")),
  ]);

  const clearedJson = nextLine(jsonWatch.child, watchLimitsEvent);
  const clearedText = nextLine(textWatch.child, (line) => /watch limits no longer reached/.test(line));
  fs.rmdirSync(fillers[0]!);
  await leftOut.waitForNotify();
  const after = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json"]);
  assert.equal(after.code, 0, after.stdout);
  assert.equal(JSON.parse(after.stdout).watchLimits, null);
  assert.equal(JSON.parse(await clearedJson).watchLimits, null, "status --watch hears that nothing is left out any more");
  await clearedText;

  // One directory more than the watches again: left out at once, and said so on the stream.
  const reachedJson = nextLine(jsonWatch.child, watchLimitsEvent);
  const reachedText = nextLine(textWatch.child, (line) => /watch limits reached: 1 directory and 0 sockets left out/.test(line));
  fs.mkdirSync(path.join(policy.registry, "zzz"));
  const reached = JSON.parse(await reachedJson);
  assert.deepEqual([reached.watchLimits?.skippedDirectories, reached.watchLimits?.watchedDirectories], [1, 1024]);
  await reachedText;
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

/** The first complete stdout line of `child` from now on for which `matches` holds. */
function nextLine(child: ChildProcess, matches: (line: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    let unparsed = "";
    const onData = (chunk: Buffer | string) => {
      const lines = (unparsed + chunk.toString()).split("\n");
      unparsed = lines.pop()!;
      const found = lines.find(matches);
      if (found === undefined) return;
      child.stdout!.off("data", onData);
      child.off("close", onClose);
      resolve(found);
    };
    const onClose = () => reject(new Error("the command exited before printing the line"));
    child.stdout!.on("data", onData);
    child.once("close", onClose);
  });
}

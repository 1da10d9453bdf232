/**
 * The policy commands on the shipped executable (dist/edgeplug): `policy show`
 * prints the effective policy (a valid policy itself), and `validate` answers
 * hostile or broken policies with located errors and exit 2, never a stack
 * trace (issue 7, defects 4 and 7).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./support/temp-dir.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const binary = path.join(repoRoot, "dist", "edgeplug");
const devPolicy = path.join(repoRoot, "config", "dev.yaml");

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs dist/edgeplug with an empty environment. */
function edgeplug(args: string[], cwd = repoRoot): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { cwd, env: {}, encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") return reject(error);
      resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

function assertNoStackTrace(outcome: Outcome): void {
  assert.doesNotMatch(outcome.stderr, /^\s+at /m, `a stack trace on stderr:\n${outcome.stderr}`);
}

test("policy show prints every default, as YAML that validates to the same policy, or as JSON", async (t) => {
  const dir = tempDir(t, "ep-show-");
  const yaml = await edgeplug(["policy", "show", "--config", devPolicy]);
  assert.equal(yaml.code, 0, yaml.stderr);
  assert.match(yaml.stdout, /^# edgeplug effective policy from .*dev\.yaml, every default filled in\n/);
  // Defaults dev.yaml leaves out: the API socket's group, each handler's globs, the socket owners.
  for (const line of ["  socketGroup: null", "    deny: []", "  socketOwners:"]) {
    assert.ok(yaml.stdout.includes(`\n${line}\n`), `policy show lacks the default line "${line}":\n${yaml.stdout}`);
  }
  const shown = path.join(dir, "shown.yaml");
  fs.writeFileSync(shown, yaml.stdout);
  const valid = await edgeplug(["validate", "--config", shown]);
  assert.deepEqual([valid.code, valid.stdout], [0, "ok\n"], valid.stderr);

  const json = await edgeplug(["policy", "show", "--config", devPolicy, "--output", "json"]);
  const again = await edgeplug(["policy", "show", "--config", shown, "--output", "json"]);
  assert.equal(json.code, 0, json.stderr);
  const effective = JSON.parse(json.stdout);
  assert.deepEqual(JSON.parse(again.stdout), effective, "the shown policy loads to the same effective policy");
  assert.equal(effective.api.socketGroup, null);
  assert.deepEqual(effective.handlers.DevicePlugin, { allow: ["*"], deny: [] });
  assert.ok(Array.isArray(effective.security.socketOwners) && effective.security.socketOwners[0] === 0);
  assert.deepEqual(effective.handlers["example.io/Greeter"].versions, ["v1"]);
});

test("policy show without --config shows the embedded default; bad usage and bad policies exit 2", async (t) => {
  const dir = tempDir(t, "ep-show-");
  const embedded = await edgeplug(["policy", "show", "--output", "json"], dir);
  assert.equal(embedded.code, 0, embedded.stderr);
  const policy = JSON.parse(embedded.stdout);
  assert.deepEqual(policy.watch, [{ path: "/var/lib/kubelet/plugins_registry", recursive: true }]);
  assert.equal(policy.api.socket, "/run/edgeplug/api.sock");

  const noSubcommand = await edgeplug(["policy"]);
  assert.equal(noSubcommand.code, 2);
  assert.match(noSubcommand.stderr, /expected the subcommand show, got nothing/);
  const badOutput = await edgeplug(["policy", "show", "--output", "xml"]);
  assert.equal(badOutput.code, 2);
  assert.match(badOutput.stderr, /--output: expected yaml or json, got "xml"/);

  const bad = path.join(dir, "bad.yaml");
  fs.writeFileSync(bad, "version: 1\nwatch: [{ path: /x }]\nlog: { level: loud }\n");
  const invalid = await edgeplug(["policy", "show", "--config", bad]);
  assert.equal(invalid.code, 2);
  assert.equal(invalid.stderr, `${bad}:3:15: log.level: expected one of debug, info, warn, error, got "loud"\n`);
});

test("validate: undefined aliases, alias bombs, huge lists, deep nesting and over-long durations exit 2 with FILE:LINE:COL, never a stack trace", async (t) => {
  const dir = tempDir(t, "ep-val-");
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };
  const bombLevels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
  for (let level = 1; level < 9; level++) {
    const name = String.fromCharCode(97 + level);
    bombLevels.push(`${name}: &${name} [${Array(10).fill(`*${String.fromCharCode(96 + level)}`).join(", ")}]`);
  }
  const cases: [string, string, RegExp][] = [
    ["alias.yaml", "version: 1\nwatch: *nowhere\n", /^FILE:2:8: invalid YAML: alias \*nowhere has no anchor &nowhere before it\n$/],
    ["bomb.yaml", `version: 1\nwatch: [{ path: /x }]\n${bombLevels.join("\n")}\n`, /^FILE:4:\d+: invalid YAML: aliases expand to more than 100 nodes/],
    // 150k list items (800 KB, under the size cap) once overflowed the stack collecting their errors.
    ["items.yaml", `version: 1\nwatch:\n${"- 1\n".repeat(150_000)}`, /^FILE:2501:3: expected a policy of at most 5000 YAML nodes \(scalars, aliases, list items\), got more\n$/],
    ["deep.yaml", `version: 1\nwatch:\n${"- ".repeat(100_000)}x\n`, /^FILE:3:127: expected lists and mappings nested at most 64 deep, got deeper\n$/],
    [
      "long.yaml",
      "version: 1\nwatch: [{ path: /x }]\nreconcile: { resync: 1000h }\n",
      /^FILE:3:22: reconcile\.resync: expected a duration of at most 596h31m23\.647s \(2\^31-1 ms, the longest timer\), got "1000h"\n$/,
    ],
  ];
  for (const [name, text, expected] of cases) {
    const file = write(name, text);
    const outcome = await edgeplug(["validate", "--config", file]);
    assert.equal(outcome.code, 2, `${name}: ${outcome.stderr}`);
    assert.match(outcome.stderr.replaceAll(file, "FILE"), expected);
    assertNoStackTrace(outcome);
  }
});

test("validate --config '' and an over-size file get a message naming what is wrong; --timeout above 2^31-1 ms is refused", async (t) => {
  const empty = await edgeplug(["validate", "--config", ""]);
  assert.deepEqual([empty.code, empty.stderr], [2, "--config: expected the path of a policy file, got an empty string\n"]);

  const dir = tempDir(t, "ep-val-");
  const big = path.join(dir, "big.yaml");
  fs.writeFileSync(big, `version: 1\nwatch: [{ path: /x }]\n# ${"x".repeat(1024 * 1024)}\n`);
  const tooBig = await edgeplug(["validate", "--config", big]);
  assert.equal(tooBig.code, 2);
  assert.equal(tooBig.stderr, `${big}: expected a policy file of at most 1048576 bytes (1 MiB), got a larger file\n`);

  const timeout = await edgeplug(["run", "--reconcile-once", "--timeout", "1000h", "--config", devPolicy]);
  assert.equal(timeout.code, 2);
  assert.match(timeout.stderr, /--timeout: must be at most 596h31m23\.647s \(2\^31-1 ms\), got "1000h"/);
  assertNoStackTrace(timeout);
});

/**
 * The command line as a user meets it: `node src/main.ts ...` run as a child
 * process (and once under Deno), checking exit codes, stdout and stderr
 * against docs/commands.md.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import packageJson from "../package.json" with { type: "json" };
import { COMMANDS } from "../src/cli/cli.ts";
import { tempDir } from "./support/temp-dir.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const mainScript = path.join(repoRoot, "src", "main.ts");
const devPolicy = path.join(repoRoot, "config", "dev.yaml");

/** Every command docs/commands.md names, plus `help`. */
const SPEC_COMMANDS = ["run", "validate", "probe", "status", "allocate", "release", "checkpoint", "version"];

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `program args` and resolves with its exit code and output, whatever the code. */
function spawn(program: string, args: string[], options: { cwd?: string } = {}): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    execFile(program, args, { cwd: options.cwd ?? repoRoot, encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") return reject(error);
      resolve({ code: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}

function edgeplug(...args: string[]): Promise<Outcome> {
  return spawn(process.execPath, [mainScript, ...args]);
}

function tempPolicy(t: { after: (fn: () => void) => void }, text: string): string {
  const dir = tempDir(t, "ep-cli-");
  const file = path.join(dir, "policy.yaml");
  fs.writeFileSync(file, text);
  return file;
}

const versionLine = new RegExp(
  `^edgeplug ${packageJson.version.replaceAll(".", "\\.")} node v24\\.\\d+\\.\\d+ ${process.platform}-${process.arch} (?:[0-9a-f]{4,40}|dev)$`,
);

test("the command table holds every documented command", () => {
  for (const name of SPEC_COMMANDS) assert.ok(Object.hasOwn(COMMANDS, name), `no command ${name}`);
});

test("--help on every command prints its usage on stdout and exits 0", { concurrency: true }, async (t) => {
  const checks = [...SPEC_COMMANDS, "help"].map((name) =>
    t.test(name, async () => {
      const result = await edgeplug(name, "--help");
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /^Usage: edgeplug /);
      assert.ok(result.stdout.includes(name), `usage of ${name} does not name it:\n${result.stdout}`);
      assert.match(result.stdout, /--log-level/, `usage of ${name} does not mention --log-level`);
      assert.equal(result.stderr, "");
    })
  );
  checks.push(t.test("-h is --help", async () => {
    const [short, long] = await Promise.all([edgeplug("validate", "-h"), edgeplug("validate", "--help")]);
    assert.equal(short.code, 0);
    assert.equal(short.stdout, long.stdout);
  }));
  await Promise.all(checks);
});

test("edgeplug --help lists every command", async () => {
  const [flag, command] = await Promise.all([edgeplug("--help"), edgeplug("help")]);
  assert.equal(flag.code, 0, flag.stderr);
  for (const name of SPEC_COMMANDS) assert.match(flag.stdout, new RegExp(`^  ${name} `, "m"));
  assert.equal(command.stdout, flag.stdout);
});

test("options without a command run the agent: --config X --help shows run's usage", async () => {
  const [implicit, explicit] = await Promise.all([
    edgeplug("--config", devPolicy, "--help"),
    edgeplug("run", "--help"),
  ]);
  assert.equal(implicit.code, 0, implicit.stderr);
  assert.equal(implicit.stdout, explicit.stdout);
});

test("an unknown command is bad usage: exit 2, the name on stderr", async () => {
  const result = await edgeplug("frobnicate");
  assert.equal(result.code, 2);
  assert.match(result.stderr, /unknown command "frobnicate"/);
  assert.equal(result.stdout, "");
});

test("an unknown flag is bad usage: exit 2, the flag on stderr", { concurrency: true }, async (t) => {
  const cases = [["validate", "--bogus"], ["version", "--bogus"], ["validate", "extra-argument"]];
  await Promise.all(cases.map((args) =>
    t.test(args.join(" "), async () => {
      const result = await edgeplug(...args);
      assert.equal(result.code, 2);
      assert.ok(result.stderr.includes(args[1]!), result.stderr);
      assert.match(result.stderr, new RegExp(`Run 'edgeplug ${args[0]} --help'`));
      assert.equal(result.stdout, "");
    })
  ));
});

test("version and --version print the documented one line", async () => {
  const [command, flag] = await Promise.all([edgeplug("version"), edgeplug("--version")]);
  assert.equal(command.code, 0, command.stderr);
  assert.match(command.stdout.trimEnd(), versionLine);
  assert.equal(command.stdout.split("\n").length, 2, "exactly one line");
  assert.equal(flag.stdout, command.stdout);
});

test("version --verbose says it is not the single executable when run from source", async () => {
  const result = await edgeplug("version", "--verbose");
  assert.equal(result.code, 0, result.stderr);
  const [first, ...rest] = result.stdout.trimEnd().split("\n");
  assert.match(first!, versionLine);
  assert.ok(rest.includes("sea: false"), result.stdout);
  assert.ok(rest.includes(`executable: ${process.execPath}`), result.stdout);
  assert.ok(rest.some((line) => line.startsWith("default policy: /etc/edgeplug/policy.yaml")), result.stdout);
});

test("validate --offline prints ok for every policy in config/ (examples for other hosts: example.yaml names a group this one may lack)", { concurrency: true }, async (t) => {
  const files = fs.readdirSync(path.join(repoRoot, "config")).filter((name) => name.endsWith(".yaml"));
  assert.ok(files.length > 0);
  await Promise.all(files.map((file) =>
    t.test(file, async () => {
      const result = await edgeplug("validate", "--offline", "--config", path.join("config", file));
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, "ok\n");
    })
  ));
});

test("validate rejects a bad policy with exit 2 and every located error on stderr", async (t) => {
  const file = tempPolicy(t, "version: 1\nwatch:\n  - path: relative/dir\nsurprise: true\n");
  const result = await edgeplug("validate", "--config", file);
  assert.equal(result.code, 2);
  assert.equal(result.stdout, "");
  const lines = result.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 2, result.stderr);
  assert.ok(lines.some((line) => line.startsWith(`${file}:3:`) && line.includes("watch[0].path")), result.stderr);
  assert.ok(lines.some((line) => line.startsWith(`${file}:4:1: surprise:`)), result.stderr);
});

test("validate of a missing file is exit 2 naming the file", async () => {
  const missing = path.join(os.tmpdir(), "ep-no-such-dir", "policy.yaml");
  const result = await edgeplug("validate", "--config", missing);
  assert.equal(result.code, 2);
  assert.ok(result.stderr.includes(missing), result.stderr);
});

test("validate without --config checks the policy the agent would use", async () => {
  const result = await edgeplug("validate");
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, "ok\n");
});

test("--log-level is accepted by every command, anywhere, and reaches the logger", async () => {
  const [after, before, equals] = await Promise.all([
    edgeplug("validate", "--config", devPolicy, "--log-level", "debug"),
    edgeplug("--log-level", "debug", "validate", "--config", devPolicy),
    edgeplug("validate", "--log-level=error", "--config", devPolicy),
  ]);
  for (const result of [after, before]) {
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "ok\n");
    const record = JSON.parse(result.stderr.trim().split("\n").at(-1)!);
    assert.equal(record.level, "debug");
    assert.equal(record.msg, "policy is valid");
  }
  assert.equal(equals.code, 0);
  assert.equal(equals.stderr, "", "nothing below error is logged");
});

test("--log-level with a bad or missing value is bad usage", { concurrency: true }, async (t) => {
  const cases = [["version", "--log-level", "loud"], ["version", "--log-level"]];
  await Promise.all(cases.map((args) =>
    t.test(args.join(" "), async () => {
      const result = await edgeplug(...args);
      assert.equal(result.code, 2);
      assert.match(result.stderr, /--log-level/);
      assert.equal(result.stdout, "");
    })
  ));
});

test("the same entry runs under Deno: version names deno, validate works", async () => {
  const deno = path.join(repoRoot, "node_modules", ".bin", "deno");
  const [version, valid] = await Promise.all([
    spawn(deno, ["run", "-A", mainScript, "version"]),
    spawn(deno, ["run", "-A", mainScript, "validate", "--config", devPolicy]),
  ]);
  assert.equal(version.code, 0, version.stderr);
  assert.match(version.stdout.trimEnd(), /^edgeplug \d+\.\d+\.\d+ deno v2\.\d+\.\d+ \S+-\S+ \S+$/);
  assert.equal(valid.code, 0, valid.stderr);
  assert.equal(valid.stdout, "ok\n");
});

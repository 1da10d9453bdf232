/**
 * What the executable prints, under hostile input and hostile output: plugin
 * strings with terminal control characters are shown escaped in every text
 * output (JSON stays JSON), a closed or full stdout ends the command without
 * a stack trace, and absurd flag values are usage errors.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { policyWithRegistry, requireBinary, runEdgeplug, startDaemon, startEdgeplug } from "./support/agent-process.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { killAfter } from "./support/child-cleanup.ts";

/** What a terminal acts on: C0 (newline aside), DEL, C1. */
// deno-lint-ignore no-control-regex
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;
/** A type no handler takes, carrying an escape sequence, a carriage return, a bell and a forged row. */
const hostileType = "evil.io/\u001b[31mRed\u0007\r\nregistered  acme.io/Sensor  forged";
const hostile = { type: hostileType, name: "evil.io/\u001b]0;pwned\u0007name", versions: ["v1"] };

function assertNoRawControl(text: string, what: string): void {
  assert.doesNotMatch(text, RAW_CONTROL, `${what} holds a raw control character:\n${JSON.stringify(text)}`);
}

test("status, status --watch, probe and the report show plugin strings with control characters escaped", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const watcher = startEdgeplug(["status", "--api", policy.apiSocket, "--watch"]);
  killAfter(t, watcher.child);
  await outputIncludes(watcher.child.stdout!, () => watcher.stdout(), "no plugin sockets found");
  const evil = await startTestPlugin(t, { socketPath: path.join(policy.registry, "evil.sock"), info: hostile });
  await evil.waitForNotify();

  const text = await runEdgeplug(["status", "--api", policy.apiSocket, "--exit-zero"]);
  assert.equal(text.code, 0, text.stderr);
  assertNoRawControl(text.stdout, "status");
  assert.match(text.stdout, /evil\.io\/\\e\[31mRed\\x07\\r\\nregistered {2}acme\.io\/Sensor {2}forged/);
  const rows = text.stdout.split("\n").filter((line) => line.includes(evil.socketPath));
  assert.equal(rows.length, 1, `one row for the socket, none forged:\n${text.stdout}`);
  assert.match(rows[0]!, /^failed\s/);

  const json = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json", "--exit-zero"]);
  const shown = JSON.parse(json.stdout);
  assert.match(shown.plugins[0].error, new RegExp(hostileType.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&")), "JSON keeps the string as it is");

  await outputIncludes(watcher.child.stdout!, () => watcher.stdout(), `failed     ${evil.socketPath}`);
  assertNoRawControl(watcher.stdout(), "status --watch");
  assert.match(watcher.stdout(), /plugin failed\s+\S+evil\.sock \(evil\.io\/\\e\[31mRed\\x07\\r\\n/);

  const probe = await runEdgeplug(["probe", evil.socketPath, "--config", policy.path]);
  assertNoRawControl(probe.stdout, "probe");
  assert.match(probe.stdout, /^name:\s+evil\.io\/\\e\]0;pwned\\x07name$/m);

  watcher.child.kill("SIGINT");
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
  const report = await runEdgeplug(["run", "--config", policy.path, "--reconcile-once", "--timeout", "2s"]);
  assert.equal(report.code, 1, report.stderr);
  assertNoRawControl(report.stdout, "the report");
  assert.match(report.stdout, /^failed: \S+evil\.sock \(evil\.io\/\\e\]0;pwned\\x07name\): /m);
});

test("a reader that goes away ends the command quietly, keeping its exit code", async (t) => {
  const policy = policyWithRegistry(t);
  for (const args of [["version"], ["--help"], ["validate", "--config", policy.path], ["run", "--config", policy.path, "--reconcile-once", "--output", "json"]]) {
    const child = spawn(requireBinary(), args, { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.destroy(); // the read end closes before edgeplug writes: its write fails with EPIPE
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const [code] = await once(child, "close");
    assert.equal(code, 0, `${args.join(" ")}: ${stderr}`);
    assert.doesNotMatch(stderr, /EPIPE|Error:|\n\s+at /, `${args.join(" ")} printed:\n${stderr}`);
  }
});

test("status --output json | head -c 10 prints its 10 bytes and no error", async (t) => {
  const { policy } = await startDaemon(t);
  const child = spawn("sh", ["-c", `'${requireBinary()}' status --api '${policy.apiSocket}' --output json | head -c 10`], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  await once(child, "close");
  assert.equal(stdout, '{\n  "ok": ');
  assert.equal(stderr, "");
});

test("a full disk on stdout is one line on stderr and exit 1", async () => {
  for (const args of [["version"], ["status", "--help"]]) {
    const full = fs.openSync("/dev/full", "w");
    const child = spawn(requireBinary(), args, { stdio: ["ignore", full, "pipe"] });
    fs.closeSync(full);
    let stderr = "";
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const [code] = await once(child, "close");
    assert.equal(code, 1, args.join(" "));
    assert.equal(stderr, "edgeplug: cannot write the output to stdout: no space left on device (ENOSPC)\n");
  }
});

test("negative, zero, absurd and empty flag values are usage errors naming the flag", { concurrency: true }, async (t) => {
  const policy = policyWithRegistry(t);
  const once = ["run", "--config", policy.path, "--reconcile-once"];
  const cases: [string[], RegExp][] = [
    [[...once, "--timeout", "-1s"], /^edgeplug run: --timeout: must not be negative, got "-1s"$/m],
    [[...once, "--timeout=-5m"], /^edgeplug run: --timeout: must not be negative, got "-5m"$/m],
    [[...once, "--timeout", "0"], /^edgeplug run: --timeout: must be more than 0, got "0"$/m],
    [[...once, "--timeout", "1000h"], /^edgeplug run: --timeout: must be at most 596h31m23\.647s \(2\^31-1 ms\), got "1000h"$/m],
    [[...once, "--timeout", "soon"], /^edgeplug run: --timeout: expected a duration like "30s", got "soon"$/m],
    [[...once, "--expect", "-1"], /^edgeplug run: --expect: must not be negative, got "-1"$/m],
    [[...once, "--expect", "2.5"], /^edgeplug run: --expect: expected a whole number of plugins \(0 or more\), got "2\.5"$/m],
    [[...once, "--expect", "99999999999999999999"], /--expect: expected a whole number of plugins/],
    [[...once, "--expect", "5000"], /^edgeplug run: --expect: 5000 can never be met: the policy \S+ allows at most 1024 plugins \(security\.maxPlugins\)$/m],
    [[...once, "--require", ""], /^edgeplug run: --require: expected a plugin name, got ""$/m],
    [[...once, "--require", "  "], /^edgeplug run: --require: expected a plugin name, got " {2}"$/m],
    [["run", "--config", policy.path, "--strict"], /^edgeplug run: --strict needs --reconcile-once$/m],
  ];
  await Promise.all(
    cases.map(([args, message]) =>
      t.test(args.slice(4).join(" ") || args.join(" "), async () => {
        const result = await runEdgeplug(args);
        assert.equal(result.code, 2, result.stderr);
        assert.match(result.stderr, message);
        assert.match(result.stderr, /Run 'edgeplug run --help' for usage\./);
        assert.equal(result.stdout, "");
      })
    ),
  );
});

/** Resolves once the child's output so far (`output()`) includes `text`, waking on each chunk it writes. */
function outputIncludes(stream: NodeJS.ReadableStream, output: () => string, text: string, timeoutMs = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (!output().includes(text)) return;
      finish();
      resolve();
    };
    const timer = setTimeout(() => {
      finish();
      reject(new Error(`no ${JSON.stringify(text)} in the output within ${timeoutMs} ms:\n${output()}`));
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      stream.off("data", check);
    };
    // Listeners run in order: agent-process.ts's own listener has appended the chunk when this one runs.
    stream.on("data", check);
    check();
  });
}

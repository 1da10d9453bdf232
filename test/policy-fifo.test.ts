/**
 * A FIFO as the policy file, on dist/edgeplug: nothing ever writes to it,
 * and nothing waits on it. `validate` and `run` refuse it at once, naming
 * it; a SIGHUP reload that finds one refuses it and keeps the running
 * policy, and the agent still stops on SIGTERM. Before, each of them waited
 * in open(2) until something wrote to the FIFO.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { type AgentProcess, startDaemon, startEdgeplug } from "./support/agent-process.ts";
import { tempDir } from "./support/temp-dir.ts";

/** A named pipe at `file`, made by mkfifo(1) (Node has no mkfifo). */
function makeFifo(file: string): string {
  execFileSync("mkfifo", [file]);
  return file;
}

/** Resolves with the exit of `agent`; fails naming `what` if it has not exited within 10 s (and kills it). */
async function exitedWithin(agent: AgentProcess, what: string): Promise<{ code: number | null }> {
  const timer = setTimeout(() => agent.child.kill("SIGKILL"), 10_000);
  const exit = await agent.exited;
  clearTimeout(timer);
  assert.notEqual(exit.signal, "SIGKILL", `${what} had not exited after 10 s; stderr:\n${agent.stderr()}`);
  return exit;
}

test("dist/edgeplug: validate and run refuse a FIFO as the policy file at once, naming it", async (t) => {
  const fifo = makeFifo(path.join(tempDir(t), "policy.yaml"));
  const validate = startEdgeplug(["validate", "--config", fifo]);
  const validated = await exitedWithin(validate, "validate");
  assert.equal(validated.code, 2, validate.stderr());
  assert.ok(validate.stderr().includes(`${fifo}: cannot read the policy file: expected a regular file, got a FIFO`), validate.stderr());

  const run = startEdgeplug(["run", "--config", fifo]);
  const ran = await exitedWithin(run, "run");
  assert.equal(ran.code, 2, run.stderr());
  assert.ok(run.stderr().includes("expected a regular file, got a FIFO"), run.stderr());
});

test("dist/edgeplug: a SIGHUP reload that finds a FIFO refuses it and keeps the running policy; SIGTERM still stops the agent", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const fifo = makeFifo(path.join(path.dirname(policy.path), "fifo"));
  fs.renameSync(fifo, policy.path);
  agent.child.kill("SIGHUP");
  const refused = await agent.waitForLog("policy reload refused; the running policy stays in force");
  assert.match(JSON.stringify(refused), /cannot read the policy file: expected a regular file, got a FIFO/);
  agent.child.kill("SIGTERM");
  assert.equal((await exitedWithin(agent, "the agent after SIGTERM")).code, 0, agent.stderr());
});

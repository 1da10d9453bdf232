/**
 * A SIGHUP reload of a hostile policy under the size cap does not hold the
 * agent (issue 7, defect 7): the check is bounded and its YAML scan runs in
 * slices, so the API answers while it runs, and the policy is then refused
 * with a located error while the running one stays.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import { test } from "node:test";
import { type AgentProcess, startDaemon } from "./support/agent-process.ts";

const READ = "reloading the policy";
const REFUSED = "policy reload refused; the running policy stays in force";

/** Resolves once `agent` has logged `message` `count` times, re-checked on each chunk of its stderr. */
function logged(agent: AgentProcess, message: string, count: number): Promise<void> {
  const enough = () => agent.logs().filter((record) => record.msg === message).length >= count;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(`timed out waiting for ${count} x ${JSON.stringify(message)}`)), 30_000);
    const check = () => enough() && finish();
    const finish = (error?: Error) => {
      clearTimeout(timer);
      agent.child.stderr!.off("data", check);
      if (error) reject(error);
      else resolve();
    };
    agent.child.stderr!.on("data", check);
    check();
  });
}

/** The agent's Status, as curl would ask it (Connect, JSON over HTTP/1.1 on the API socket). */
function status(socketPath: string): Promise<{ plugins: unknown[] }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { socketPath, method: "POST", path: "/edgeplug.v1.Agent/Status", headers: { "content-type": "application/json" } },
      (response) => {
        let body = "";
        response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
        response.on("end", () => (response.statusCode === 200 ? resolve(JSON.parse(body)) : reject(new Error(`${response.statusCode}: ${body}`))));
      },
    );
    request.on("error", reject);
    request.end("{}");
  });
}

test("the agent answers status while a SIGHUP reload checks a hostile policy, then refuses it where it goes past a bound", async (t) => {
  const { policy, agent } = await startDaemon(t);
  // 60k comment lines (600 KB, under the 1 MiB cap): the longest scan the bounds allow, then past the token bound.
  fs.appendFileSync(policy.path, "# hostile\n".repeat(60_000));
  let answeredDuringReload = 0;
  // The agent logs READ just before checking; a status answered before REFUSED was answered during the check.
  // A loaded machine may run the whole check before the request arrives, so a few reloads are tried.
  for (let reload = 1; reload <= 5 && answeredDuringReload === 0; reload++) {
    agent.child.kill("SIGHUP");
    await logged(agent, READ, reload);
    const answer = await status(policy.apiSocket);
    assert.deepEqual(answer.plugins, []);
    if (agent.logs().filter((record) => record.msg === REFUSED).length < reload) answeredDuringReload++;
    await logged(agent, REFUSED, reload);
  }
  assert.ok(answeredDuringReload > 0, "status was answered while a reload was checking the policy");
  const refused = agent.logs().find((record) => record.msg === REFUSED)!;
  assert.match(JSON.stringify(refused), /policy\.yaml:\d+:\d+: expected a policy of at most 100000 YAML tokens/);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0, agent.stderr());
});

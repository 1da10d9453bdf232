import { test } from "node:test";
import assert from "node:assert/strict";
import { CLEAN_RESTART_MARKER, ignoredWarning, LIBRARY_VARIABLES, planEnvironment, RUNTIME_VARIABLES, UNIT_ONLY_VARIABLES } from "./runtime-environment.ts";

const plain = { ipcChannel: false, clusterWorker: false };

test("an environment with none of the variables runs as it is", () => {
  assert.deepEqual(planEnvironment({ PATH: "/usr/bin", TZ: "UTC", NOTIFY_SOCKET: "/run/systemd/notify", NODE_PATH: "/x" }, plain), {
    action: "run",
  });
});

test("variables only the bundle's libraries read are stripped without a restart", () => {
  assert.deepEqual(planEnvironment({ LOG_TOKENS: "1", BUF_BIGINT_DISABLE: "1", PATH: "/usr/bin" }, plain), {
    action: "strip",
    ignored: ["LOG_TOKENS", "BUF_BIGINT_DISABLE"],
  });
});

test("a variable the runtime read at start means a restart with everything else kept and the marker set", () => {
  const plan = planEnvironment({ NODE_V8_COVERAGE: "/tmp/c", LOG_STREAM: "1", PATH: "/usr/bin", NOTIFY_SOCKET: "@n" }, plain);
  assert.deepEqual(plan, {
    action: "restart",
    ignored: ["NODE_V8_COVERAGE", "LOG_STREAM"],
    env: { PATH: "/usr/bin", NOTIFY_SOCKET: "@n", [CLEAN_RESTART_MARKER]: "1" },
  });
});

test("presence counts, not the value: an empty NODE_UNIQUE_ID still makes Node a cluster worker", () => {
  const plan = planEnvironment({ NODE_UNIQUE_ID: "" }, plain);
  assert.equal(plan.action, "restart");
  assert.deepEqual(plan.action === "restart" && plan.ignored, ["NODE_UNIQUE_ID"]);
});

test("an IPC channel or a cluster worker Node set up counts as the variable it removed from the environment", () => {
  const channel = planEnvironment({ PATH: "/usr/bin" }, { ipcChannel: true, clusterWorker: false });
  assert.deepEqual(channel.action === "restart" && channel.ignored, ["NODE_CHANNEL_FD"]);
  const both = planEnvironment({ PATH: "/usr/bin" }, { ipcChannel: true, clusterWorker: true });
  assert.deepEqual(both.action === "restart" && both.ignored, ["NODE_CHANNEL_FD", "NODE_UNIQUE_ID"]);
  const worker = planEnvironment({}, { ipcChannel: false, clusterWorker: true });
  assert.deepEqual(worker.action === "restart" && worker.ignored, ["NODE_UNIQUE_ID"]);
});

test("after the restart, a runtime variable still present is refused instead of restarting again", () => {
  assert.deepEqual(planEnvironment({ NODE_DEBUG: "net", [CLEAN_RESTART_MARKER]: "1" }, plain), {
    action: "refuse",
    ignored: ["NODE_DEBUG"],
  });
  assert.deepEqual(planEnvironment({ [CLEAN_RESTART_MARKER]: "1", PATH: "/usr/bin" }, plain), { action: "run" });
});

test("every variable is listed once, with the effect it has", () => {
  const all = [...RUNTIME_VARIABLES, ...LIBRARY_VARIABLES, ...UNIT_ONLY_VARIABLES];
  assert.equal(new Set(all.map(({ name }) => name)).size, all.length);
  for (const { name, effect } of all) {
    assert.match(name, /^[A-Z][A-Z0-9_]*$/);
    assert.ok(effect.length > 10, name);
  }
});

test("the warning is one line naming the ignored variables", () => {
  const warning = ignoredWarning(["NODE_DEBUG", "UV_THREADPOOL_SIZE"]);
  assert.match(warning, /^edgeplug: warning: ignoring NODE_DEBUG, UV_THREADPOOL_SIZE from the environment: [^\n]+\n$/);
});

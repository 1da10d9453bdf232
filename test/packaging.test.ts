/**
 * Issue 12: the systemd unit, the INSTALL text, the default policy and
 * docs/install.md describe one installation. These checks catch drift: a
 * default path that the unit does not make writable, an install step that
 * puts the executable or policy where the unit does not look, a hardening
 * setting docs/install.md does not explain.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { DEFAULT_POLICY_PATH, loadPolicyFile } from "../src/policy/load.ts";
import { LIBRARY_VARIABLES, RUNTIME_VARIABLES, UNIT_ONLY_VARIABLES } from "../src/platform/runtime-environment.ts";

const root = fileURLToPath(new URL("../", import.meta.url));
const read = (file: string) => fs.readFileSync(path.join(root, file), "utf8");

/** The unit's [Service] settings: key -> every value it is given, in order. */
function serviceSettings(): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  let section = "";
  for (const line of read("packaging/edgeplug.service").split("\n")) {
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) section = header[1]!;
    const setting = /^(\w+)=(.*)$/.exec(line);
    if (section === "Service" && setting) settings.set(setting[1]!, [...(settings.get(setting[1]!) ?? []), setting[2]!]);
  }
  return settings;
}

const within = (dir: string, file: string) => file === dir || file.startsWith(`${dir}/`);

test("the unit runs the installed executable with the default policy path, as a notify service that reloads on SIGHUP", () => {
  const unit = serviceSettings();
  assert.deepEqual(unit.get("ExecStart"), [`/usr/local/bin/edgeplug run --config ${DEFAULT_POLICY_PATH}`]);
  assert.deepEqual(unit.get("Type"), ["notify"]);
  assert.deepEqual(unit.get("NotifyAccess"), ["all"], "the notifications come from a systemd-notify child");
  assert.deepEqual(unit.get("ExecReload"), ["kill -HUP $MAINPID"]);
  assert.deepEqual(unit.get("Restart"), ["on-failure"]);
  assert.deepEqual(unit.get("MemoryDenyWriteExecute"), ["no"], "V8's JIT needs writable, then executable memory");
  const install = read("packaging/INSTALL");
  assert.match(install, /install -m 0755 edgeplug \/usr\/local\/bin\/edgeplug/);
  assert.ok(install.includes(`policy.yaml ${DEFAULT_POLICY_PATH}`), "INSTALL puts the policy where the unit reads it");
  assert.match(install, /edgeplug\.service \/etc\/systemd\/system\/edgeplug\.service/);
});

test("every place the default policy writes is writable under ProtectSystem=strict", async () => {
  const unit = serviceSettings();
  assert.deepEqual(unit.get("ProtectSystem"), ["strict"]);
  const writable = [
    ...(unit.get("RuntimeDirectory") ?? []).map((name) => `/run/${name}`),
    ...(unit.get("StateDirectory") ?? []).map((name) => `/var/lib/${name}`),
    ...(unit.get("ReadWritePaths") ?? []).flatMap((value) => value.split(/\s+/)).map((entry) => entry.replace(/^-/, "")),
  ];
  const policy = await loadPolicyFile(path.join(root, "config", "default.yaml"));
  const written = [
    ...policy.watch.map((dir) => dir.path),
    policy.api.socket,
    policy.checkpoint.path,
    policy.devicePlugins.registrationSocket,
  ].filter((file): file is string => file !== null);
  for (const file of written) {
    assert.ok(writable.some((dir) => within(dir, file)), `${file} is under one of ${writable.join(", ")}`);
  }
});

test("docs/install.md explains every setting of the unit's [Service] section", () => {
  const docs = read("docs/install.md");
  const missing = [...serviceSettings().keys()].filter((key) => !docs.includes(key));
  assert.deepEqual(missing, []);
});

test("the unit passes none of the variables that would configure the runtime inside edgeplug, and docs/install.md names each", () => {
  const unset = (serviceSettings().get("UnsetEnvironment") ?? []).flatMap((value) => value.split(/\s+/));
  const variables = [...RUNTIME_VARIABLES, ...LIBRARY_VARIABLES, ...UNIT_ONLY_VARIABLES].map(({ name }) => name);
  assert.deepEqual([...unset].sort(), [...variables].sort());
  const docs = read("docs/install.md");
  assert.deepEqual(variables.filter((name) => !docs.includes(`\`${name}\``)), []);
});

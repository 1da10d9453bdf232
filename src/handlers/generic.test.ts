import assert from "node:assert/strict";
import { test } from "node:test";
import type { HandlerPolicy } from "../policy/types.ts";
import type { PluginRegistration } from "../pluginmanager/types.ts";
import { createGenericHandler } from "./generic.ts";

const policy = (versions: string[] | null): HandlerPolicy => ({ type: "acme.io/Sensor", kind: "generic", versions, allow: ["*"], deny: [] });
const plugin = (socket: string, versions = ["v1"]): PluginRegistration => ({
  socket,
  type: "acme.io/Sensor",
  name: "acme.io/temp",
  endpoint: `${socket}.svc`,
  versions,
});

test("ten sockets with one name are all tracked, with endpoint and versions; deregistering one keeps the others", async () => {
  const handler = createGenericHandler(policy(null));
  const sockets = Array.from({ length: 10 }, (_, i) => `/r/p${i}.sock`);
  for (const socket of sockets) await handler.registerPlugin(plugin(socket));
  assert.deepEqual(handler.plugins().map((p) => p.socket), [...sockets].sort());
  assert.deepEqual(handler.plugins()[0], plugin("/r/p0.sock"));
  handler.deregisterPlugin(plugin("/r/p3.sock"));
  assert.equal(handler.plugins().length, 9);
  assert.ok(!handler.plugins().some((p) => p.socket === "/r/p3.sock"));
});

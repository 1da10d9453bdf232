import { test } from "node:test";
import assert from "node:assert/strict";
import { createLogger } from "../log/logger.ts";
import { connected, newManager, R1 } from "../../test/support/device-manager-harness.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { waitForDeviceState } from "../../test/support/fake-device-plugin.ts";
import { HEALTH_LOG_INTERVAL_MS, logDeviceHealth } from "./health-log.ts";

const devices3 = (unhealthy: string[]) => ["d0", "d1", "d2"].map((ID) => ({ ID, health: unhealthy.includes(ID) ? "Unhealthy" : "Healthy" }));

test("health changes: one line per change, changes within the interval told together in one line, timers cleared on stop", async (t) => {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: "info", write: (line) => void lines.push(JSON.parse(line)) });
  const clock = manualClock(1_000_000);
  const devices = newManager(t);
  const stop = logDeviceHealth(devices, log, clock);
  const plugin = await connected(t, devices, R1, { devices: devices3([]) });
  const health = () => lines.filter((line) => line.msg === "device health changed");
  const listed = (unhealthy: string[]) => waitForDeviceState(devices, `unhealthy ${unhealthy}`, () => JSON.stringify(devices.resource(R1)?.unhealthy) === JSON.stringify(unhealthy));
  assert.equal(health().length, 0, "a first list of healthy devices is no health change");

  plugin.setDevices(devices3(["d1"]));
  await listed(["d1"]);
  await waitForDeviceState(devices, "the first line", () => health().length === 1);
  assert.deepEqual([health()[0]!.healthy, health()[0]!.unhealthy, health()[0]!.turnedUnhealthy, health()[0]!.turnedHealthy], [2, 1, ["d1"], []]);

  // Within the interval: held back, whatever flaps meanwhile.
  plugin.setDevices(devices3(["d2"]));
  await listed(["d2"]);
  plugin.setDevices(devices3(["d0", "d2"]));
  await listed(["d0", "d2"]);
  assert.equal(health().length, 1);
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(HEALTH_LOG_INTERVAL_MS);
  assert.equal(health().length, 2);
  assert.deepEqual([health()[1]!.healthy, health()[1]!.unhealthy, health()[1]!.turnedUnhealthy, health()[1]!.turnedHealthy], [1, 2, ["d0", "d2"], ["d1"]]);

  // A flap that comes back within the interval makes no line.
  plugin.setDevices(devices3(["d0"]));
  await listed(["d0"]);
  plugin.setDevices(devices3(["d0", "d2"]));
  await listed(["d0", "d2"]);
  clock.advance(HEALTH_LOG_INTERVAL_MS);
  assert.equal(health().length, 2);

  // The interval since the last line is over: told at once.
  plugin.setDevices(devices3([]));
  await waitForDeviceState(devices, "the third line", () => health().length === 3);
  assert.deepEqual([health()[2]!.turnedUnhealthy, health()[2]!.turnedHealthy], [[], ["d0", "d2"]]);
  assert.equal(clock.pendingTimers(), 0);

  plugin.setDevices(devices3(["d1"]));
  await listed(["d1"]);
  assert.equal(clock.pendingTimers(), 1, "held back");
  stop();
  assert.equal(clock.pendingTimers(), 0, "stop clears the timer");
});

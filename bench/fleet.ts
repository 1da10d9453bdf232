/**
 * Fleet benchmark (docs/fleet.md) of the built daemon: three agents at once,
 * one with the fleet off, one publishing to a Mosquitto on loopback, one
 * given a broker that is down, measured in turns so that load on the machine
 * falls on all three alike:
 *   - registration p50 (a plugin listening -> its NotifyRegistrationStatus),
 *     and each fleet agent's ratio to the agent without it (target <= 1.1);
 *   - a plugin registered (its NotifyRegistrationStatus arrived) -> a
 *     subscriber sees it in the retained status,
 *     p50 with `minInterval: 0s` (target <= 20 ms);
 *   - idle: RSS (and its private part) and CPU of each agent over a window,
 *     and its voluntary context switches (wakeups: the main thread's and
 *     all threads'), against the agent without the fleet (target: at most
 *     3 MB more, and no wakeup between keepalives beyond the one online
 *     refresh per keepalive that replaces the ping: its timer and its
 *     acknowledgement);
 *   - the sizes of the payloads, for docs/fleet.md's arithmetic.
 * Env: BENCH_FLEET_TRIALS (default 40), BENCH_FLEET_IDLE_MS (default 30 s).
 */
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { setTimeout as sleep } from "node:timers/promises";
import { type AgentProcess, shortTempDir, startEdgeplug } from "../test/support/agent-process.ts";
import { freePort, startMosquitto, subscribe, writeFleetPolicy } from "../test/support/brokers.ts";
import { startFakePlugin } from "../test/support/fake-plugin.ts";
import { clockTicksPerSecond, cpuTicks, residentMemory } from "./support/proc.ts";

const TRIALS = Number(process.env.BENCH_FLEET_TRIALS) || 40;
const IDLE_MS = Number(process.env.BENCH_FLEET_IDLE_MS) || 30_000;
const KEEPALIVE_S = 10;
const TARGET_REGISTRATION_RATIO = 1.1;
const TARGET_STATUS_P50_MS = 20;
const TARGET_IDLE_RSS_KIB = 3 * 1024;

type Mode = "off" | "on" | "down";

function progress(text: string): void {
  process.stderr.write(`bench fleet: ${text}\n`);
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]! * 100) / 100;
}

/**
 * Voluntary context switches (a thread blocked, then woke): the main
 * thread's, where every timer and socket read of the link runs, and all
 * threads' (V8's workers wake for the garbage collector whatever the link
 * does, tens of times a minute, fleet or not).
 */
function voluntarySwitches(pid: number): { main: number; all: number } {
  let main = 0;
  let all = 0;
  for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
    const status = fs.readFileSync(`/proc/${pid}/task/${task}/status`, "utf8");
    const count = Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? 0);
    all += count;
    if (task === String(pid)) main += count;
  }
  return { main, all };
}

export async function run(): Promise<object> {
  const cleanups: Array<() => unknown> = [];
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) };
  const { dir, cleanup } = shortTempDir("bf-");
  try {
    const broker = await startMosquitto(t);
    const nobody = `mqtt://127.0.0.1:${await freePort()}`;
    const fleets: Record<Mode, string | null> = {
      off: null,
      on: `  brokers: ["${broker.url}"]\n  keepalive: ${KEEPALIVE_S}s\n  minInterval: 0s`,
      down: `  brokers: ["${nobody}"]\n  keepalive: ${KEEPALIVE_S}s\n  minInterval: 0s`,
    };
    const agents = {} as Record<Mode, { agent: AgentProcess; registry: string }>;
    for (const mode of ["off", "on", "down"] as const) {
      const policy = writeFleetPolicy(path.join(dir, mode), `bench-${mode}`, fleets[mode]);
      const agent = startEdgeplug(["run", "--config", policy.path]);
      cleanups.push(() => agent.terminate());
      await agent.waitForLog("edgeplug running");
      agents[mode] = { agent, registry: policy.registry };
    }
    await agents.on.agent.waitForLog("fleet link connected");
    const watcher = await subscribe(t, broker.url, "edgeplug/v1/bench-on/status");

    progress(`${TRIALS} registrations on each agent, in turns; the status seen by a subscriber`);
    const registration: Record<Mode, number[]> = { off: [], on: [], down: [] };
    const statusSeen: number[] = [];
    for (let trial = 0; trial < TRIALS + 5; trial++) {
      for (const mode of ["off", "on", "down"] as const) {
        const name = `acme.io/bench-${trial}`;
        const seenBefore = watcher.messages.length;
        const started = performance.now();
        const plugin = await startFakePlugin({ socketPath: path.join(agents[mode].registry, `p${trial}.sock`), info: { type: "acme.io/Sensor", name, versions: ["v1"] } });
        await plugin.waitForNotify();
        const registeredAt = performance.now();
        const registered = registeredAt - started;
        if (mode === "on") {
          await watcher.waitFor(
            "the status with the new plugin",
            (messages) => messages.slice(seenBefore).some((m) => JSON.parse(m.text).plugins.some((p: Record<string, unknown>) => p.name === name && p.state === "registered")),
          );
          const seen = watcher.messages.slice(seenBefore).find((m) => JSON.parse(m.text).plugins.some((p: Record<string, unknown>) => p.name === name && p.state === "registered"))!;
          if (trial >= 5) statusSeen.push(seen.at - (performance.timeOrigin + registeredAt));
        }
        if (trial >= 5) registration[mode].push(registered);
        const seenBeforeStop = watcher.messages.length;
        await plugin.stop();
        // The fleet agent's publishes after the plugin left must not fall on the next agent's registration.
        if (mode === "on") {
          await watcher.waitFor(
            "the status without the plugin",
            (messages) => messages.slice(seenBeforeStop).some((m) => !JSON.parse(m.text).plugins.some((p: Record<string, unknown>) => p.name === name)),
          );
        }
      }
    }
    const p50 = (mode: Mode) => percentile(registration[mode], 0.5);

    progress(`idle ${IDLE_MS / 1000} s with 10 plugins each`);
    const plugins = [];
    for (const mode of ["off", "on", "down"] as const) {
      for (let i = 0; i < 10; i++) {
        const plugin = await startFakePlugin({ socketPath: path.join(agents[mode].registry, `idle${i}.sock`), info: { type: "acme.io/Sensor", name: `acme.io/idle-${i}`, versions: ["v1"] } });
        plugins.push(plugin);
        await plugin.waitForNotify();
      }
    }
    await sleep(3_000);
    const before = Object.fromEntries(
      (["off", "on", "down"] as const).map((mode) => [mode, { ticks: cpuTicks(agents[mode].agent.child.pid!), switches: voluntarySwitches(agents[mode].agent.child.pid!) }]),
    );
    await sleep(IDLE_MS);
    const ticksPerSecond = clockTicksPerSecond();
    const idle = Object.fromEntries(
      (["off", "on", "down"] as const).map((mode) => {
        const pid = agents[mode].agent.child.pid!;
        const switches = voluntarySwitches(pid);
        const perMinute = (count: number) => Math.round((count * 60_000) / IDLE_MS);
        const memory = residentMemory(pid);
        return [mode, {
          rssKiB: memory.rssKiB,
          anonKiB: memory.anonKiB,
          fileKiB: memory.fileKiB,
          cpuMs: ((cpuTicks(pid) - before[mode]!.ticks) * 1000) / ticksPerSecond,
          wakeupsPerMinute: perMinute(switches.all - before[mode]!.switches.all),
          mainThreadWakeupsPerMinute: perMinute(switches.main - before[mode]!.switches.main),
        }];
      }),
    ) as Record<Mode, { rssKiB: number; anonKiB: number; fileKiB: number; cpuMs: number; wakeupsPerMinute: number; mainThreadWakeupsPerMinute: number }>;
    const statusPayload = watcher.messages.at(-1)?.text ?? "";
    const eventsWatcher = await subscribe(t, broker.url, "edgeplug/v1/bench-on/#");
    await eventsWatcher.waitFor("the retained online and status", (messages) => messages.length >= 2);
    const online = eventsWatcher.messages.find((m) => m.topic.endsWith("/online"))?.text ?? "";
    for (const plugin of plugins) await plugin.stop();
    await eventsWatcher.waitFor("plugin events", (messages) => messages.some((m) => m.topic.endsWith("/events")));
    const event = eventsWatcher.messages.find((m) => m.topic.endsWith("/events"))?.text ?? "";

    return {
      setup:
        `three dist/edgeplug agents at once (fleet off; on, Mosquitto on loopback; on, the broker down), keepalive ${KEEPALIVE_S}s, minInterval 0s; @grpc/grpc-js plugins in this process, in turns`,
      registrationP50Ms: {
        off: p50("off"),
        on: p50("on"),
        brokerDown: p50("down"),
        ratioOn: Math.round((p50("on") / p50("off")) * 100) / 100,
        ratioBrokerDown: Math.round((p50("down") / p50("off")) * 100) / 100,
        target: TARGET_REGISTRATION_RATIO,
        meetsTarget: p50("on") / p50("off") <= TARGET_REGISTRATION_RATIO && p50("down") / p50("off") <= TARGET_REGISTRATION_RATIO,
      },
      registeredToStatusSeen: {
        p50Ms: percentile(statusSeen, 0.5),
        p90Ms: percentile(statusSeen, 0.9),
        trials: statusSeen.length,
        targetP50Ms: TARGET_STATUS_P50_MS,
        meetsTarget: percentile(statusSeen, 0.5) <= TARGET_STATUS_P50_MS,
      },
      idle: {
        windowMs: IDLE_MS,
        plugins: 10,
        agents: idle,
        rssAddedKiB: { on: idle.on.rssKiB - idle.off.rssKiB, brokerDown: idle.down.rssKiB - idle.off.rssKiB, targetKiB: TARGET_IDLE_RSS_KIB },
        // Private memory (heap, malloc): what the link holds. The rest of RSS is pages of the executable file, shared
        // and clean, whose count varies by megabytes between processes with how the page cache maps them.
        anonAddedKiB: { on: idle.on.anonKiB - idle.off.anonKiB, brokerDown: idle.down.anonKiB - idle.off.anonKiB },
        cpuAddedMs: { on: idle.on.cpuMs - idle.off.cpuMs, brokerDown: idle.down.cpuMs - idle.off.cpuMs },
        wakeupsAddedPerMinute: { on: idle.on.wakeupsPerMinute - idle.off.wakeupsPerMinute, brokerDown: idle.down.wakeupsPerMinute - idle.off.wakeupsPerMinute, keepalivesPerMinute: 60 / KEEPALIVE_S },
        // Per keepalive, the link's own: the online refresh's timer and its acknowledgement's arrival.
        mainThreadWakeupsAddedPerKeepalive: {
          on: Math.round(((idle.on.mainThreadWakeupsPerMinute - idle.off.mainThreadWakeupsPerMinute) * KEEPALIVE_S) / 6) / 10,
          brokerDown: Math.round(((idle.down.mainThreadWakeupsPerMinute - idle.off.mainThreadWakeupsPerMinute) * KEEPALIVE_S) / 6) / 10,
        },
      },
      payloadBytes: { online: Buffer.byteLength(online), statusWith10Plugins: Buffer.byteLength(statusPayload), pluginEvent: Buffer.byteLength(event) },
    };
  } finally {
    for (const fn of cleanups.reverse()) await fn();
    cleanup();
  }
}

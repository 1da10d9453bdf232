import assert from "node:assert/strict";
import { test } from "node:test";
import { createLogger } from "../log/logger.ts";
import type { ProcessWatcher } from "../platform/process-watch.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { type AutomaticReleaseCause, OWNER_LIFETIME_LIMITS, OwnerLifetimes } from "./owner-lifetimes.ts";

/** Owners holding devices, releases made, and lifetimes on a manual clock with no side file. */
function setup(options: { failReleases?: number } = {}) {
  const clock = manualClock(1_000_000);
  const holding = new Set<string>();
  const released: Array<[string, AutomaticReleaseCause]> = [];
  let failures = options.failReleases ?? 0;
  const exits = new Map<number, () => void>();
  const watcher: ProcessWatcher = {
    unavailable: null,
    watch: (identity, onExit) => {
      exits.set(identity.pid, onExit);
      return { close: () => void exits.delete(identity.pid) };
    },
  };
  const lines: Array<Record<string, unknown>> = [];
  const lifetimes = new OwnerLifetimes({
    file: null,
    clock,
    log: createLogger({ level: "info", write: (line) => void lines.push(JSON.parse(line)) }),
    watcher,
    holdsDevices: (owner) => holding.has(owner),
    release: async (owner, cause) => {
      if (failures > 0) {
        failures--;
        throw new Error("the checkpoint cannot be written");
      }
      released.push([owner, cause]);
      const held = holding.delete(owner) ? 1 : 0;
      lifetimes.forget(owner);
      return held;
    },
  });
  const grant = async (owner: string, lifetime: Parameters<OwnerLifetimes["prepare"]>[1]) => {
    const pending = lifetimes.prepare(owner, lifetime);
    holding.add(owner);
    assert.equal(await pending.commit(), null);
  };
  return { clock, lifetimes, released, exits, grant, lines };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

test("leases share one timer set for the earliest expiry, and none is set while no owner has a lease", async () => {
  const { clock, lifetimes, released, grant } = setup();
  assert.equal(clock.pendingTimers(), 0);
  await grant("plain", { kind: "plain" });
  assert.equal(clock.pendingTimers(), 0, "a plain owner sets no timer");
  await grant("a", { kind: "lease", durationMs: 30_000 });
  await grant("b", { kind: "lease", durationMs: 10_000 });
  await grant("c", { kind: "lease", durationMs: 20_000 });
  assert.equal(clock.pendingTimers(), 1, "one timer for three leases");
  clock.advance(10_000);
  await settle();
  assert.deepEqual(released, [["b", "lease_lapsed"]]);
  assert.equal(clock.pendingTimers(), 1);
  // c renewed before it lapses: a lapses first now.
  clock.advance(5_000);
  await grant("c", { kind: "lease", durationMs: 20_000 });
  clock.advance(15_000);
  await settle();
  assert.deepEqual(released, [["b", "lease_lapsed"], ["a", "lease_lapsed"]]);
  clock.advance(4_999);
  await settle();
  assert.equal(released.length, 2, "the renewed lease holds until its new expiry");
  clock.advance(1);
  await settle();
  assert.deepEqual(released.at(-1), ["c", "lease_lapsed"]);
  assert.equal(clock.pendingTimers(), 0, "no timer once no lease is left");
  assert.equal(lifetimes.describe("plain").kind, "plain");
});

test("a process owner is released when its process exits; its watch is closed by a release", async () => {
  const { lifetimes, released, exits, grant, lines } = setup();
  await grant("job", { kind: "process", pid: 4242, startTime: "77" });
  assert.deepEqual(lifetimes.describe("job"), { kind: "process", pid: 4242, startTime: "77", since: 1_000_000 });
  exits.get(4242)!();
  await settle();
  assert.deepEqual(released, [["job", "process_exited"]]);
  assert.equal(exits.size, 0, "the watch is closed");
  assert.deepEqual(lines.filter((l) => l.msg === "devices released automatically").map((l) => [l.owner, l.cause, l.pid]), [["job", "process_exited", 4242]]);
});

test("an owner keeps the kind it was given; bounds on leases and process owners", async () => {
  const { lifetimes, grant } = setup();
  await grant("p", { kind: "process", pid: 10, startTime: "1" });
  await grant("l", { kind: "lease", durationMs: 5_000 });
  await grant("plain", { kind: "plain" });
  assert.throws(() => lifetimes.prepare("p", { kind: "plain" }), /owner p holds its devices while process 10 runs; ask again with --owner-pid 10/);
  assert.throws(() => lifetimes.prepare("p", { kind: "process", pid: 11 }), /not process 11/);
  assert.throws(() => lifetimes.prepare("l", { kind: "process", pid: 12, startTime: "1" }), /under a lease until/);
  assert.throws(() => lifetimes.prepare("plain", { kind: "lease", durationMs: 5_000 }), /owner plain holds its devices until released/);
  assert.throws(() => lifetimes.prepare("x", { kind: "lease", durationMs: OWNER_LIFETIME_LIMITS.maxLeaseMs + 1 }), /a lease must be between 1s and 24h/);
  assert.throws(() => lifetimes.prepare("x", { kind: "lease", durationMs: 999 }), /a lease must be between/);
  for (let i = 1; i < OWNER_LIFETIME_LIMITS.maxLeasedOwners; i++) await grant(`lease-${i}`, { kind: "lease", durationMs: 60_000 });
  assert.throws(() => lifetimes.prepare("one-more", { kind: "lease", durationMs: 60_000 }), /1024 owners hold a lease already/);
  // A request that fails leaves nothing behind.
  const pending = lifetimes.prepare("failed", { kind: "process", pid: 99, startTime: "1" });
  pending.abandon();
  assert.equal(lifetimes.describe("failed").kind, "plain");
});

test("a failed automatic release is tried again on the same timer", async () => {
  const { clock, released, grant, lines } = setup({ failReleases: 1 });
  await grant("a", { kind: "lease", durationMs: 1_000 });
  clock.advance(1_000);
  await settle();
  assert.deepEqual(released, []);
  assert.equal(lines.filter((l) => l.msg === "automatic release failed; tried again later").length, 1);
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(OWNER_LIFETIME_LIMITS.retryMs);
  await settle();
  assert.deepEqual(released, [["a", "lease_lapsed"]]);
  assert.equal(clock.pendingTimers(), 0);
});

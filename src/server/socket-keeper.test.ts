import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { manualClock } from "../../test/support/manual-clock.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { waitUntil } from "../../test/support/wait.ts";
import { createLogger } from "../log/logger.ts";
import { SocketKeeper } from "./socket-keeper.ts";

const quiet = createLogger({ level: "error", write: () => {} });

/**
 * A keeper of a plain listening socket in `dir/sockets/`, its checks on a
 * manual clock, or riding `ticks` (the agent's resync) when given.
 */
async function keep(t: TestContext, ticks?: (check: () => void) => () => void) {
  const directory = path.join(tempDir(t), "sockets");
  const socketPath = path.join(directory, "kept.sock");
  const clock = manualClock();
  let served = 0;
  const serve = async () => {
    fs.mkdirSync(directory, { recursive: true });
    const server = net.createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    served++;
    return { close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  };
  const keeper = await SocketKeeper.start({ socketPath, serve, what: "test socket", log: quiet, clock, checkIntervalMs: () => 10_000, ticks });
  t.after(() => keeper.close());
  return { directory, socketPath, clock, keeper, served: () => served };
}

test("an rm -r of the socket's directory is not fought: the directory goes, and the socket comes back at the next check", async (t) => {
  const { directory, socketPath, clock, served } = await keep(t);
  // rm -r removes what is in the directory, then the directory: the socket's removal is heard in between.
  fs.rmSync(socketPath);
  await waitUntil(() => clock.pendingTimers() === 2, "the look that follows the directory event");
  fs.rmdirSync(directory);
  clock.advance(200);
  assert.equal(fs.existsSync(directory), false, "the directory stays removed");
  assert.equal(served(), 1);

  clock.advance(10_000);
  await waitUntil(() => served() === 2, "the periodic check to serve the socket again");
  assert.ok(fs.lstatSync(socketPath).isSocket());
});

test("a socket removed from a directory that stays is served again once the moment has passed", async (t) => {
  const { socketPath, clock, served } = await keep(t);
  fs.rmSync(socketPath);
  await waitUntil(() => clock.pendingTimers() === 2, "the look that follows the directory event");
  clock.advance(199);
  assert.equal(served(), 1, "not within the moment");
  clock.advance(1);
  await waitUntil(() => served() === 2, "the socket served again");
  assert.ok(fs.lstatSync(socketPath).isSocket());
});

test("a keeper whose checks ride the agent's resync sets no timer of its own: a removed directory's socket comes back at the next tick", async (t) => {
  const ticks = new Set<() => void>();
  const subscribe = (check: () => void) => {
    ticks.add(check);
    return () => ticks.delete(check);
  };
  const { directory, socketPath, clock, keeper, served } = await keep(t, subscribe);
  assert.equal(clock.pendingTimers(), 0, "no periodic timer besides the resync");
  assert.equal(ticks.size, 1);

  fs.rmSync(directory, { recursive: true });
  clock.advance(60_000);
  assert.equal(served(), 1, "no check but at a tick");
  for (const check of ticks) check();
  await waitUntil(() => served() === 2, "the tick to serve the socket again");
  assert.ok(fs.lstatSync(socketPath).isSocket());

  await keeper.close();
  assert.equal(ticks.size, 0, "closing unsubscribes");
});

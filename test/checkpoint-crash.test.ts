/**
 * kill -9 at random moments during a stream of checkpoint writes never
 * leaves a torn checkpoint (docs/devices.md, "Checkpoint and restarts": the
 * old file or the new one, whole). Each iteration starts a writer
 * (fixtures/checkpoint/crash-writer.ts) on the checkpoint the previous one
 * left, lets it write for a random moment and SIGKILLs it; the file must
 * then verify and hold exactly one generation's data, no older than the
 * last one seen. Lanes of writers run in parallel, each on its own file, to
 * keep the 200 iterations within a few tens of seconds on a loaded machine.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { decodeCheckpoint } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { crashData } from "./fixtures/checkpoint/crash-writer.ts";
import { seededRandom } from "./support/seeded-random.ts";
import { tempDir } from "./support/temp-dir.ts";

const WRITER = fileURLToPath(new URL("fixtures/checkpoint/crash-writer.ts", import.meta.url));
const ITERATIONS = 200;
const LANES = 4;
/** Writes continue for up to this long after the first one is on disk before the kill. */
const MAX_KILL_DELAY_MS = 30;
const READY_TIMEOUT_MS = 30_000;

/** Starts a writer, kills it `delayMs` after its first write, and resolves once it is gone. */
async function killDuringWrites(writer: string, file: string, seed: number, delayMs: number): Promise<void> {
  const child = spawn(process.execPath, [writer, file, String(seed)], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`writer ${seed} was not ready within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      if (!chunk.includes("ready")) return;
      clearTimeout(timer);
      resolve();
    });
    void exited.then(([code]) => {
      clearTimeout(timer);
      reject(new Error(`writer ${seed} exited ${code} before it was killed: ${stderr}`));
    });
  });
  try {
    await ready;
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  } finally {
    child.kill("SIGKILL");
  }
  const [code, signal] = await exited;
  assert.equal(signal, "SIGKILL", `writer ${seed} ended with code ${code} before the kill: ${stderr}`);
}

/** The generation the file holds, after checking it verifies and is exactly that generation's data. */
function verifiedGeneration(file: string, seed: number): number {
  const data = decodeCheckpoint(fs.readFileSync(file));
  const owner = data.podDeviceEntries[0]?.podUID ?? "";
  const generation = Number(/^owner-(\d+)$/.exec(owner)?.[1]);
  assert.ok(Number.isSafeInteger(generation), `seed ${seed}: unexpected owner ${JSON.stringify(owner)}`);
  assert.deepEqual(data, crashData(generation), `seed ${seed}: the file is not whole generation ${generation}`);
  return generation;
}

test(`kill -9 at random moments during checkpoint writes (${ITERATIONS} iterations) always leaves the old or the new checkpoint`, async (t) => {
  const dir = tempDir(t);
  // The writer and the store's modules bundled into one file, as the executable bundles them: a writer then
  // starts in a third of the time it takes to load and type-strip a dozen .ts files, 200 times over.
  const writer = path.join(dir, "crash-writer.mjs");
  await build({ entryPoints: [WRITER], bundle: true, platform: "node", format: "esm", outfile: writer, logLevel: "error" });
  const perLane = Math.ceil(ITERATIONS / LANES);
  let done = 0;
  const lane = async (index: number) => {
    const file = path.join(dir, `lane-${index}`, "kubelet_internal_checkpoint");
    const delay = seededRandom(0x9e3779b9 + index);
    let last = -1;
    for (let i = 0; i < perLane; i++) {
      // Seeds grow with i, so each writer's generations are newer than the previous writer's.
      const seed = index * 10_000 + i + 1;
      await killDuringWrites(writer, file, seed, Math.floor(delay() * MAX_KILL_DELAY_MS));
      const generation = verifiedGeneration(file, seed);
      assert.ok(generation >= last, `seed ${seed}: generation ${generation} is older than ${last}, seen before the kill`);
      last = generation;
      done++;
    }
  };
  await Promise.all(Array.from({ length: LANES }, (_, index) => lane(index)));
  assert.ok(done >= ITERATIONS);
});

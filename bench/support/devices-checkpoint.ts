/**
 * The devices benchmark's checkpoint part, in this process: encoding and
 * writing (temporary file, fsync, rename, fsync of the directory) a
 * checkpoint of 10,000 devices with 100 allocations, the way the agent's
 * store writes it.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { createLogger } from "../../src/log/logger.ts";
import { type CheckpointData, CheckpointStore, encodeCheckpoint } from "../../src/devicemanager/checkpoint/checkpoint.ts";
import { summarize } from "./stats.ts";

const DEVICES = 10_000;
const ALLOCATIONS = 100;
const WRITES = 30;

/** 10,000 GPU-style ids (`GPU-` and a UUID, as NVIDIA's plugin names them) and 100 owners holding 4 each. */
function benchData(): CheckpointData {
  const id = (i: number) => `GPU-${i.toString(16).padStart(8, "0")}-e770-3ea8-8ac3-8a1d419763e0`;
  const ids = Array.from({ length: DEVICES }, (_, i) => id(i));
  const allocResp = new Uint8Array(120).fill(7);
  const podDeviceEntries = Array.from({ length: ALLOCATIONS }, (_, i) => ({
    podUID: `bf52b2cd-b611-4e79-86b1-${String(i).padStart(12, "0")}`,
    containerName: "main",
    resourceName: "nvidia.com/gpu",
    deviceIDs: new Map([[i % 2, ids.slice(i * 4, i * 4 + 4)]]),
    allocResp,
  }));
  return { podDeviceEntries, registeredDevices: new Map([["nvidia.com/gpu", ids]]) };
}

export async function measureCheckpointWrites(dir: string) {
  fs.mkdirSync(dir, { recursive: true });
  const data = benchData();
  const encode: number[] = [];
  let bytes = 0;
  for (let i = 0; i < WRITES; i++) {
    const startedAt = performance.now();
    bytes = encodeCheckpoint(data).length;
    encode.push(performance.now() - startedAt);
  }
  const store = new CheckpointStore({ path: path.join(dir, "kubelet_internal_checkpoint"), log: createLogger({ level: "error" }) });
  await store.restore();
  const writes: number[] = [];
  for (let i = 0; i < WRITES + 3; i++) {
    const startedAt = performance.now();
    await store.write(data);
    if (i >= 3) writes.push(performance.now() - startedAt);
  }
  const filesystem = spawnSync("stat", ["-f", "-c", "%T", dir], { encoding: "utf8" }).stdout.trim() || "unknown";
  return { devices: DEVICES, allocations: ALLOCATIONS, bytes, filesystem, encode: summarize(encode), write: summarize(writes) };
}

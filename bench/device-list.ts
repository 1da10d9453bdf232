/**
 * Whether the hand-written device-list reader (src/devicemanager/device-list-reader.ts)
 * still pays against protobuf-es: the same encoded ListAndWatch messages of
 * 16, 10,000 and 100,000 devices, read the way the agent reads them
 * (Connect's decoding into the view that leaves each Device as bytes, then
 * readDeviceList, which also checks every id, refuses duplicates and sorts)
 * and decoded by `fromBinary` into v1beta1 message objects, then walked for
 * what the agent keeps (id, health, NUMA nodes) with the duplicate check,
 * but neither sorted nor validated. The two alternate within each round, so
 * both meet the same machine. `readerOverFromBinary` below 1: the reader is faster.
 */
import { fromBinary } from "@bufbuild/protobuf";
import { ListAndWatchResponseSchema } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { ListAndWatchResponseViewSchema } from "../src/gen/edgeplug/v1/device_list_view_pb.ts";
import { readDeviceList } from "../src/devicemanager/device-list-reader.ts";
import { encodedList } from "./support/raw-device-plugin.ts";
import { summarize } from "./support/stats.ts";

const SIZES = [16, 10_000, 100_000];
const MAX_DEVICES = 200_000;

/** Rounds per size: enough samples for a p50 in a few seconds at each size. */
const roundsFor = (devices: number) => (devices >= 100_000 ? 15 : devices >= 10_000 ? 60 : 3000);

function readAsTheAgentDoes(bytes: Uint8Array): void {
  const read = readDeviceList(fromBinary(ListAndWatchResponseViewSchema, bytes).devices, MAX_DEVICES, null);
  if (typeof read === "string") throw new Error(`the bench's list was refused: ${read}`);
}

function decodeWithFromBinary(bytes: Uint8Array): void {
  const ids = new Set<string>();
  for (const device of fromBinary(ListAndWatchResponseSchema, bytes).devices) {
    if (ids.has(device.ID)) throw new Error(`device ${device.ID} listed twice`);
    ids.add(device.ID);
    void (device.health === "Healthy");
    void (device.topology?.nodes ?? []).map((node) => Number(node.ID));
  }
}

function timed(work: () => void): number {
  const startedAt = performance.now();
  work();
  return performance.now() - startedAt;
}

export function run(): Promise<object> {
  const results: Record<string, object> = {};
  for (const devices of SIZES) {
    const bytes = encodedList(devices, `d${devices}-`);
    const reader: number[] = [];
    const full: number[] = [];
    for (let round = 0; round < roundsFor(devices); round++) {
      const readerFirst = round % 2 === 0;
      if (readerFirst) reader.push(timed(() => readAsTheAgentDoes(bytes)));
      full.push(timed(() => decodeWithFromBinary(bytes)));
      if (!readerFirst) reader.push(timed(() => readAsTheAgentDoes(bytes)));
    }
    const readerSummary = summarize(reader);
    const fullSummary = summarize(full);
    results[`devices${devices}`] = {
      messageBytes: bytes.length,
      reader: readerSummary,
      fromBinary: fullSummary,
      readerOverFromBinary: Math.round((readerSummary.p50Ms / fullSummary.p50Ms) * 100) / 100,
    };
  }
  return Promise.resolve({ note: "p50 per message; the reader also sorts and validates, fromBinary's walk does not", ...results });
}

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { ListAndWatchResponseSchema } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { ListAndWatchResponseViewSchema } from "../gen/edgeplug/v1/device_list_view_pb.ts";
import { seededRandom } from "../../test/support/seeded-random.ts";
import { listRegion, MAX_NUMA_NODES_PER_DEVICE, readDeviceList, sameBytes } from "./device-list-reader.ts";

/** The devices of an encoded ListAndWatchResponse, as the endpoint gets them. */
const view = (bytes: Uint8Array) => fromBinary(ListAndWatchResponseViewSchema, bytes).devices;

/** What protobuf-es's full decoding of the same bytes says, in the device manager's terms. */
function reference(bytes: Uint8Array) {
  return fromBinary(ListAndWatchResponseSchema, bytes).devices.map((d) => ({ id: d.ID, healthy: d.health === "Healthy", numaNodes: (d.topology?.nodes ?? []).map((n) => Number(n.ID)) }));
}

test("devices read from their bytes agree with protobuf-es's decoding of the whole message", () => {
  const message = create(ListAndWatchResponseSchema, {
    devices: [
      { ID: "gpu0", health: "Healthy", topology: { nodes: [{ ID: 0n }] } },
      { ID: "gpu1", health: "Unhealthy", topology: { nodes: [{ ID: 1n }, { ID: 3n }] } },
      { ID: "gpu2", health: "healthy" },
      { ID: "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0", health: "Healthy", topology: { nodes: [{ ID: 0n }] } },
      { ID: "é-ünïcode", health: "" },
      { ID: "neg", health: "Healthy", topology: { nodes: [{ ID: -1n }, { ID: 2n ** 40n }] } },
    ],
  });
  const bytes = toBinary(ListAndWatchResponseSchema, message);
  const read = readDeviceList(view(bytes), 100);
  assert.ok(typeof read !== "string", String(read));
  assert.deepEqual(read.devices(), reference(bytes));
  assert.deepEqual(read.ids, reference(bytes).map((d) => d.id));
});

test("NUMA node ids of every size on a single node read as protobuf-es reads them: one-byte varints, larger ones, negative and past 32 bits", () => {
  const nodes = [0n, 1n, 127n, 128n, 300n, 2n ** 31n - 1n, 2n ** 31n, 2n ** 40n, -1n, -(2n ** 31n)];
  const message = create(ListAndWatchResponseSchema, { devices: nodes.map((ID, i) => ({ ID: `d${i}`, health: "Healthy", topology: { nodes: [{ ID }] } })) });
  const bytes = toBinary(ListAndWatchResponseSchema, message);
  const read = readDeviceList(view(bytes), 100);
  assert.ok(typeof read !== "string", String(read));
  assert.deepEqual(read.devices(), reference(bytes));
  assert.deepEqual(read.nodesOf("d7"), [2 ** 40]);
  assert.deepEqual(read.nodesOf("unknown"), []);
});

test("a list with the previous list's ids in the same order takes its new health; one with other ids is checked for duplicates and sorted again", () => {
  const list = (ids: string[], health: (id: string) => string) =>
    view(toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices: ids.map((ID) => ({ ID, health: health(ID) })) })));
  const first = readDeviceList(list(["c", "a", "b"], () => "Healthy"), 10);
  assert.ok(typeof first !== "string", String(first));
  assert.deepEqual(first.sorted, ["a", "b", "c"]);
  const again = readDeviceList(list(["c", "a", "b"], (id) => (id === "a" ? "Unhealthy" : "Healthy")), 10, first);
  assert.ok(typeof again !== "string", String(again));
  assert.deepEqual(again.devices().map((d) => [d.id, d.healthy]), [["c", true], ["a", false], ["b", true]]);
  assert.deepEqual(first.devices().map((d) => d.healthy), [true, true, true], "the previous list keeps its own health");
  assert.equal(again.indexOf("b"), 2);
  const reordered = readDeviceList(list(["b", "a", "d"], () => "Healthy"), 10, first);
  assert.ok(typeof reordered !== "string", String(reordered));
  assert.deepEqual(reordered.sorted, ["a", "b", "d"]);
  assert.match(String(readDeviceList(list(["b", "a", "b"], () => "Healthy"), 10, first)), /device ID "b" is listed twice/);
});

test("unknown fields are skipped, a repeated ID keeps its last value and a repeated topology merges, as protobuf readers do", () => {
  const device = new BinaryWriter()
    .tag(1, WireType.LengthDelimited).string("first")
    .tag(9, WireType.Varint).uint64(77)
    .tag(2, WireType.LengthDelimited).string("Healthy")
    .tag(3, WireType.LengthDelimited).bytes(new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(new BinaryWriter().tag(1, WireType.Varint).int64(4).finish()).finish())
    .tag(1, WireType.LengthDelimited).string("last")
    .tag(3, WireType.LengthDelimited).bytes(
      new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(new BinaryWriter().tag(2, WireType.Varint).int32(1).tag(1, WireType.Varint).int64(5).finish()).finish(),
    )
    .finish();
  const bytes = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(device).tag(5, WireType.LengthDelimited).string("ignored").finish();
  const read = readDeviceList(view(bytes), 100);
  assert.ok(typeof read !== "string", String(read));
  assert.deepEqual(read.devices(), reference(bytes));
  assert.deepEqual(read.devices(), [{ id: "last", healthy: true, numaNodes: [4, 5] }]);
});

test(`up to ${MAX_NUMA_NODES_PER_DEVICE} NUMA nodes per device, over repeated topologies, read as protobuf-es reads them; one more refuses the message`, () => {
  const numaNode = (id: number) => new BinaryWriter().tag(1, WireType.Varint).int64(id).finish();
  const topology = (from: number, count: number) =>
    Array.from({ length: count }, (_, i) => numaNode(from + i)).reduce((writer, node) => writer.tag(1, WireType.LengthDelimited).bytes(node), new BinaryWriter()).finish();
  const device = (parts: number[]) => {
    const writer = new BinaryWriter().tag(1, WireType.LengthDelimited).string("wide").tag(2, WireType.LengthDelimited).string("Healthy");
    let from = 0;
    for (const count of parts) {
      writer.tag(3, WireType.LengthDelimited).bytes(topology(from, count));
      from += count;
    }
    return new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(writer.finish()).finish();
  };
  const half = MAX_NUMA_NODES_PER_DEVICE / 2;
  const widest = device([1, half - 1, half]);
  const read = readDeviceList(view(widest), 10);
  assert.ok(typeof read !== "string", String(read));
  assert.deepEqual(read.devices(), reference(widest));
  assert.equal(read.nodesOf("wide").length, MAX_NUMA_NODES_PER_DEVICE);
  // 2 bytes per empty NUMANode: a small message naming ever more nodes must be refused, not read at a copy per node.
  const empty = new BinaryWriter();
  for (let i = 0; i < 5000; i++) empty.tag(1, WireType.LengthDelimited).bytes(new Uint8Array(0));
  const flood = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(
    new BinaryWriter().tag(1, WireType.LengthDelimited).string("x").tag(3, WireType.LengthDelimited).bytes(empty.finish()).finish(),
  ).finish();
  for (const refused of [device([half, half, 1]), flood]) {
    assert.match(String(readDeviceList(view(refused), 10)), new RegExp(`device 0 of the list cannot be read: its topology lists more than ${MAX_NUMA_NODES_PER_DEVICE} NUMA nodes`));
  }
});

test("a malformed device, a bad id, a duplicate or too many devices refuse the whole message with the reason", () => {
  const one = (device: Uint8Array) => view(new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(device).finish());
  assert.match(String(readDeviceList(one(new BinaryWriter().tag(1, WireType.Varint).uint32(3).finish()), 10)), /device 0 of the list cannot be read: field 1 has wire type 0, not length-delimited/);
  assert.match(String(readDeviceList(one(new Uint8Array([0x0a, 0x05, 0x61])), 10)), /device 0 of the list cannot be read/);
  const list = (...ids: string[]) => view(toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices: ids.map((ID) => ({ ID, health: "Healthy" })) })));
  assert.match(String(readDeviceList(list("a", "b\u0001"), 10)), /contains a control character/);
  assert.match(String(readDeviceList(list("a", "a"), 10)), /device ID "a" is listed twice/);
  assert.match(String(readDeviceList(list("a", "b", "c"), 2)), /device list of 3 devices exceeds security\.maxDevicesPerResource \(2\)/);
});

test("an ID or health that is not UTF-8, or a tag with field number 0, refuses the message, as protobuf decoders do", () => {
  const one = (device: Uint8Array) => view(new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(device).finish());
  const field = (number: number, bytes: number[]) => new BinaryWriter().tag(number, WireType.LengthDelimited).bytes(new Uint8Array(bytes)).finish();
  const concat = (...parts: Uint8Array[]) => new Uint8Array(parts.flatMap((part) => [...part]));
  // "gpu" then a lone continuation byte, and then an overlong encoding of "/".
  assert.equal(readDeviceList(one(field(1, [0x67, 0x70, 0x75, 0x80])), 10), "device 0 of the list cannot be read: its ID is not valid UTF-8");
  assert.equal(readDeviceList(one(field(1, [0xc0, 0xaf])), 10), "device 0 of the list cannot be read: its ID is not valid UTF-8");
  assert.equal(readDeviceList(one(concat(field(1, [0x61]), field(2, [0x48, 0xff]))), 10), "device 0 of the list cannot be read: its health is not valid UTF-8");
  assert.equal(readDeviceList(one(concat(field(1, [0x61]), field(0, [0x61]))), 10), "device 0 of the list cannot be read: illegal tag: field number 0 (wire type 2)");
  // Valid UTF-8 beyond ASCII, in the ID and in the health, is read as it is.
  const accepted = readDeviceList(one(concat(field(1, [...new TextEncoder().encode("gpü-0")]), field(2, [...new TextEncoder().encode("kaputt-ö")]))), 10);
  assert.ok(typeof accepted !== "string", String(accepted));
  assert.deepEqual(accepted.devices(), [{ id: "gpü-0", healthy: false, numaNodes: [] }]);
});

test("whatever list is accepted from damaged bytes, protobuf-es decodes the same bytes to the same devices", () => {
  const random = seededRandom(20261202);
  const sorted = (devices: { id: string; healthy: boolean; numaNodes: readonly number[] }[]) =>
    devices.map((d) => ({ ...d, numaNodes: [...new Set(d.numaNodes)].sort((a, b) => a - b) })).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  let accepted = 0;
  for (let trial = 0; trial < 4000; trial++) {
    const devices = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, i) => ({
      ID: `dev-${i}-${Math.floor(random() * 1000)}`,
      health: random() < 0.5 ? "Healthy" : "Unhealthy",
      topology: { nodes: Array.from({ length: Math.floor(random() * 3) }, () => ({ ID: BigInt(Math.floor(random() * 300) - 2) })) },
    }));
    const bytes = [...toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices }))];
    for (let change = 1 + Math.floor(random() * 3); change > 0; change--) {
      const at = Math.floor(random() * bytes.length);
      const kind = random();
      if (kind < 0.5) bytes[at] = Math.floor(random() * 256);
      else if (kind < 0.75) bytes.splice(at, 1);
      else bytes.splice(at, 0, Math.floor(random() * 256));
    }
    const damaged = new Uint8Array(bytes);
    let devicesView: Uint8Array[];
    try {
      devicesView = view(damaged);
    } catch {
      continue; // not even a ListAndWatchResponse: the stream fails in Connect's decoding
    }
    const read = readDeviceList(devicesView, 1000);
    if (typeof read === "string") continue;
    accepted++;
    assert.deepEqual(sorted(read.devices()), sorted(reference(damaged)), `trial ${trial}: ${Buffer.from(damaged).toString("hex")}`);
  }
  assert.ok(accepted > 200, `only ${accepted} damaged lists were accepted: the trials test little`);
});

test("a list sent again unchanged is recognised from its bytes", () => {
  const encode = (health: string) => toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices: [{ ID: "a", health }, { ID: "b", health }] }));
  const first = listRegion(view(encode("Healthy")))!;
  assert.equal(sameBytes(first, listRegion(view(encode("Healthy")))!), true);
  assert.equal(sameBytes(first, listRegion(view(encode("Unhealthy")))!), false);
  assert.equal(sameBytes(listRegion([])!, listRegion([])!), true);
});

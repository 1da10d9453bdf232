/**
 * The checkpoint format against the kubelet's own files: both golden fixtures
 * (test/fixtures/checkpoint/README.md) verify, decode to their data and re-encode
 * to their exact bytes; the kubelet's AllocResp is a real
 * ContainerAllocateResponse; anything else is refused with a reason.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fromBinary } from "@bufbuild/protobuf";
import { ContainerAllocateResponseSchema } from "../../gen/deviceplugin/v1beta1/api_pb.ts";
import { CheckpointCorruptError, type CheckpointData, decodeCheckpoint, encodeCheckpoint } from "./checkpoint.ts";
import { decodeCheckpointWithChecksum } from "./checkpoint-codec.ts";
import { fnv1a32, spewCheckpointData } from "./checkpoint-go.ts";

const fixture = (name: string) => new Uint8Array(readFileSync(new URL(`../../../test/fixtures/checkpoint/${name}`, import.meta.url)));
const gpuFile = fixture("kubelet-gpu-registered.json");
const tegraFile = fixture("kubelet-tegra-allocated.json");
const kubelet119File = fixture("kubelet-1.19-allocated.json");
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
const bytesOf = (value: string) => new TextEncoder().encode(value);

test("a kubelet checkpoint with one registered GPU and no allocations verifies and reads back", () => {
  const { data, checksum } = decodeCheckpointWithChecksum(gpuFile);
  assert.equal(checksum, 3952659280);
  assert.deepEqual(data.podDeviceEntries, []);
  assert.deepEqual(data.registeredDevices, new Map([["nvidia.com/gpu", ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]]]));
});

test("a checkpoint a kubelet up to 1.19 wrote (device ids without NUMA nodes) verifies with its checksum and reads as newer kubelets read it: on NUMA node 0", () => {
  const { data, checksum, layout } = decodeCheckpointWithChecksum(kubelet119File);
  assert.deepEqual([checksum, layout], [2493634608, "1.19"]);
  assert.equal(data.podDeviceEntries.length, 1);
  const entry = data.podDeviceEntries[0]!;
  assert.deepEqual([entry.podUID, entry.containerName, entry.resourceName], ["6d1a2f3e-0c4b-4d5e-9f60-7a8b9c0d1e2f", "worker", "acme.io/fpga"]);
  assert.deepEqual(entry.deviceIDs, new Map([[0, ["fpga1", "fpga0"]]]));
  assert.deepEqual(fromBinary(ContainerAllocateResponseSchema, entry.allocResp).envs, { ACME_FPGA: "fpga1,fpga0" });
  assert.deepEqual(data.registeredDevices, new Map([["acme.io/fpga", ["fpga0", "fpga1", "fpga2"]]]));
  // Written back, it is a current checkpoint: the same data, the 1.20 layout.
  const again = decodeCheckpointWithChecksum(encodeCheckpoint(data));
  assert.equal(again.layout, "1.20");
  assert.deepEqual(again.data, data);
  // The kubelets' own files are in the current layout.
  assert.equal(decodeCheckpointWithChecksum(tegraFile).layout, "1.20");
});

test("a kubelet checkpoint with an allocation verifies and reads back", () => {
  const { data, checksum } = decodeCheckpointWithChecksum(tegraFile);
  assert.equal(checksum, 3660592824);
  assert.equal(data.podDeviceEntries.length, 1);
  const entry = data.podDeviceEntries[0]!;
  assert.equal(entry.podUID, "bf52b2cd-b611-4e79-86b1-280b283185c3");
  assert.equal(entry.containerName, "check");
  assert.equal(entry.resourceName, "nvidia.com/gpu");
  assert.deepEqual(entry.deviceIDs, new Map([[-1, ["tegra"]]]));
  assert.deepEqual(data.registeredDevices, new Map([["nvidia.com/gpu", ["tegra"]]]));
});

test("the kubelet's AllocResp is a ContainerAllocateResponse on the wire", () => {
  const [entry] = decodeCheckpoint(tegraFile).podDeviceEntries;
  const response = fromBinary(ContainerAllocateResponseSchema, entry!.allocResp);
  assert.deepEqual(response.envs, { NVIDIA_VISIBLE_DEVICES: "tegra" });
  assert.deepEqual(response.mounts, []);
  assert.deepEqual(response.devices, []);
  assert.deepEqual(response.annotations, {});
  assert.deepEqual(response.cdiDevices, []);
});

test("re-encoding a kubelet checkpoint's data gives the kubelet's exact bytes", () => {
  assert.equal(text(encodeCheckpoint(decodeCheckpoint(gpuFile))), text(gpuFile));
  assert.equal(text(encodeCheckpoint(decodeCheckpoint(tegraFile))), text(tegraFile));
});

function sampleData(): CheckpointData {
  return {
    podDeviceEntries: [
      {
        podUID: "job-7",
        containerName: "main",
        resourceName: "acme.io/gpu",
        deviceIDs: new Map([[2, ["gpu2"]], [10, ["gpu10"]], [-1, ["gpu-x"]], [0, ["gpu0", "gpu1"]]]),
        allocResp: new Uint8Array([10, 3, 1, 2, 3]),
      },
    ],
    registeredDevices: new Map([["b.io/x", ["x2", "x1"]], ["a.io/gpu", []]]),
  };
}

test("maps are written with encoding/json's key order and hashed with go-spew's", () => {
  const data = sampleData();
  // JSON sorts the decimal text ("-1" < "0" < "10" < "2"); go-spew sorts the int64 keys.
  assert.match(text(encodeCheckpoint(data)), /"DeviceIDs":\{"-1":\["gpu-x"\],"0":\["gpu0","gpu1"\],"10":\["gpu10"\],"2":\["gpu2"\]\}/);
  assert.match(text(encodeCheckpoint(data)), /"RegisteredDevices":\{"a\.io\/gpu":\[\],"b\.io\/x":\["x2","x1"\]\}/);
  assert.equal(
    spewCheckpointData(data),
    "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)job-7 " +
      "ContainerName:(string)main ResourceName:(string)acme.io/gpu " +
      "DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[gpu-x] 0:[gpu0 gpu1] 2:[gpu2] 10:[gpu10]] AllocResp:([]uint8)[10 3 1 2 3]}] " +
      "RegisteredDevices:(map[string][]string)map[a.io/gpu:[] b.io/x:[x2 x1]]}",
  );
  assert.deepEqual(decodeCheckpoint(encodeCheckpoint(data)), data);
});

test("no allocations are written as Go's nil slice, an empty AllocResp as an empty string", () => {
  const empty = encodeCheckpoint({ podDeviceEntries: [], registeredDevices: new Map() });
  assert.match(text(empty), /^\{"Data":\{"PodDeviceEntries":null,"RegisteredDevices":\{\}\},"Checksum":\d+\}$/);
  const data = sampleData();
  data.podDeviceEntries[0]!.allocResp = new Uint8Array(0);
  assert.match(text(encodeCheckpoint(data)), /"AllocResp":""\}/);
  assert.deepEqual(decodeCheckpoint(encodeCheckpoint(data)), data);
});

test("strings are escaped as Go escapes them", () => {
  const data: CheckpointData = {
    podDeviceEntries: [],
    registeredDevices: new Map([["a.io/r", ["<a&b>", 'q"\\', "\n\t\u0001\u007f", "\u2028é😀", "lone\ud800"]]]),
  };
  const written = text(encodeCheckpoint(data));
  assert.ok(written.includes(String.raw`["\u003ca\u0026b\u003e","q\"\\","\n\t\u0001` + "\u007f" + String.raw`","\u2028` + 'é😀","lone\\ufffd"]'), written);
  const back = decodeCheckpoint(encodeCheckpoint(data)).registeredDevices.get("a.io/r")!;
  assert.deepEqual(back, ["<a&b>", 'q"\\', "\n\t\u0001\u007f", "\u2028é😀", "lone\ufffd"]);
});

test("the checksum covers the decoded data, as the kubelet's does: layout and field case do not matter", () => {
  const reformatted = JSON.stringify(JSON.parse(text(tegraFile)), null, 2).replace('"PodUID"', '"poduid"');
  const withBootID = text(gpuFile).replace('"Checksum"', '"BootID":"0f1e","Checksum"');
  assert.equal(decodeCheckpoint(bytesOf(reformatted)).podDeviceEntries[0]!.podUID, "bf52b2cd-b611-4e79-86b1-280b283185c3");
  assert.equal(decodeCheckpoint(bytesOf(withBootID)).registeredDevices.size, 1);
});

function assertCorrupt(content: string | Uint8Array, reason: RegExp): void {
  assert.throws(() => decodeCheckpoint(typeof content === "string" ? bytesOf(content) : content), (error: unknown) => {
    assert.ok(error instanceof CheckpointCorruptError, String(error));
    assert.match(error.message, reason);
    return true;
  });
}

test("a file whose data or checksum was changed is corrupt", () => {
  assertCorrupt(text(gpuFile).replace("3952659280", "3952659281"), /checkpoint is corrupted: its Checksum is 3952659281 but its Data hashes to 3952659280/);
  assertCorrupt(text(gpuFile).replace("GPU-0650", "GPU-0651"), /checkpoint is corrupted/);
  assertCorrupt(text(tegraFile).replace('"-1"', '"0"'), /checkpoint is corrupted/);
  assertCorrupt(text(gpuFile).replace(',"Checksum":3952659280', ""), /its Checksum is 0/);
});

test("the same data checksummed as an identical struct of another Go package is corrupt: the checksum covers the type names", () => {
  const data = decodeCheckpoint(tegraFile);
  const spew = spewCheckpointData({ podDeviceEntries: data.podDeviceEntries, registeredDevices: data.registeredDevices });
  const otherPackage = spew.replaceAll("checkpoint.", "otherpkg.");
  assert.notEqual(otherPackage, spew);
  const checksum = fnv1a32(bytesOf(otherPackage));
  assertCorrupt(text(tegraFile).replace("3660592824", String(checksum)), new RegExp(`its Checksum is ${checksum} but its Data hashes to 3660592824`));
});

test("another kind of checkpoint (the CPU manager's) is corrupt, as in the kubelet", () => {
  assertCorrupt('{"policyName":"none","defaultCpuSet":"0-3","checksum":1353318690}', /checkpoint is corrupted/);
});

test("a file that is not a checkpoint is refused with the reason and the place, never quoting it", () => {
  for (
    const secret of [
      "root:$6$s3cr3t:19000:0:99999:7:::\n",
      '{"Data":{"RegisteredDevices":{"s3cr3t":"x"}}}',
      '{"Checksum":"s3cr3t"}',
      '{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"s3cr3t":[]}}]}}',
      '{"Checksum":13371337.5}',
    ]
  ) {
    assert.throws(() => decodeCheckpoint(new TextEncoder().encode(secret)), (error: Error) => !/s3cr3t|1337/.test(error.message), secret);
  }
  assertCorrupt("", /the file is empty/);
  assertCorrupt(new Uint8Array([0x7b, 0xff, 0x7d]), /not UTF-8/);
  assertCorrupt(text(gpuFile).slice(0, 40), /not JSON/);
  assertCorrupt("[]", /the file: expected an object, found an array/);
  assertCorrupt('{"Data":{"RegisteredDevices":{"a.io/r":"gpu0"}}}', /Data\.RegisteredDevices\[key 1\]: expected an array of strings or null, found a string/);
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"AllocResp":"%%%"}]}}', /Data\.PodDeviceEntries\[0\]\.AllocResp: not standard base64/);
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}', /DeviceIDs: a key is not a NUMA node number/);
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":[],"00":[]}}]}}', /NUMA node 0 appears twice/);
  // A kubelet 1.19's layout with a wrong checksum is corrupt like any other; one file in both layouts is no kubelet's.
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"DeviceIDs":["gpu0"]}]},"Checksum":1}', /checkpoint is corrupted: its Checksum is 1 but its Data hashes to \d+$/);
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"DeviceIDs":["gpu0"]},{"DeviceIDs":{"0":["gpu1"]}}]}}', /some DeviceIDs are lists \(kubelet 1\.19\) and some map NUMA nodes/);
  assertCorrupt('{"Data":{"PodDeviceEntries":[{"PodUID":"a","poduid":"b"}]}}', /field PodUID is given twice, spelled two ways$/);
  assertCorrupt('{"Data":null,"Checksum":3952659280.0}', /Checksum: not an unsigned 64-bit integer/);
  assertCorrupt('{"Data":null,"Checksum":-1}', /Checksum: not an unsigned 64-bit integer/);
  assertCorrupt('{"Data":null,"Checksum":"1"}', /Checksum: expected an unsigned integer, found a string/);
});

test("the kubelet's bytes come out the same when a frozen device list's encoding is kept between writes", () => {
  const { data } = decodeCheckpointWithChecksum(tegraFile);
  const ids = Object.freeze(["tegra", "GPU-<&>", "\u2028é"]);
  const frozen: CheckpointData = { ...data, registeredDevices: new Map([["nvidia.com/gpu", ids]]) };
  const plain = (): CheckpointData => ({ ...data, registeredDevices: new Map([["nvidia.com/gpu", [...ids]]]) });
  const first = encodeCheckpoint(frozen);
  assert.deepEqual(first, encodeCheckpoint(plain()));
  // A second write with an allocation more reuses the list's encoding; the checksum still covers everything.
  const more = { ...data.podDeviceEntries[0]!, podUID: "another-pod" };
  const second = encodeCheckpoint({ ...frozen, podDeviceEntries: [...frozen.podDeviceEntries, more] });
  assert.deepEqual(second, encodeCheckpoint({ ...plain(), podDeviceEntries: [...frozen.podDeviceEntries, more] }));
  assert.deepEqual(decodeCheckpoint(second).registeredDevices.get("nvidia.com/gpu"), [...ids]);
  assert.equal(decodeCheckpoint(second).podDeviceEntries.length, 2);
});

test("an AllocResp of megabytes reads back (its base64 is checked in one pass) and one that is not base64 is corrupt", () => {
  const allocResp = new Uint8Array(3.5 * 1024 * 1024).map((_, i) => (i * 7919) % 251);
  const data: CheckpointData = {
    podDeviceEntries: [{ podUID: "pod", containerName: "main", resourceName: "acme.io/gpu", deviceIDs: new Map([[-1, ["dev0"]]]), allocResp }],
    registeredDevices: new Map([["acme.io/gpu", ["dev0"]]]),
  };
  const encoded = encodeCheckpoint(data);
  assert.deepEqual(decodeCheckpoint(encoded).podDeviceEntries[0]!.allocResp, allocResp);
  const text = new TextDecoder().decode(encoded);
  const at = text.indexOf('"AllocResp":"') + '"AllocResp":"'.length + 1000;
  assert.throws(() => decodeCheckpoint(new TextEncoder().encode(`${text.slice(0, at)}=${text.slice(at + 1)}`)), CheckpointCorruptError);
});

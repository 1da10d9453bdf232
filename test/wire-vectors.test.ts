/**
 * Wire compatibility of edgeplug's generated protobuf types with the kubelet
 * protocols. The fixture was encoded by an independent protobuf runtime
 * (Google's Python one) from upstream's field definitions, so a wrong field
 * number, type or package in proto/ shows up here as a decoding mismatch.
 *
 * Runs under Node (`node --test`) and Deno (`deno test -A`).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createRegistry, type DescFile, type DescMessage, equals, fromBinary, fromJson, type JsonValue, type Registry, toBinary } from "@bufbuild/protobuf";

interface WireVector {
  message: string;
  json: JsonValue;
  base64: string;
}

const GEN_ROOT = fileURLToPath(new URL("../src/gen/", import.meta.url));
const FIXTURE = new URL("./fixtures/wire-vectors.json", import.meta.url);

/** The packages whose every message the fixture must cover. */
const KUBELET_PACKAGES = ["pluginregistration", "v1beta1", "v1", "csi.v1"];

function listGeneratedModules(dir: string): string[] {
  const found: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...listGeneratedModules(full));
    else if (entry.name.endsWith("_pb.ts")) found.push(full);
  }
  return found.sort();
}

function isDescFile(value: unknown): value is DescFile {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "file";
}

/** Every file descriptor exported by src/gen, plus the files they import (well-known types). */
async function loadGeneratedFiles(): Promise<DescFile[]> {
  const files = new Map<string, DescFile>();
  const add = (file: DescFile) => {
    if (files.has(file.name)) return;
    files.set(file.name, file);
    for (const dependency of file.dependencies) add(dependency);
  };
  for (const modulePath of listGeneratedModules(GEN_ROOT)) {
    const exports: Record<string, unknown> = await import(pathToFileURL(modulePath).href);
    const descriptors = Object.entries(exports).filter(([name, value]) => name.startsWith("file_") && isDescFile(value));
    assert.ok(descriptors.length > 0, `${modulePath} exports no file_* descriptor`);
    for (const [, value] of descriptors) add(value as DescFile);
  }
  return [...files.values()];
}

function loadVectors(): WireVector[] {
  const parsed: unknown = JSON.parse(fs.readFileSync(FIXTURE, "utf8"));
  assert.ok(Array.isArray(parsed), "wire-vectors.json must hold an array");
  return parsed.map((entry, index) => {
    const { message, json, base64 } = entry as Partial<WireVector>;
    assert.equal(typeof message, "string", `vector #${index}: "message" must be a string`);
    assert.equal(typeof base64, "string", `vector #${index} (${message}): "base64" must be a string`);
    assert.ok(json !== undefined, `vector #${index} (${message}): "json" is missing`);
    return { message: message as string, json: json as JsonValue, base64: base64 as string };
  });
}

function decodeBase64(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, "base64"));
}

const files = await loadGeneratedFiles();
const registry: Registry = createRegistry(...files);
const vectors = loadVectors();

/** Unknown fields count: a field the vector sets under a number edgeplug lacks must fail. */
const strict = { registry, unknown: true };

function schemaOf(typeName: string): DescMessage | undefined {
  return registry.getMessage(typeName);
}

test("every wire vector names a message that edgeplug's generated code defines", () => {
  const unknown = vectors.map((v) => v.message).filter((name) => schemaOf(name) === undefined);
  assert.deepEqual(unknown, [], `messages in wire-vectors.json missing from src/gen: ${unknown.join(", ")}`);
});

test("every top-level message of the kubelet protocols has a wire vector", () => {
  const covered = new Set(vectors.map((v) => v.message));
  const missing: string[] = [];
  for (const file of files) {
    if (!KUBELET_PACKAGES.includes(file.proto.package ?? "")) continue;
    for (const message of file.messages) if (!covered.has(message.typeName)) missing.push(message.typeName);
  }
  assert.deepEqual(missing, [], `messages without a wire vector: ${missing.join(", ")}`);
});

/**
 * The gRPC paths and streaming kinds of the kubelet protocols (proto/, as the
 * kubelet serves them): a renamed package, service or method changes the path on
 * the wire even when every message still decodes.
 */
const KUBELET_METHODS: Record<string, "unary" | "server_streaming"> = {
  "/pluginregistration.Registration/GetInfo": "unary",
  "/pluginregistration.Registration/NotifyRegistrationStatus": "unary",
  "/v1beta1.Registration/Register": "unary",
  "/v1beta1.DevicePlugin/GetDevicePluginOptions": "unary",
  "/v1beta1.DevicePlugin/ListAndWatch": "server_streaming",
  "/v1beta1.DevicePlugin/GetPreferredAllocation": "unary",
  "/v1beta1.DevicePlugin/Allocate": "unary",
  "/v1beta1.DevicePlugin/PreStartContainer": "unary",
  "/v1.PodResourcesLister/List": "unary",
  "/v1.PodResourcesLister/GetAllocatableResources": "unary",
  "/v1.PodResourcesLister/Get": "unary",
  "/csi.v1.Identity/GetPluginInfo": "unary",
  "/csi.v1.Identity/GetPluginCapabilities": "unary",
  "/csi.v1.Identity/Probe": "unary",
  "/csi.v1.Node/NodeGetCapabilities": "unary",
  "/csi.v1.Node/NodeGetInfo": "unary",
};

test("the kubelet protocols' services have exactly the kubelet's gRPC paths and streaming kinds", () => {
  const generated: Record<string, string> = {};
  for (const file of files) {
    if (!KUBELET_PACKAGES.includes(file.proto.package ?? "")) continue;
    for (const service of file.services) {
      for (const method of service.methods) generated[`/${service.typeName}/${method.name}`] = method.methodKind;
    }
  }
  assert.deepEqual(generated, KUBELET_METHODS);
});

for (const vector of vectors) {
  test(`${vector.message}: binary from an independent encoder decodes to the JSON's message and round-trips`, () => {
    const schema = schemaOf(vector.message);
    assert.ok(schema, `unknown message ${vector.message}`);
    const fromWire = fromBinary(schema, decodeBase64(vector.base64));
    const fromJsonText = fromJson(schema, vector.json, { registry });
    assert.ok(
      equals(schema, fromWire, fromJsonText, strict),
      `${vector.message}: decoded binary differs from the JSON form\n` +
        `binary: ${JSON.stringify(fromWire, bigintReplacer)}\njson:   ${JSON.stringify(fromJsonText, bigintReplacer)}`,
    );
    const reencoded = fromBinary(schema, toBinary(schema, fromWire));
    assert.ok(equals(schema, reencoded, fromJsonText, strict), `${vector.message}: toBinary → fromBinary does not round-trip`);
    const fromJsonEncoded = fromBinary(schema, toBinary(schema, fromJsonText));
    assert.ok(equals(schema, fromJsonEncoded, fromWire, strict), `${vector.message}: JSON → binary → message differs from the vector`);
  });
}

function bigintReplacer(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? `${value}n` : value;
}

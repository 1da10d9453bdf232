/**
 * The repository's .proto files loaded by @grpc/proto-loader: an encoder and
 * decoder independent of protobuf-es, so tests that use it check edgeplug's
 * generated code against a second implementation, as real plugins are.
 */
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import type { DescEnum, DescField, DescMessage, Message } from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";

export const PROTO_ROOT = fileURLToPath(new URL("../../proto", import.meta.url));

const loaderOptions: protoLoader.Options = {
  // Keep field names as written in the .proto (e.g. supported_versions, ID).
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

/** Loads one .proto (path relative to proto/) and returns its grpc-js package tree. */
export function loadProto(relativePath: string): grpc.GrpcObject {
  const definition = protoLoader.loadSync(path.join(PROTO_ROOT, relativePath), loaderOptions);
  return grpc.loadPackageDefinition(definition);
}

type ServiceCtor = grpc.ServiceClientConstructor;

export const pluginRegistration = () => (loadProto("pluginregistration/v1/api.proto").pluginregistration as grpc.GrpcObject).Registration as ServiceCtor;
export const devicePluginV1beta1 = () => loadProto("deviceplugin/v1beta1/api.proto").v1beta1 as grpc.GrpcObject;
export const podResourcesV1 = () => loadProto("podresources/v1/api.proto").v1 as grpc.GrpcObject;
export const edgeplugV1 = () => ((loadProto("edgeplug/v1/agent.proto").edgeplug as grpc.GrpcObject).v1 as grpc.GrpcObject);
export const csiV1 = () => ((loadProto("csi/v1/csi.proto").csi as grpc.GrpcObject).v1 as grpc.GrpcObject);
/** The DRA kubelet plugin API; `version` is "v1" or "v1beta1" (package k8s.io.kubelet.pkg.apis.dra.<version>). */
export const draPackage = (version: "v1" | "v1beta1") =>
  `k8s.io.kubelet.pkg.apis.dra.${version}`
    .split(".")
    .reduce((pkg, part) => pkg[part] as grpc.GrpcObject, loadProto(`dra/${version}/api.proto`));

/** The service constructor `name` (e.g. "DevicePlugin") of a loaded package, failing loudly when absent. */
export function serviceOf(pkg: grpc.GrpcObject, name: string): grpc.ServiceClientConstructor {
  const service = pkg[name];
  if (typeof service !== "function" || !("service" in service)) throw new Error(`no service ${name} in the loaded package`);
  return service as grpc.ServiceClientConstructor;
}

const LONG_SCALARS = new Set<ScalarType>([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

/**
 * The plain object @grpc/proto-loader (with this file's options) hands to
 * grpc-js handlers for `message`, and accepts from them: proto field names,
 * 64-bit integers as decimal strings, enums by name, fields that are not set
 * left out, and the virtual property protobuf.js adds for each set oneof
 * (`kind: "plugin"`) and each set proto3 `optional` field (`_share_id: "share_id"`).
 * Lets a test write one protobuf-es message and check both codecs against it.
 */
export function toLoaderObject(desc: DescMessage, message: Message): Record<string, unknown> {
  const present = reflect(desc, message);
  const object: Record<string, unknown> = {};
  const fields = message as unknown as Record<string, unknown>;
  for (const field of desc.fields) {
    if (!present.isSet(field)) continue;
    if (field.oneof !== undefined) {
      object[field.name] = loaderValue(field, (fields[field.oneof.localName] as { value: unknown }).value);
      object[field.oneof.name] = field.name;
      continue;
    }
    object[field.name] = loaderValue(field, fields[field.localName]);
    if (field.proto.proto3Optional) object[`_${field.name}`] = field.name;
  }
  return object;
}

function loaderValue(field: DescField, value: unknown): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return loaderScalar(field.scalar, value);
    case "enum":
      return enumName(field.enum, value as number);
    case "message":
      // protobuf-es holds wrapper fields (google.protobuf.BoolValue, ...) unboxed.
      if (isWrapperDesc(field.message)) return { value: loaderScalar(field.message.fields[0]!.scalar!, value) };
      return toLoaderObject(field.message, value as Message);
    case "list":
      return (value as unknown[]).map((item) => {
        if (field.listKind === "scalar") return loaderScalar(field.scalar, item);
        if (field.listKind === "enum") return enumName(field.enum, item as number);
        return toLoaderObject(field.message, item as Message);
      });
    case "map":
      return Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([key, item]) => {
          if (field.mapKind === "scalar") return [key, loaderScalar(field.scalar, item)];
          if (field.mapKind === "enum") return [key, enumName(field.enum, item as number)];
          return [key, toLoaderObject(field.message, item as Message)];
        }),
      );
  }
}

function loaderScalar(scalar: ScalarType, value: unknown): unknown {
  if (LONG_SCALARS.has(scalar)) return String(value);
  if (scalar === ScalarType.BYTES) return Buffer.from(value as Uint8Array);
  return value;
}

function enumName(desc: DescEnum, value: number): string {
  const found = desc.values.find((v) => v.number === value);
  if (found === undefined) throw new Error(`${desc.typeName} has no value ${value}`);
  return found.name;
}

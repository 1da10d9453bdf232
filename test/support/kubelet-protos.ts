/**
 * The repository's .proto files loaded by @grpc/proto-loader: an encoder and
 * decoder independent of protobuf-es, so tests that use it check edgeplug's
 * generated code against a second implementation, as real plugins are.
 */
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

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

export const pluginRegistration = () =>
  (loadProto("pluginregistration/v1/api.proto").pluginregistration as grpc.GrpcObject).Registration as ServiceCtor;
export const devicePluginV1beta1 = () => loadProto("deviceplugin/v1beta1/api.proto").v1beta1 as grpc.GrpcObject;
export const podResourcesV1 = () => loadProto("podresources/v1/api.proto").v1 as grpc.GrpcObject;
export const edgeplugV1 = () =>
  ((loadProto("edgeplug/v1/agent.proto").edgeplug as grpc.GrpcObject).v1 as grpc.GrpcObject);

/**
 * Status and WatchEvents answered to binary protobuf clients (gRPC, Connect
 * with application/proto) as the views of proto/edgeplug/v1/agent_view.proto:
 * the same bytes on the wire as StatusResponse and Event, with each
 * ResourceStatus as its encoding, made once per status object. The device
 * manager hands out one ResourceStatus object per change of a resource
 * (device-status.ts), so a resource of 100,000 devices is encoded once per
 * change, however many events and Status calls carry it; encoding it per
 * answer took as long as reading the list. JSON clients are answered from
 * agent.proto's messages (agent-service.ts).
 */
import { Buffer } from "node:buffer";
import { create, toBinary } from "@bufbuild/protobuf";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import type { Event, ResourceStatus, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { Agent, ResourceStatusSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { EventView, StatusResponseView } from "../gen/edgeplug/v1/agent_view_pb.ts";
import { EventViewSchema, StatusResponseViewSchema } from "../gen/edgeplug/v1/agent_view_pb.ts";

const statusView = { ...Agent.method.status, output: StatusResponseViewSchema };
const watchEventsView = { ...Agent.method.watchEvents, output: EventViewSchema };

type AgentMethods = (typeof Agent)["method"];

/** edgeplug.v1.Agent, the same methods on the same paths, with Status and WatchEvents answering the views. */
export const AgentBinaryView = {
  ...Agent,
  methods: Agent.methods.map((method) => (method === Agent.method.status ? statusView : method === Agent.method.watchEvents ? watchEventsView : method)),
  method: { ...Agent.method, status: statusView, watchEvents: watchEventsView },
} as unknown as GenService<{
  status: { methodKind: "unary"; input: AgentMethods["status"]["input"]; output: typeof StatusResponseViewSchema };
  allocate: { methodKind: "unary"; input: AgentMethods["allocate"]["input"]; output: AgentMethods["allocate"]["output"] };
  release: { methodKind: "unary"; input: AgentMethods["release"]["input"]; output: AgentMethods["release"]["output"] };
  watchEvents: { methodKind: "server_streaming"; input: AgentMethods["watchEvents"]["input"]; output: typeof EventViewSchema };
}>;

const encodings = new WeakMap<ResourceStatus, Uint8Array>();

/** The encoding of `status`, made on first use and kept as long as the object lives. */
export function encodedResource(status: ResourceStatus): Uint8Array {
  let bytes = encodings.get(status);
  if (bytes === undefined) {
    bytes = encodeResourceStatus(status);
    encodings.set(status, bytes);
  }
  return bytes;
}

export function statusResponseView(status: StatusResponse): StatusResponseView {
  return create(StatusResponseViewSchema, {
    ok: status.ok,
    node: status.node,
    plugins: status.plugins,
    resources: status.resources.map(encodedResource),
    allocations: status.allocations,
    checkpoint: status.checkpoint,
    watchLimits: status.watchLimits,
    fleet: status.fleet,
    version: status.version,
    commit: status.commit,
  });
}

export function eventView(event: Event): EventView {
  const { sequence, time, kind } = event;
  switch (kind.case) {
    case "snapshot":
      return create(EventViewSchema, { sequence, time, kind: { case: "snapshot", value: statusResponseView(kind.value) } });
    case "resource": {
      const { resource, removed } = kind.value;
      return create(EventViewSchema, { sequence, time, kind: { case: "resource", value: { resource: resource ? encodedResource(resource) : new Uint8Array(0), removed } } });
    }
    case "plugin":
      return create(EventViewSchema, { sequence, time, kind: { case: "plugin", value: kind.value } });
    case "allocation":
      return create(EventViewSchema, { sequence, time, kind: { case: "allocation", value: kind.value } });
    case "watchLimits":
      return create(EventViewSchema, { sequence, time, kind: { case: "watchLimits", value: kind.value } });
    default:
      return create(EventViewSchema, { sequence, time });
  }
}

/**
 * ResourceStatus's bytes, fields in number order as protobuf-es writes them:
 * the small fields by protobuf-es, the two device id lists written straight
 * into one buffer (protobuf-es makes a Uint8Array per string).
 */
function encodeResourceStatus(status: ResourceStatus): Uint8Array {
  const head = toBinary(ResourceStatusSchema, create(ResourceStatusSchema, { name: status.name, capacity: status.capacity, allocatable: status.allocatable }));
  const tail = toBinary(ResourceStatusSchema, create(ResourceStatusSchema, { connected: status.connected, sockets: status.sockets, error: status.error }));
  const bytes = Buffer.concat([head, encodedStrings(HEALTHY_FIELD, status.healthy), encodedStrings(UNHEALTHY_FIELD, status.unhealthy), tail]);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** ResourceStatus fields 4 and 5 (repeated string), tagged as one byte each. */
const HEALTHY_FIELD = 4;
const UNHEALTHY_FIELD = 5;
const LENGTH_DELIMITED = 2;
/** 3 bytes of UTF-8 per UTF-16 code unit stay under 2^14: a length of at most 2 varint bytes. */
const MAX_DIRECT_LENGTH = 5000;

/** A repeated string field of a number under 16 (a one-byte tag), encoded. */
function encodedStrings(field: number, values: readonly string[]): Uint8Array {
  // Device ids are at most 63 characters; anything far longer goes the general way.
  if (values.some((value) => value.length > MAX_DIRECT_LENGTH)) {
    const writer = new BinaryWriter();
    for (const value of values) writer.tag(field, WireType.LengthDelimited).string(value);
    return writer.finish();
  }
  let bound = 0;
  for (const value of values) bound += 3 + 3 * value.length;
  const out = Buffer.allocUnsafe(bound);
  const tag = (field << 3) | LENGTH_DELIMITED;
  let at = 0;
  for (const value of values) {
    out[at] = tag;
    if (value.length < 43) {
      // At most 126 bytes: a one-byte length.
      const length = out.write(value, at + 2, "utf8");
      out[at + 1] = length;
      at += 2 + length;
    } else {
      const length = out.write(value, at + 3, "utf8");
      if (length < 0x80) {
        out.copyWithin(at + 2, at + 3, at + 3 + length);
        out[at + 1] = length;
        at += 2 + length;
      } else {
        out[at + 1] = (length & 0x7f) | 0x80;
        out[at + 2] = length >>> 7;
        at += 3 + length;
      }
    }
  }
  return out.subarray(0, at);
}

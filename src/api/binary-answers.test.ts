import assert from "node:assert/strict";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Event, EventSchema, ResourceStatusSchema, StatusResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { EventViewSchema, StatusResponseViewSchema } from "../gen/edgeplug/v1/agent_view_pb.ts";
import { encodedResource, eventView, statusResponseView } from "./binary-answers.ts";

const ids = (count: number, prefix: string) => Array.from({ length: count }, (_, i) => `${prefix}${i}`);

const resources = [
  create(ResourceStatusSchema, {
    name: "example.com/gpu",
    capacity: 4,
    allocatable: 3,
    healthy: ["a", "b", "é-ünïcode", "😀"],
    unhealthy: ["z"],
    connected: true,
    sockets: ["/dp/a.sock", "/dp/b.sock"],
  }),
  create(ResourceStatusSchema, {
    name: "example.com/long",
    capacity: 3,
    healthy: ["x".repeat(42), "y".repeat(43), "é".repeat(63)],
    unhealthy: ["ü".repeat(50)],
    connected: false,
    error: "/dp/c.sock: refused",
  }),
  create(ResourceStatusSchema, { name: "example.com/many", capacity: 20_000, allocatable: 20_000, healthy: ids(20_000, "GPU-0650a168-e770-3ea8-8ac3-"), connected: true, sockets: ["/dp/m.sock"] }),
  create(ResourceStatusSchema, { name: "example.com/empty" }),
  create(ResourceStatusSchema, { name: "example.com/huge-id", healthy: ["h".repeat(6000)] }),
];

const status = create(StatusResponseSchema, {
  ok: false,
  node: "node-1",
  plugins: [{ socket: "/r/a.sock", type: "DevicePlugin", name: "example.com/gpu", versions: ["v1beta1"], state: "registered", attempts: 1 }],
  resources,
  allocations: [{ owner: "job", container: "main", resource: "example.com/gpu", devices: ["a"] }],
  checkpoint: { path: "/var/lib/edgeplug/kubelet_internal_checkpoint", restore: "restored", writes: 3 },
  watchLimits: { watchedDirectories: 1024, directoryLimit: 1024, knownSockets: 7, socketLimit: 4096, skippedDirectories: 2 },
});

test("the status and event views have every field of StatusResponse and Event, by number and name, so that a field added to one is not lost on the wire", () => {
  const fields = (schema: typeof StatusResponseSchema | typeof StatusResponseViewSchema) => schema.fields.map((field) => `${field.number} ${field.name}`);
  assert.deepEqual(fields(StatusResponseViewSchema), fields(StatusResponseSchema));
  const eventFields = (schema: typeof EventSchema | typeof EventViewSchema) => schema.fields.map((field) => `${field.number} ${field.name}`);
  assert.deepEqual(eventFields(EventViewSchema), eventFields(EventSchema), "and the event view every kind of Event");
});

test("binary clients get the very bytes of StatusResponse, each resource encoded once", () => {
  assert.deepEqual(toBinary(StatusResponseViewSchema, statusResponseView(status)), toBinary(StatusResponseSchema, status));
  for (const resource of resources) assert.deepEqual(encodedResource(resource), toBinary(ResourceStatusSchema, resource), resource.name);
  assert.equal(encodedResource(resources[2]!), encodedResource(resources[2]!), "the same bytes object for the same status object");
});

test("binary clients get the very bytes of every kind of Event", () => {
  const time = timestampFromDate(new Date("2026-12-02T03:00:00Z"));
  const events: Event[] = [
    create(EventSchema, { sequence: 0n, time, kind: { case: "snapshot", value: status } }),
    create(EventSchema, { sequence: 1n, time, kind: { case: "plugin", value: { plugin: status.plugins[0], removed: true } } }),
    create(EventSchema, { sequence: 2n, time, kind: { case: "resource", value: { resource: resources[1], removed: false } } }),
    create(EventSchema, { sequence: 3n, time, kind: { case: "resource", value: { removed: true } } }),
    create(EventSchema, { sequence: 4n, time, kind: { case: "allocation", value: { owner: "job", allocations: status.allocations, released: false } } }),
    create(EventSchema, { sequence: 5n, time, kind: { case: "watchLimits", value: { watchLimits: status.watchLimits } } }),
    create(EventSchema, { sequence: 6n, time, kind: { case: "watchLimits", value: {} } }),
    create(EventSchema, { sequence: 7n, time }),
  ];
  for (const event of events) assert.deepEqual(toBinary(EventViewSchema, eventView(event)), toBinary(EventSchema, event), `${event.kind.case}`);
});

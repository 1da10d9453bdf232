/**
 * The JSON of one API event (docs/status-json.md), as `edgeplug status
 * --watch --output json` prints it and the fleet link publishes it.
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event } from "../gen/edgeplug/v1/agent_pb.ts";
import { pluginToJson, resourceToJson, statusToJson, watchLimitsToJson } from "./status.ts";

/** One JSON object per event: the snapshot as status JSON, changes by kind. */
export function eventToJson(event: Event): Record<string, unknown> {
  const head = { sequence: Number(event.sequence), time: event.time ? timestampDate(event.time).toISOString() : null };
  switch (event.kind.case) {
    case "snapshot":
      return { ...head, kind: "snapshot", snapshot: statusToJson(event.kind.value) };
    case "plugin":
      return {
        ...head,
        kind: "plugin",
        removed: event.kind.value.removed,
        plugin: event.kind.value.plugin ? pluginToJson(event.kind.value.plugin) : null,
      };
    case "resource": {
      const resource = event.kind.value.resource;
      return { ...head, kind: "resource", removed: event.kind.value.removed, resource: resource ? resourceToJson(resource) : null };
    }
    case "allocation":
      return {
        ...head,
        kind: "allocation",
        owner: event.kind.value.owner,
        released: event.kind.value.released,
        allocations: event.kind.value.allocations.map((a) => ({
          owner: a.owner,
          container: a.container,
          resource: a.resource,
          devices: [...a.devices],
        })),
      };
    case "watchLimits":
      return { ...head, kind: "watchLimits", watchLimits: event.kind.value.watchLimits ? watchLimitsToJson(event.kind.value.watchLimits) : null };
    default:
      return { ...head, kind: "unknown" };
  }
}

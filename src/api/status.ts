/**
 * The one status shape, in its three forms: the proto message the API
 * answers (edgeplug.v1.StatusResponse), the CLI's JSON (SPEC.md section 5)
 * and the text table people read. Every producer (daemon, --reconcile-once)
 * and every consumer (status, status --watch) goes through here.
 */
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type {
  AllocationStatus,
  PluginStatus,
  ResourceStatus,
  StatusResponse,
} from "../gen/edgeplug/v1/agent_pb.ts";
import { PluginStatusSchema, StatusResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { PluginRecord } from "../pluginmanager/types.ts";

export interface PluginJson {
  socket: string;
  type: string | null;
  name: string | null;
  endpoint: string | null;
  versions: string[];
  state: string;
  attempts: number;
  registeredAt: string | null;
  error: string | null;
  discoveredAt: string | null;
  lastAttemptAt: string | null;
}

export interface ResourceJson {
  name: string;
  capacity: number;
  allocatable: number;
  healthy: string[];
  unhealthy: string[];
  connected: boolean;
}

export interface AllocationJson {
  owner: string;
  container: string;
  resource: string;
  devices: string[];
}

export interface StatusJson {
  ok: boolean;
  node: string;
  plugins: PluginJson[];
  resources: ResourceJson[];
  allocations: AllocationJson[];
}

/** Converts a plugin manager record to its API message. */
export function pluginStatusFromRecord(record: PluginRecord): PluginStatus {
  return create(PluginStatusSchema, {
    socket: record.socket,
    type: record.type ?? undefined,
    name: record.name ?? undefined,
    endpoint: record.endpoint ?? undefined,
    versions: record.versions,
    state: record.state,
    attempts: record.attempts,
    registeredAt: optionalTimestamp(record.registeredAt),
    error: record.error ?? undefined,
    discoveredAt: optionalTimestamp(record.discoveredAt),
    lastAttemptAt: optionalTimestamp(record.lastAttemptAt),
  });
}

/** Builds the status message; `ok` is derived, never stored. */
export function buildStatus(input: {
  node: string;
  plugins: PluginRecord[];
  resources?: ResourceStatus[];
  allocations?: AllocationStatus[];
}): StatusResponse {
  const resources = input.resources ?? [];
  return create(StatusResponseSchema, {
    ok: input.plugins.every((p) => p.state === "registered") && resources.every((r) => r.connected),
    node: input.node,
    plugins: input.plugins.map(pluginStatusFromRecord),
    resources,
    allocations: input.allocations ?? [],
  });
}

/** The CLI's JSON mapping of the status message (SPEC.md section 5). */
export function statusToJson(status: StatusResponse): StatusJson {
  return {
    ok: status.ok,
    node: status.node,
    plugins: status.plugins.map(pluginToJson),
    resources: status.resources.map((r) => ({
      name: r.name,
      capacity: r.capacity,
      allocatable: r.allocatable,
      healthy: [...r.healthy],
      unhealthy: [...r.unhealthy],
      connected: r.connected,
    })),
    allocations: status.allocations.map((a) => ({
      owner: a.owner,
      container: a.container,
      resource: a.resource,
      devices: [...a.devices],
    })),
  };
}

export function pluginToJson(plugin: PluginStatus): PluginJson {
  return {
    socket: plugin.socket,
    type: plugin.type ?? null,
    name: plugin.name ?? null,
    endpoint: plugin.endpoint ?? null,
    versions: [...plugin.versions],
    state: plugin.state,
    attempts: plugin.attempts,
    registeredAt: isoOrNull(plugin.registeredAt),
    error: plugin.error ?? null,
    discoveredAt: isoOrNull(plugin.discoveredAt),
    lastAttemptAt: isoOrNull(plugin.lastAttemptAt),
  };
}

/**
 * A table a person reads at a glance: one row per plugin socket, then
 * resources and allocations when there are any.
 */
export function statusToText(status: StatusResponse, now: Date = new Date()): string {
  const lines = [`node ${status.node}: ${status.ok ? "ok" : "NOT OK"}`];
  if (status.plugins.length === 0) {
    lines.push("", "no plugin sockets found");
  } else {
    lines.push(
      "",
      ...table(
        ["STATE", "TYPE", "NAME", "AGE", "ATTEMPTS", "SOCKET", "ERROR"],
        status.plugins.map((p) => [
          p.state,
          p.type ?? "-",
          p.name ?? "-",
          p.discoveredAt ? age(timestampDate(p.discoveredAt), now) : "-",
          String(p.attempts),
          p.socket,
          p.error ?? "",
        ]),
      ),
    );
  }
  if (status.resources.length > 0) {
    lines.push(
      "",
      ...table(
        ["RESOURCE", "CAPACITY", "ALLOCATABLE", "CONNECTED", "UNHEALTHY"],
        status.resources.map((r) => [
          r.name,
          String(r.capacity),
          String(r.allocatable),
          r.connected ? "yes" : "no",
          r.unhealthy.join(",") || "-",
        ]),
      ),
    );
  }
  if (status.allocations.length > 0) {
    lines.push(
      "",
      ...table(
        ["OWNER", "CONTAINER", "RESOURCE", "DEVICES"],
        status.allocations.map((a) => [a.owner, a.container, a.resource, a.devices.join(",")]),
      ),
    );
  }
  return lines.join("\n") + "\n";
}

function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const render = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [render(header), ...rows.map(render)];
}

/** kubectl-style ages: 45s, 3m12s, 5h3m, 2d4h. */
export function age(since: Date, now: Date): string {
  const seconds = Math.max(0, Math.floor((now.getTime() - since.getTime()) / 1000));
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m${seconds % 60}s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours}h${minutes % 60}m`;
  return `${Math.floor(hours / 24)}d${hours % 24}h`;
}

function optionalTimestamp(date: Date | null) {
  return date ? timestampFromDate(date) : undefined;
}

function isoOrNull(timestamp: PluginStatus["registeredAt"]): string | null {
  return timestamp ? timestampDate(timestamp).toISOString() : null;
}

/**
 * The one status shape, in its three forms: the proto message the API
 * answers (edgeplug.v1.StatusResponse), the CLI's JSON (docs/status-json.md)
 * and the text table people read. Every producer (daemon, --reconcile-once)
 * and every consumer (status, status --watch) goes through here.
 */
import { create, type DescMessage, type JsonObject, type JsonValue, toJson } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AllocationStatus, CheckpointStatus, PluginStatus, ResourceStatus, StatusResponse, WatchLimitsStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import { PluginStatusSchema, ResourceStatusSchema, StatusResponseSchema, WatchLimitsStatusSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { printable } from "../log/printable.ts";
import { formatDuration } from "../policy/duration.ts";
import { buildCommit, EDGEPLUG_VERSION } from "../platform/build-info.ts";
import type { FailureReason } from "../pluginmanager/types.ts";
import type { WatchLimitsReached } from "../pluginmanager/watch-limits.ts";
import type { PluginRecord } from "./plugin-status.ts";
import { fleetLinkLines } from "./fleet-link-text.ts";
import { type CsiJson, type DraJson, type PluginDetails, pluginDetailsTables } from "../handlers/csi-dra-status.ts";

/*
 * The CLI's JSON shapes are written here rather than taken from protoc-gen-es's
 * `json_types`: those make every field optional (proto3 JSON may leave any
 * out), where the CLI's JSON always has every field, null when unset
 * (docs/status-json.md), and they type `reason` and `kind` as any string
 * where consumers switch over the few values the agent sends.
 */
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
  /** docs/metrics.md, "Failure reasons"; null exactly when `error` is. */
  reason: FailureReason | null;
  /** Set by the CSI / DRA handlers (docs/csi-dra.md); null for other plugins. */
  csi: CsiJson | null;
  dra: DraJson | null;
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
  /** When the agent recorded the owner's first allocation; null for a plain owner restored from the checkpoint. */
  allocatedAt: string | null;
  /** Whole seconds since allocatedAt (a uint64: a string in JSON); null with it. */
  ageSeconds: string | null;
  kind: "plain" | "process" | "lease";
  ownerPid: number | null;
  leaseExpiresAt: string | null;
}

export interface CheckpointJson {
  path: string;
  restore: "pending" | "missing" | "restored" | "corrupt";
  restoreError: string | null;
  movedTo: string | null;
  writes: number;
  writeFailures: number;
  lastWriteAt: string | null;
  writeError: string | null;
}

export interface StatusJson {
  ok: boolean;
  node: string;
  plugins: PluginJson[];
  resources: ResourceJson[];
  allocations: AllocationJson[];
  /** null where the device state is not checkpointed. */
  checkpoint: CheckpointJson | null;
  /** null while the watcher leaves nothing out (docs/api.md, "What the watcher holds"). */
  watchLimits: WatchLimitsReached | null;
  /** The agent's version and the commit it was built from. */
  version: string;
  commit: string;
}

/** Converts a plugin manager record to its API message. */
export function pluginStatusFromRecord(record: PluginRecord, details: PluginDetails = {}): PluginStatus {
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
    reason: record.reason ?? undefined,
    discoveredAt: optionalTimestamp(record.discoveredAt),
    lastAttemptAt: optionalTimestamp(record.lastAttemptAt),
    ...details,
  });
}

/** Builds the status message; `ok` is derived, never stored. */
export function buildStatus(input: {
  node: string;
  plugins: PluginRecord[];
  resources?: ResourceStatus[];
  allocations?: AllocationStatus[];
  /** The device checkpoint, where there is one. */
  checkpoint?: CheckpointStatus;
  /** A plugin's handler details (CSI, DRA). */
  details?: (record: PluginRecord) => PluginDetails;
  /** What the watcher leaves out, while it does: sockets with no record, so not ok. */
  watchLimits?: WatchLimitsReached | null;
}): StatusResponse {
  const resources = input.resources ?? [];
  const watchLimits = input.watchLimits ? create(WatchLimitsStatusSchema, input.watchLimits) : undefined;
  return create(StatusResponseSchema, {
    version: EDGEPLUG_VERSION,
    commit: buildCommit(),
    // A checkpoint that cannot be written refuses every allocation and release: the node is not ok until a write succeeds.
    ok: input.plugins.every((p) => p.state === "registered") && resources.every((r) => r.connected) && !watchLimits && input.checkpoint?.writeError === undefined,
    node: input.node,
    plugins: input.plugins.map((record) => pluginStatusFromRecord(record, input.details?.(record))),
    resources,
    allocations: input.allocations ?? [],
    checkpoint: input.checkpoint,
    watchLimits,
  });
}

/**
 * The CLI's JSON of the status message (docs/status-json.md), which is the
 * API's JSON (`curl` on Agent/Status) with one rule added: the API writes the
 * canonical proto3 JSON with default values included, and leaves out a
 * field that has no value (an optional string, an unset timestamp); the CLI
 * writes that field as `null`. Drop the nulls from the CLI's JSON and it is
 * the API's, field for field (timestamps, numbers, names and order alike).
 * Fields added to the proto appear in both without a change here.
 */
export function statusToJson(status: StatusResponse): StatusJson {
  return withNulls(StatusResponseSchema, toJson(StatusResponseSchema, status, JSON_OPTIONS)) as unknown as StatusJson;
}

export function pluginToJson(plugin: PluginStatus): PluginJson {
  return withNulls(PluginStatusSchema, toJson(PluginStatusSchema, plugin, JSON_OPTIONS)) as unknown as PluginJson;
}

export function resourceToJson(resource: ResourceStatus): ResourceJson {
  return withNulls(ResourceStatusSchema, toJson(ResourceStatusSchema, resource, JSON_OPTIONS)) as unknown as ResourceJson;
}

export function watchLimitsToJson(limits: WatchLimitsStatus): JsonObject {
  return withNulls(WatchLimitsStatusSchema, toJson(WatchLimitsStatusSchema, limits, JSON_OPTIONS));
}

/** The options the API socket serves JSON with (src/api/agent-socket.ts). */
const JSON_OPTIONS = { alwaysEmitImplicit: true } as const;

/** `json` (proto3 JSON of a `desc` message) in field order, each field without a value as null, nested messages alike. */
function withNulls(desc: DescMessage, json: JsonValue): JsonObject {
  const object = json as JsonObject;
  const out: JsonObject = {};
  for (const field of desc.fields) {
    const value = object[field.jsonName];
    if (value === undefined || value === null) {
      out[field.jsonName] = null;
    } else if (field.fieldKind === "message" && isPlainObject(value)) {
      out[field.jsonName] = withNulls(field.message, value);
    } else if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
      const element = field.message;
      out[field.jsonName] = value.map((item) => (isPlainObject(item) ? withNulls(element, item) : item));
    } else {
      out[field.jsonName] = value;
    }
  }
  return out;
}

/** A message written as a JSON object (well-known types such as Timestamp are written as strings instead). */
function isPlainObject(value: JsonValue): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The agent's version under the verdict, when the status carries one. */
function versionLines(status: StatusResponse): string[] {
  return status.version ? [printable(`agent edgeplug ${status.version} (${status.commit || "unknown commit"})`)] : [];
}

/**
 * A table a person reads at a glance: one row per plugin socket, then
 * resources and allocations when there are any.
 */
export function statusToText(status: StatusResponse, now: Date = new Date()): string {
  const lines = [
    `node ${printable(status.node)}: ${status.ok ? "ok" : "NOT OK"}`,
    ...versionLines(status),
    ...checkpointLines(status),
    ...watchLimitsLines(status),
    ...fleetLinkLines(status, now),
  ];
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
  for (const [header, ...rows] of pluginDetailsTables(status)) lines.push("", ...table(header!, rows));
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
        ["OWNER", "CONTAINER", "RESOURCE", "DEVICES", "AGE", "HELD"],
        status.allocations.map((a) => [a.owner, a.container, a.resource, a.devices.join(","), ageText(a), heldText(a)]),
      ),
    );
  }
  return lines.join("\n") + "\n";
}

/** An allocation's age (`-` for a plain owner restored from the checkpoint, whose age is not known). */
function ageText(allocation: AllocationStatus): string {
  return allocation.ageSeconds === undefined ? "-" : formatDuration(Number(allocation.ageSeconds) * 1000);
}

/** How long its owner holds it: until released, while a process runs, or until a lease lapses. */
function heldText(allocation: AllocationStatus): string {
  if (allocation.kind === "process") return `pid ${allocation.ownerPid ?? "?"}`;
  if (allocation.kind === "lease") return `lease until ${allocation.leaseExpiresAt ? timestampDate(allocation.leaseExpiresAt).toISOString() : "?"}`;
  return "until released";
}

/** Only what needs attention: a corrupt checkpoint at start, a failing write. */
function checkpointLines({ checkpoint }: StatusResponse): string[] {
  if (!checkpoint) return [];
  const lines: string[] = [];
  const where = `checkpoint ${printable(checkpoint.path)}`;
  if (checkpoint.restore === "corrupt") {
    lines.push(`${where}: corrupt at start (${printable(checkpoint.restoreError ?? "")}); moved aside to ${printable(checkpoint.movedTo ?? "")}, started with no allocations`);
  }
  if (checkpoint.writeError !== undefined) lines.push(`${where}: last write failed: ${printable(checkpoint.writeError)}`);
  return lines;
}

function watchLimitsLines({ watchLimits: limits }: StatusResponse): string[] {
  return limits ? [watchLimitsLine(limits)] : [];
}

/** What the watcher leaves out, in one line (`status`, and `status --watch` when it changes). */
export function watchLimitsLine(limits: WatchLimitsStatus): string {
  const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
  return (
    `watch limits reached: ${count(limits.skippedDirectories, "directory", "directories")} and ${count(limits.skippedSockets, "socket", "sockets")} left out ` +
    `(${limits.watchedDirectories} of ${limits.directoryLimit} directories watched, ${limits.knownSockets} of ${limits.socketLimit} sockets known)`
  );
}

/** Columns padded to their widest cell; cells come from plugins and are shown with control characters escaped. */
function table(header: string[], unsafeRows: string[][]): string[] {
  const rows = unsafeRows.map((row) => row.map(printable));
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

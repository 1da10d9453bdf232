/**
 * The report of `run --reconcile-once`: the status JSON plus `schema`,
 * `startedAt`, `durationMs`, the expectations the run was asked to meet,
 * every socket that did not register with its reason, the device plugins
 * that registered on kubelet.sock, and every resource that is not connected
 * with the reason.
 *
 * The verdict (docs/commands.md, `--reconcile-once`): without
 * `--expect`/`--require`/`--expect-resource` every socket counts (every
 * plugin registered, every resource connected, every device plugin socket
 * found at the start registered on kubelet.sock); with them only the
 * expectations count, unless `--strict` makes every socket count as well.
 * Failed sockets and resources not connected are listed either way.
 */
import type { PluginStatus, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { printable } from "../log/printable.ts";
import { formatDuration } from "../policy/duration.ts";
import { type StatusJson, statusToJson, statusToText } from "./status.ts";

export const REPORT_SCHEMA = 1;

export interface Expectations {
  /** At least this many registered plugins (`--expect N`); null when not asked. */
  expect: number | null;
  /** A registered plugin of each of these names (`--require NAME`); a device plugin on kubelet.sock is named by its resource. */
  require: string[];
  /** Resource name -> at least this many healthy devices, connected whichever way its plugin registered (`--expect-resource NAME=N`). */
  resources: Record<string, number>;
  /** Every socket counts even when expectations are given (`--strict`). */
  strict: boolean;
}

/** A socket that did not register, and why. */
export interface FailedSocketJson {
  socket: string;
  type: string | null;
  name: string | null;
  state: string;
  error: string;
  /** docs/metrics.md, "Failure reasons"; null while a socket is still pending. */
  reason: string | null;
}

/** A device plugin connected through kubelet.sock (Register), which has no socket record of its own in `plugins`. */
export interface RegisteredDevicePluginJson {
  resource: string;
  socket: string;
}

/** A resource that is not connected at the end of the run, and why. */
export interface DisconnectedResourceJson {
  resource: string;
  error: string;
  /** Whether it counts against `ok`: every socket counts, or --expect-resource names it. */
  counts: boolean;
}

/** What the run saw of device plugins beyond the plugin sockets' records. */
export interface DevicePluginsSeen {
  /** Connected through kubelet.sock at the end. */
  registered: RegisteredDevicePluginJson[];
  /** Sockets in kubelet.sock's directory that accepted connections at the start and whose plugin did not register. */
  silent: string[];
  /** Resources a plugin connected during the run (the others come from the checkpoint only). */
  seen: ReadonlySet<string>;
  /** kubelet.sock, when this run served it. */
  registrationSocket: string | null;
  /** Who served kubelet.sock instead of this run (an edgeplug daemon, a kubelet), when someone did. */
  registrationSocketHeldBy?: string | null;
  timeoutMs: number;
}

export const NO_DEVICE_PLUGINS_SEEN: DevicePluginsSeen = { registered: [], silent: [], seen: new Set(), registrationSocket: null, timeoutMs: 0 };

export interface ReportJson extends StatusJson {
  schema: typeof REPORT_SCHEMA;
  startedAt: string;
  durationMs: number;
  /** What decided `ok`: "every socket", or "expectations" (given and not --strict). */
  verdictBy: "every socket" | "expectations";
  expectations: Expectations & { unmet: string[] };
  failed: FailedSocketJson[];
  /** Device plugins connected through kubelet.sock; they count for `--expect` and `--require` (by resource name). */
  registrationSocketPlugins: RegisteredDevicePluginJson[];
  /** Who served kubelet.sock instead of this run, or null: device plugins registered with it are not seen. */
  registrationSocketHeldBy: string | null;
  /** Resources not connected at the end: restored from the checkpoint and never seen in this run, or whose plugin went away. */
  disconnected: DisconnectedResourceJson[];
}

/** Whether the run was given expectations of its own (`--expect` or `--require`). */
export function hasExpectations(expectations: Expectations): boolean {
  return expectations.expect !== null || expectations.require.length > 0 || Object.keys(expectations.resources).length > 0;
}

/**
 * What is still missing for the expectations to hold; empty when they do.
 * A required plugin that some socket advertises but that did not register is
 * quoted with that socket's error, so a refusal reads as the refusal.
 * Device plugins registered on kubelet.sock count as plugins named by their resource.
 */
export function unmetExpectations(status: StatusResponse, expectations: Expectations, kubeletPlugins: readonly RegisteredDevicePluginJson[] = []): string[] {
  const registered = status.plugins.filter((p) => p.state === "registered");
  const unmet: string[] = [];
  const found = registered.length + kubeletPlugins.length;
  if (expectations.expect !== null && found < expectations.expect) {
    const where = kubeletPlugins.length > 0 ? ` (${registered.length} in the watched directories, ${kubeletPlugins.length} on kubelet.sock)` : "";
    unmet.push(`expected at least ${expectations.expect} registered plugins, found ${found}${where}`);
  }
  for (const name of expectations.require) {
    if (registered.some((p) => p.name === name) || kubeletPlugins.some((p) => p.resource === name)) continue;
    const tried = status.plugins.filter((p) => p.name === name);
    const why = tried.map((p) => `${p.socket} ${p.state}: ${p.error ?? "no error recorded"}`).join("; ");
    unmet.push(`required plugin ${name} is not registered${why ? ` (${why})` : " (no socket advertises it)"}`);
  }
  for (const [name, count] of Object.entries(expectations.resources)) {
    const resource = status.resources.find((r) => r.name === name);
    const healthy = resource?.connected ? resource.healthy.length : 0;
    if (healthy >= count) continue;
    const what = `expected resource ${name} with at least ${count} healthy devices`;
    if (resource === undefined) unmet.push(`${what}, found none (no device plugin registered it)`);
    else if (!resource.connected) unmet.push(`${what}, found it not connected (no device plugin serves it now)`);
    else unmet.push(`${what}, found ${healthy} healthy of ${resource.capacity}`);
  }
  return unmet;
}

/** Every resource that is not connected, why, and whether it counts against the verdict. */
export function disconnectedResources(status: StatusResponse, expectations: Expectations, seen: ReadonlySet<string>): DisconnectedResourceJson[] {
  const everyResourceCounts = !hasExpectations(expectations) || expectations.strict;
  return status.resources
    .filter((r) => !r.connected)
    .map((r) => ({
      resource: r.name,
      error: seen.has(r.name) ? "its device plugin went away during the run" : "in the checkpoint, but no device plugin registered it during this run",
      counts: everyResourceCounts || Object.hasOwn(expectations.resources, r.name),
    }));
}

/** Every socket that is not registered, with the reason its last attempt gave. */
export function failedSockets(plugins: readonly PluginStatus[]): FailedSocketJson[] {
  return plugins
    .filter((p) => p.state !== "registered")
    .map((p) => ({
      socket: p.socket,
      type: p.type ?? null,
      name: p.name ?? null,
      state: p.state,
      error: p.error ?? `still ${p.state}`,
      reason: p.reason ?? null,
    }));
}

export function buildReport(
  status: StatusResponse,
  expectations: Expectations,
  startedAt: Date,
  finishedAt: Date,
  devicePlugins: DevicePluginsSeen = NO_DEVICE_PLUGINS_SEEN,
): ReportJson {
  const unmet = unmetExpectations(status, expectations, devicePlugins.registered);
  const json = statusToJson(status);
  const verdictBy = hasExpectations(expectations) && !expectations.strict ? "expectations" : "every socket";
  const silent = devicePlugins.silent.map((socket) => ({
    socket,
    type: "DevicePlugin",
    name: null,
    state: "failed",
    error: `accepted connections when the run started, but no device plugin registered it on ${devicePlugins.registrationSocket ?? "kubelet.sock"} within ${formatDuration(devicePlugins.timeoutMs)}`,
    reason: "timeout",
  }));
  return {
    schema: REPORT_SCHEMA,
    ...json,
    ok: unmet.length === 0 && (verdictBy === "expectations" || (json.ok && silent.length === 0)),
    startedAt: startedAt.toISOString(),
    durationMs: finishedAt.getTime() - startedAt.getTime(),
    verdictBy,
    expectations: { ...expectations, unmet },
    failed: [...failedSockets(status.plugins), ...silent],
    registrationSocketPlugins: devicePlugins.registered,
    registrationSocketHeldBy: devicePlugins.registrationSocketHeldBy ?? null,
    disconnected: disconnectedResources(status, expectations, devicePlugins.seen),
  };
}

export function reportToText(report: ReportJson, status: StatusResponse): string {
  const lines = [statusToText({ ...status, ok: report.ok })];
  for (const failure of report.failed) {
    lines.push(printable(`failed: ${failure.socket}${failure.name ? ` (${failure.name})` : ""}: ${failure.error}`));
  }
  for (const plugin of report.registrationSocketPlugins) lines.push(printable(`registered on kubelet.sock: ${plugin.resource} at ${plugin.socket}`));
  for (const resource of report.disconnected) {
    const count = resource.counts ? "" : ` (not counted: the expectations decide; --expect-resource ${resource.resource}=N or --strict counts it)`;
    lines.push(printable(`not connected: ${resource.resource}: ${resource.error}${count}`));
  }
  for (const reason of report.expectations.unmet) lines.push(`unmet: ${printable(reason)}`);
  if (report.registrationSocketHeldBy !== null) {
    lines.push(
      printable(`note: kubelet.sock is served by ${report.registrationSocketHeldBy}, not by this run: device plugins registered there are not seen or counted here (ask it: edgeplug status)`),
    );
  }
  const ignored = report.ok && report.failed.length > 0 ? " (failed sockets ignored: the expectations decide; --strict counts them)" : "";
  lines.push(`reconcile-once ${report.ok ? "ok" : "FAILED"}${ignored} in ${report.durationMs} ms`);
  return lines.join("\n") + "\n";
}

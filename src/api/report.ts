/**
 * The report of `run --reconcile-once`: the status JSON plus `schema`,
 * `startedAt`, `durationMs`, the expectations the run was asked to meet,
 * and every socket that did not register with its reason.
 *
 * The verdict (docs/commands.md, `--reconcile-once`): without `--expect`/`--require` every
 * socket counts (every plugin registered, every resource connected); with
 * them only the expectations count, unless `--strict` makes every socket
 * count as well. Failed sockets are listed either way.
 */
import type { PluginStatus, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { printable } from "../log/printable.ts";
import { statusToJson, statusToText, type StatusJson } from "./status.ts";

export const REPORT_SCHEMA = 1;

export interface Expectations {
  /** At least this many registered plugins (`--expect N`); null when not asked. */
  expect: number | null;
  /** A registered plugin of each of these names (`--require NAME`). */
  require: string[];
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

export interface ReportJson extends StatusJson {
  schema: typeof REPORT_SCHEMA;
  startedAt: string;
  durationMs: number;
  /** What decided `ok`: "every socket", or "expectations" (given and not --strict). */
  verdictBy: "every socket" | "expectations";
  expectations: Expectations & { unmet: string[] };
  failed: FailedSocketJson[];
}

/** Whether the run was given expectations of its own (`--expect` or `--require`). */
export function hasExpectations(expectations: Expectations): boolean {
  return expectations.expect !== null || expectations.require.length > 0;
}

/**
 * What is still missing for the expectations to hold; empty when they do.
 * A required plugin that some socket advertises but that did not register is
 * quoted with that socket's error, so a refusal reads as the refusal.
 */
export function unmetExpectations(status: StatusResponse, expectations: Expectations): string[] {
  const registered = status.plugins.filter((p) => p.state === "registered");
  const unmet: string[] = [];
  if (expectations.expect !== null && registered.length < expectations.expect) {
    unmet.push(`expected at least ${expectations.expect} registered plugins, found ${registered.length}`);
  }
  for (const name of expectations.require) {
    if (registered.some((p) => p.name === name)) continue;
    const tried = status.plugins.filter((p) => p.name === name);
    const why = tried.map((p) => `${p.socket} ${p.state}: ${p.error ?? "no error recorded"}`).join("; ");
    unmet.push(`required plugin ${name} is not registered${why ? ` (${why})` : " (no socket advertises it)"}`);
  }
  return unmet;
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
): ReportJson {
  const unmet = unmetExpectations(status, expectations);
  const json = statusToJson(status);
  const verdictBy = hasExpectations(expectations) && !expectations.strict ? "expectations" : "every socket";
  return {
    schema: REPORT_SCHEMA,
    ...json,
    ok: unmet.length === 0 && (verdictBy === "expectations" || json.ok),
    startedAt: startedAt.toISOString(),
    durationMs: finishedAt.getTime() - startedAt.getTime(),
    verdictBy,
    expectations: { ...expectations, unmet },
    failed: failedSockets(status.plugins),
  };
}

export function reportToText(report: ReportJson, status: StatusResponse): string {
  const lines = [statusToText({ ...status, ok: report.ok })];
  for (const failure of report.failed) {
    lines.push(printable(`failed: ${failure.socket}${failure.name ? ` (${failure.name})` : ""}: ${failure.error}`));
  }
  for (const reason of report.expectations.unmet) lines.push(`unmet: ${printable(reason)}`);
  const ignored = report.ok && report.failed.length > 0 ? " (failed sockets ignored: the expectations decide; --strict counts them)" : "";
  lines.push(`reconcile-once ${report.ok ? "ok" : "FAILED"}${ignored} in ${report.durationMs} ms`);
  return lines.join("\n") + "\n";
}

/**
 * The report of `run --reconcile-once`: the status JSON plus `schema`,
 * `startedAt`, `durationMs`, and the expectations the run was asked to meet.
 */
import type { StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { statusToJson, statusToText, type StatusJson } from "./status.ts";

export const REPORT_SCHEMA = 1;

export interface Expectations {
  /** At least this many registered plugins (`--expect N`). */
  expect: number;
  /** A registered plugin of each of these names (`--require NAME`). */
  require: string[];
}

export interface ReportJson extends StatusJson {
  schema: typeof REPORT_SCHEMA;
  startedAt: string;
  durationMs: number;
  expectations: Expectations & { unmet: string[] };
}

/** What is still missing for the expectations to hold; empty when they do. */
export function unmetExpectations(status: StatusResponse, expectations: Expectations): string[] {
  const registered = status.plugins.filter((p) => p.state === "registered");
  const unmet: string[] = [];
  if (registered.length < expectations.expect) {
    unmet.push(`expected at least ${expectations.expect} registered plugins, found ${registered.length}`);
  }
  for (const name of expectations.require) {
    if (!registered.some((p) => p.name === name)) unmet.push(`required plugin ${name} is not registered`);
  }
  return unmet;
}

export function buildReport(
  status: StatusResponse,
  expectations: Expectations,
  startedAt: Date,
  finishedAt: Date,
): ReportJson {
  const unmet = unmetExpectations(status, expectations);
  const json = statusToJson(status);
  return {
    schema: REPORT_SCHEMA,
    ...json,
    ok: json.ok && unmet.length === 0,
    startedAt: startedAt.toISOString(),
    durationMs: finishedAt.getTime() - startedAt.getTime(),
    expectations: { ...expectations, unmet },
  };
}

export function reportToText(report: ReportJson, status: StatusResponse): string {
  const lines = [statusToText({ ...status, ok: report.ok })];
  for (const reason of report.expectations.unmet) lines.push(`unmet: ${reason}`);
  lines.push(`reconcile-once ${report.ok ? "ok" : "FAILED"} in ${report.durationMs} ms`);
  return lines.join("\n") + "\n";
}

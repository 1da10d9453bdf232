/**
 * `run --reconcile-once`: one pass for provisioning scripts. Discover and
 * register every socket, wait until the verdict is known (or the timeout),
 * print the report, exit (docs/commands.md):
 *   0 the report is ok, 1 it is not, 3 the agent could not start.
 *
 * The wait ends as soon as the outcome can no longer change: when the run is
 * ok, or when every socket that is not registered was refused for a reason
 * retrying cannot fix (no handler, the policy, the socket's owner), so a
 * permanent refusal never waits out `--timeout`.
 */
import { csiDraDrivers, csiDraEndpointHolder, type CsiDraDrivers } from "../handlers/csi-dra.ts";
import { endpointRules } from "../handlers/endpoint-rules.ts";
import { handlerFactories } from "../handlers/factories.ts";
import { buildReport, hasExpectations, reportToText, REPORT_SCHEMA, type Expectations } from "../api/report.ts";
import { buildStatus } from "../api/status.ts";
import type { Logger } from "../log/logger.ts";
import { formatDuration } from "../policy/duration.ts";
import type { Policy } from "../policy/types.ts";
import { PluginManager } from "../pluginmanager/manager.ts";
import type { Failure, FailureReason } from "../pluginmanager/types.ts";
import { PluginStatusCache, type PluginRecord } from "../api/plugin-status.ts";
import { messageOf } from "../platform/error-message.ts";
import type { CommandIO } from "./command.ts";
import { EXIT_CANNOT_START, EXIT_FAILURE, EXIT_OK } from "./command.ts";
import { printable } from "../log/printable.ts";
import { checkpointStatus } from "../handlers/deviceplugin/device-status.ts";
import { devicesSettled, nextChange, startReconcileDevices, type ReconcileDevices } from "./reconcile-devices.ts";

export interface ReconcileSettings {
  timeoutMs: number;
  expectations: Expectations;
  output: "text" | "json";
}

export async function reconcileOnce(policy: Policy, io: CommandIO, settings: ReconcileSettings): Promise<number> {
  const startedAt = new Date();
  const { expectations } = settings;
  let deviceSide: ReconcileDevices;
  let manager: PluginManager | undefined;
  // Each side's endpoint rule asks the other, which is built after it.
  let csiDra: CsiDraDrivers | undefined;
  try {
    deviceSide = await startReconcileDevices(policy, io.log, () => manager?.slotsHeld ?? 0, (endpoint) => csiDra && csiDraEndpointHolder(csiDra, endpoint));
  } catch (error) {
    return cannotStart(error, io, settings.output);
  }
  const { devices } = deviceSide;
  const records = new PluginStatusCache({ log: io.log });
  const rules = endpointRules(policy);
  csiDra = csiDraDrivers({ endpointRules: () => rules, liveElsewhere: (endpoint) => devices.endpointHolder(endpoint) });
  const handlers = handlerFactories(devices, csiDra);
  manager = new PluginManager({ policy, log: io.log, handlers, observers: [records], slotsHeldElsewhere: deviceSide.slotsHeld });
  try {
    await manager.start();
  } catch (error) {
    await manager.stop().catch(() => {});
    await deviceSide.stop();
    return cannotStart(error, io, settings.output);
  }
  const signal = AbortSignal.any([AbortSignal.timeout(settings.timeoutMs), io.signal]);
  // Plugins first, then the device lists; a device plugin registering late starts the loop again.
  const everyResource = !hasExpectations(expectations) || expectations.strict;
  while (await records.whenSettled({ predicate: (plugins) => outcomeIsKnown(plugins, expectations), signal })) {
    if (devicesSettled(devices, everyResource && !records.plugins().some(isPermanentRefusal))) break;
    await nextChange([(listener) => records.subscribe(listener), (listener) => devices.subscribe(listener)], signal);
  }
  const unlisted = devices.awaitingFirstList();
  if (unlisted.length > 0) io.log.warn("device plugins sent no device list in time", { plugins: unlisted, timeout: formatDuration(settings.timeoutMs) });

  const unfinished: Failure = { reason: "timeout", error: `not registered within ${formatDuration(settings.timeoutMs)}` };
  const plugins = records.plugins().map((plugin) => finalState(plugin, unfinished));
  const watchLimits = manager.watchLimitsReached();
  const status = buildStatus({ node: policy.nodeName, plugins, resources: devices.resources(), allocations: devices.allocations(), watchLimits });
  await manager.stop();
  await devices.writeCheckpoint();
  await deviceSide.stop();
  status.checkpoint = checkpointStatus(policy.checkpoint.path, devices.checkpointState());
  const report = buildReport(status, expectations, startedAt, new Date());
  io.stdout(settings.output === "json" ? JSON.stringify(report, null, 2) + "\n" : reportToText(report, status));
  logOutcome(io.log, report.ok, report.expectations.unmet, plugins);
  return report.ok ? EXIT_OK : EXIT_FAILURE;
}

/** Exit 3, the reason on stderr, and for scripts (`--output json`) still one JSON object on stdout. */
function cannotStart(error: unknown, io: CommandIO, output: "text" | "json"): number {
  const reason = messageOf(error);
  io.stderr(printable(`edgeplug: cannot start: ${reason}`) + "\n");
  if (output === "json") io.stdout(JSON.stringify({ schema: REPORT_SCHEMA, ok: false, error: `cannot start: ${reason}` }, null, 2) + "\n");
  return EXIT_CANNOT_START;
}

const PERMANENT_FAILURES: ReadonlySet<FailureReason> = new Set([
  "socket_owner", "invalid_info", "no_handler", "handler_unavailable", "policy",
]);

/** Refused for a reason retrying cannot fix while the policy and the plugin stay as they are (no handler, policy, owner, invalid info). */
export function isPermanentRefusal(plugin: PluginRecord): boolean {
  return plugin.state === "failed" && plugin.reason !== null && PERMANENT_FAILURES.has(plugin.reason);
}

/**
 * Whether the verdict is known, so the run can end now. Either way each socket
 * must have had its first answer (none `pending`), so the report says what
 * became of it rather than "not registered within".
 * - ok: every socket counting, all registered; or the expectations met.
 * - certainly not ok: every socket counting, one was refused for good; or a
 *   required name was refused for good and no other socket may still turn
 *   out to carry it. A count (`--expect`) never fails early: sockets may
 *   still appear while a node boots.
 */
export function outcomeIsKnown(plugins: readonly PluginRecord[], expectations: Expectations): boolean {
  if (plugins.some((plugin) => plugin.state === "pending")) return false;
  const everySocketCounts = !hasExpectations(expectations) || expectations.strict;
  const registered = plugins.filter((plugin) => plugin.state === "registered");
  const expectMet = expectations.expect === null || registered.length >= expectations.expect;
  const unmetNames = expectations.require.filter((name) => !registered.some((plugin) => plugin.name === name));
  const expectationsMet = expectMet && unmetNames.length === 0;
  if (everySocketCounts) {
    return (expectationsMet && registered.length === plugins.length) || plugins.some(isPermanentRefusal);
  }
  const mayStillBe = (name: string) =>
    plugins.some((plugin) => plugin.state !== "registered" && !isPermanentRefusal(plugin) && (plugin.name === null || plugin.name === name));
  const refusedForGood = (name: string) =>
    plugins.some((plugin) => plugin.name === name && isPermanentRefusal(plugin)) && !mayStillBe(name);
  return expectationsMet || unmetNames.some(refusedForGood);
}

/** docs/status-json.md: at the end of --reconcile-once a plugin that never registered is `failed`. */
function finalState(plugin: PluginRecord, unfinished: Failure): PluginRecord {
  if (plugin.state === "registered" || plugin.state === "failed") return plugin;
  if (plugin.error !== null) return { ...plugin, state: "failed" };
  return { ...plugin, state: "failed", ...unfinished };
}

function logOutcome(log: Logger, ok: boolean, unmet: string[], plugins: PluginRecord[]): void {
  const registered = plugins.filter((plugin) => plugin.state === "registered").length;
  const fields = { registered, failed: plugins.length - registered, unmet };
  if (ok) log.info("reconcile-once done", fields);
  else log.warn("reconcile-once did not converge", fields);
}

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
import { buildReport, type DevicePluginsSeen, type Expectations, hasExpectations, REPORT_SCHEMA, reportToText } from "../api/report.ts";
import type { ResourceStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import { buildStatus } from "../api/status.ts";
import type { LogFormat, Logger } from "../log/logger.ts";
import { formatDuration } from "../policy/duration.ts";
import type { Policy } from "../policy/types.ts";
import type { Failure, FailureReason } from "../pluginmanager/types.ts";
import type { PluginRecord } from "../api/plugin-status.ts";
import { messageOf } from "../log/error-message.ts";
import type { CommandIO } from "./command.ts";
import { EXIT_CANNOT_START, EXIT_FAILURE, EXIT_OK, reportCannotStart } from "./command.ts";
import { checkpointStatus } from "../devicemanager/device-status.ts";
import type { EdgeplugAgent } from "../agent/agent.ts";
import { devicesSettled, nextChange, registrationSocketPlugins, startOnceAgent } from "../agent/once.ts";

/**
 * How long a run that waits for every socket gives device plugins, after
 * kubelet.sock starts serving, to register on it: a plugin that watches for
 * kubelet.sock (as every device plugin does, to re-register after a kubelet
 * restart) needs a moment to see it; without this a run could say ok before
 * one had a chance. Within `--timeout`, never beyond it.
 */
export const REGISTRATION_SETTLE_MS = 1000;

export interface ReconcileSettings {
  timeoutMs: number;
  expectations: Expectations;
  output: "text" | "json";
}

export async function reconcileOnce(policy: Policy, io: CommandIO, settings: ReconcileSettings): Promise<number> {
  const startedAt = new Date();
  const { expectations } = settings;
  let agent: EdgeplugAgent;
  try {
    agent = await startOnceAgent(policy, io.log);
  } catch (error) {
    return cannotStart(error, io, settings.output, policy.log.format);
  }
  const { devices, manager, pluginStatus: records } = agent;
  const kubeletSock = agent.onceRegistration;
  const liveAtStart = kubeletSock?.liveAtStart ?? [];
  const signal = AbortSignal.any([AbortSignal.timeout(settings.timeoutMs), io.signal]);
  const everySocket = !hasExpectations(expectations) || expectations.strict;
  const seen = new Set<string>();
  const settleUntil = kubeletSock === null ? 0 : kubeletSock.servedSince + REGISTRATION_SETTLE_MS;
  const verdictKnown = (): boolean => {
    const resources = devices.resources();
    for (const resource of resources) if (resource.connected) seen.add(resource.name);
    const plugins = records.plugins();
    const kubeletPlugins = registrationSocketPlugins(devices);
    if (!outcomeIsKnown(plugins, expectations, { kubeletPlugins: kubeletPlugins.map((plugin) => plugin.resource), resources })) return false;
    const refusedForGood = everySocket && plugins.some(isPermanentRefusal);
    if (!devicesSettled(devices, everySocket && !refusedForGood)) return false;
    if (!everySocket || refusedForGood) return true;
    return silentSockets(liveAtStart, kubeletPlugins).length === 0 && performance.now() >= settleUntil;
  };
  // Woken by any change of the plugin records or the device side, and once the settle is over.
  while (!signal.aborted && !verdictKnown()) {
    const settling = everySocket ? settleUntil - performance.now() : 0;
    await nextChange(
      [(listener) => records.subscribe(listener), (listener) => devices.subscribe(listener), ...(settling > 0 ? [timerSource(settling)] : [])],
      signal,
    );
  }
  const unlisted = devices.awaitingFirstList();
  if (unlisted.length > 0) io.log.warn("device plugins sent no device list in time", { plugins: unlisted, timeout: formatDuration(settings.timeoutMs) });

  const unfinished: Failure = { reason: "timeout", error: `not registered within ${formatDuration(settings.timeoutMs)}` };
  const plugins = records.plugins().map((plugin) => finalState(plugin, unfinished));
  const watchLimits = manager.watchLimitsReached();
  const resources = devices.resources();
  for (const resource of resources) if (resource.connected) seen.add(resource.name);
  const registered = registrationSocketPlugins(devices);
  const devicePlugins: DevicePluginsSeen = {
    registered,
    silent: silentSockets(liveAtStart, registered),
    seen,
    registrationSocket: kubeletSock?.socket ?? null,
    registrationSocketHeldBy: agent.onceRegistrationHolder,
    timeoutMs: settings.timeoutMs,
  };
  const status = buildStatus({ node: policy.nodeName, plugins, resources, allocations: devices.allocations(), watchLimits });
  // Discovery ends before the last write, so that the checkpoint holds the state the report tells.
  await manager.stop();
  await devices.writeCheckpoint();
  await agent.stop();
  status.checkpoint = checkpointStatus(policy.checkpoint.path, devices.checkpointState());
  const report = buildReport(status, expectations, startedAt, new Date(), devicePlugins);
  io.stdout(settings.output === "json" ? JSON.stringify(report, null, 2) + "\n" : reportToText(report, status));
  logOutcome(io.log, report.ok, report.expectations.unmet, plugins);
  return report.ok ? EXIT_OK : EXIT_FAILURE;
}

/** Exit 3, the reason on stderr, and for scripts (`--output json`) still one JSON object on stdout. */
function cannotStart(error: unknown, io: CommandIO, output: "text" | "json", format: LogFormat): number {
  const reason = messageOf(error);
  reportCannotStart(io, format, reason);
  if (output === "json") io.stdout(JSON.stringify({ schema: REPORT_SCHEMA, ok: false, error: `cannot start: ${reason}` }, null, 2) + "\n");
  return EXIT_CANNOT_START;
}

const PERMANENT_FAILURES: ReadonlySet<FailureReason> = new Set([
  "socket_owner",
  "invalid_info",
  "no_handler",
  "handler_unavailable",
  "policy",
]);

/** Refused for a reason retrying cannot fix while the policy and the plugin stay as they are (no handler, policy, owner, invalid info). */
export function isPermanentRefusal(plugin: PluginRecord): boolean {
  return plugin.state === "failed" && plugin.reason !== null && PERMANENT_FAILURES.has(plugin.reason);
}

/** What the device side adds to the plugin records: device plugins on kubelet.sock (by resource) and every resource now. */
export interface DeviceView {
  kubeletPlugins: readonly string[];
  resources: readonly ResourceStatus[];
}

const NO_DEVICES: DeviceView = { kubeletPlugins: [], resources: [] };

/**
 * Whether the verdict is known, so the run can end now. Either way each socket
 * must have had its first answer (none `pending`), so the report says what
 * became of it rather than "not registered within".
 * - ok: every socket counting, all registered; or the expectations met
 *   (device plugins on kubelet.sock count as plugins named by their
 *   resource; `--expect-resource` wants its resource connected with enough
 *   healthy devices).
 * - certainly not ok: every socket counting, one was refused for good; or a
 *   required name was refused for good and no other socket may still turn
 *   out to carry it. A count (`--expect`, `--expect-resource`) never fails
 *   early: sockets may still appear while a node boots.
 */
export function outcomeIsKnown(plugins: readonly PluginRecord[], expectations: Expectations, devices: DeviceView = NO_DEVICES): boolean {
  if (plugins.some((plugin) => plugin.state === "pending")) return false;
  const everySocketCounts = !hasExpectations(expectations) || expectations.strict;
  const registered = plugins.filter((plugin) => plugin.state === "registered");
  const isRegistered = (name: string) => registered.some((plugin) => plugin.name === name) || devices.kubeletPlugins.includes(name);
  const expectMet = expectations.expect === null || registered.length + devices.kubeletPlugins.length >= expectations.expect;
  const unmetNames = expectations.require.filter((name) => !isRegistered(name));
  const resourcesMet = Object.entries(expectations.resources).every(([name, count]) => {
    const resource = devices.resources.find((candidate) => candidate.name === name);
    return resource !== undefined && resource.connected && resource.healthy.length >= count;
  });
  const expectationsMet = expectMet && unmetNames.length === 0 && resourcesMet;
  if (everySocketCounts) {
    return (expectationsMet && registered.length === plugins.length) || plugins.some(isPermanentRefusal);
  }
  const mayStillBe = (name: string) => plugins.some((plugin) => plugin.state !== "registered" && !isPermanentRefusal(plugin) && (plugin.name === null || plugin.name === name));
  const refusedForGood = (name: string) => plugins.some((plugin) => plugin.name === name && isPermanentRefusal(plugin)) && !mayStillBe(name);
  return expectationsMet || unmetNames.some(refusedForGood);
}

/**
 * The sockets found accepting connections at the start whose plugin has not
 * registered on kubelet.sock: none once as many plugins have registered (a
 * plugin may come back on a socket of another name).
 */
export function silentSockets(liveAtStart: readonly string[], registered: readonly { socket: string }[]): string[] {
  if (registered.length >= liveAtStart.length) return [];
  return liveAtStart.filter((socket) => !registered.some((plugin) => plugin.socket === socket));
}

/** A wake-up source for nextChange: once, after `ms`. */
function timerSource(ms: number): (listener: () => void) => () => void {
  return (listener) => {
    const timer = setTimeout(listener, ms);
    return () => clearTimeout(timer);
  };
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

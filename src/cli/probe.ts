/**
 * `edgeplug probe SOCKET`: for plugin authors. Dials one registration socket,
 * calls GetInfo, and says which handler of the policy would take the plugin
 * and why it would be refused. Sends no NotifyRegistrationStatus.
 */
import fs from "node:fs";
import path from "node:path";
import { printable } from "../log/printable.ts";
import { resolvePolicy } from "../policy/load.ts";
import type { Policy } from "../policy/types.ts";
import { decisionOnlyFactories } from "../handlers/handler-kinds.ts";
import { decideHandler, HandlerSet } from "../pluginmanager/handler-set.ts";
import { checkSocketFile } from "../pluginmanager/registration.ts";
import { pluginInfoProblem, type PluginInfoSummary, RegistrationConnection } from "../pluginmanager/registration-client.ts";
import { classifyRpcError, type RpcFailure } from "../rpc/rpc-error.ts";
import { messageOf } from "../log/error-message.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";
import { installLightHeaders } from "./light-headers.ts";

const usage = `Usage: edgeplug probe SOCKET [--config PATH] [--output text|json]

Dials one registration socket, calls GetInfo, prints the PluginInfo and which
handler of the policy would take it. Sends no NotifyRegistrationStatus and
changes nothing.

Options:
  --config PATH        the policy whose handlers and rules apply (default: as for run)
  --output text|json   text for people (default) or JSON
${COMMON_OPTIONS_HELP}

The socket is not dialled when the policy's security.socketOwners excludes its
owner (as the agent would not dial it); the output says when the socket lies
outside every watched directory, where the agent would never find it.

Exit codes: 0 the plugin answered, 1 it did not (or was not dialled), 2 bad usage or policy.
`;

export const probeCommand: Command = {
  name: "probe",
  summary: "ask one plugin socket who it is and which handler would take it",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs(
      "probe",
      args,
      { config: { type: "string" }, output: { type: "string" } },
      { positionals: true },
    );
    if (parsed.positionals.length !== 1) {
      throw new UsageError("edgeplug probe: expected exactly one SOCKET argument");
    }
    const output = outputFlag("probe", parsed.values.output);
    const policy = await resolvePolicy(parsed.values.config);
    const socket = path.resolve(parsed.positionals[0]!);
    const watchDir = watchDirFor(policy, socket);
    const ownerRefusal = foreignOwner(socket, policy);
    // Connect's metadata without undici's start-up cost (light-headers.ts); the gRPC dial itself needs http2.
    installLightHeaders();
    const result: ProbeResult = ownerRefusal
      ? { socket, info: null, failure: null, error: null, handler: null, refusal: ownerRefusal }
      : await probePlugin(socket, policy, new HandlerSet(policy, decisionOnlyFactories(), { connectionLost() {} }));
    const report = probeReport(result, policy, watchDir, ownerRefusal !== null);
    io.stdout(output === "json" ? JSON.stringify(report, null, 2) + "\n" : probeToText(report));
    return report.answered ? EXIT_OK : EXIT_FAILURE;
  },
};

/** The result of {@link probePlugin}. */
export interface ProbeResult {
  socket: string;
  /** GetInfo's answer; null when it did not answer. */
  info: PluginInfoSummary | null;
  /** How the call failed (`missing`, `stale`, `deadline`, `not-grpc`, `status`...); null when it answered. */
  failure: RpcFailure | "not-a-socket" | null;
  error: string | null;
  /** The plugin type whose handler would take it; null when none would. */
  handler: string | null;
  /** Why registration would refuse it (owner, type, dir, name, versions); null when it would be accepted. */
  refusal: string | null;
}

/**
 * Dials one registration socket, calls GetInfo and says which handler of the
 * policy would take it. Sends no NotifyRegistrationStatus and changes no state.
 */
export async function probePlugin(socket: string, policy: Policy, handlers: HandlerSet): Promise<ProbeResult> {
  const result: ProbeResult = { socket, info: null, failure: null, error: null, handler: null, refusal: null };
  if (fs.lstatSync(socket, { throwIfNoEntry: false })?.isSocket() === false) {
    return { ...result, failure: "not-a-socket", error: `${socket} is not a unix socket` };
  }
  const connection = new RegistrationConnection(socket, policy.reconcile.timeouts.dialMs);
  try {
    result.info = await connection.getInfo(policy.reconcile.timeouts.getInfoMs);
  } catch (error) {
    return { ...result, failure: classifyRpcError(error), error: messageOf(error) };
  } finally {
    connection.close();
  }
  const decision = decideHandler(policy, handlers, socket, result.info);
  if ("entry" in decision) result.handler = decision.entry.type;
  result.refusal = pluginInfoProblem(result.info) ?? (checkSocketFile(socket, policy) ?? ("refusal" in decision ? decision.refusal : null))?.error ?? null;
  return result;
}

type ProbeReport = ReturnType<typeof probeReport>;

/**
 * What probe found. `handler` is the policy's handler for the advertised
 * type, also when that handler refuses the plugin (versions, names); null
 * only when the policy declares no handler for the type.
 */
function probeReport(result: ProbeResult, policy: Policy, watchDir: string | null, ownerRefused: boolean) {
  const handler = result.info && policy.handlers.has(result.info.type) ? result.info.type : null;
  return {
    socket: result.socket,
    dialled: !ownerRefused,
    answered: result.info !== null,
    info: result.info,
    failure: result.failure,
    error: result.error,
    handler,
    accepted: result.info !== null && result.refusal === null,
    refusal: result.refusal,
    /** The watched directory the agent would discover the socket in; null: outside every one. */
    watchDir,
  };
}

/** Why the policy forbids dialling this socket (its owner), or null; the agent never dials such a socket, nor does probe. */
function foreignOwner(socket: string, policy: Policy): string | null {
  let uid: number;
  try {
    const stat = fs.lstatSync(socket);
    if (!stat.isSocket()) return null; // probePlugin says what it is instead
    uid = stat.uid;
  } catch {
    return null; // missing: probePlugin reports it as the agent would
  }
  const owners = policy.security.socketOwners;
  if (owners.includes(uid)) return null;
  return `socket owned by uid ${uid}, not in security.socketOwners ${JSON.stringify(owners)}; not dialled`;
}

/** The watched directory under which the agent would find `socket`, or null when it lies outside every one. */
function watchDirFor(policy: Policy, socket: string): string | null {
  for (const dir of policy.watch) {
    const relative = path.relative(dir.path, socket);
    if (relative === "" || relative.startsWith("..") || path.isAbsolute(relative)) continue;
    if (dir.recursive || !relative.includes(path.sep)) return dir.path;
  }
  return null;
}

function probeToText(report: ProbeReport): string {
  const rows: [string, string][] = [["socket", report.socket]];
  if (!report.dialled) {
    rows.push(["answered", "not dialled"], ["verdict", `would be refused: ${report.refusal}`]);
  } else if (!report.info) {
    rows.push(["answered", `no (${report.failure})`], ["error", report.error ?? "-"]);
  } else {
    const { info } = report;
    rows.push(
      ["type", info.type],
      ["name", info.name],
      ["endpoint", info.endpoint],
      ["versions", info.versions.join(", ") || "-"],
      ["handler", report.handler ?? `none (the policy declares no handler for type ${info.type})`],
      ["verdict", report.refusal === null ? "would be registered" : `would be refused: ${report.refusal}`],
    );
  }
  rows.push(["watched", report.watchDir ?? "no: outside every watched directory, the agent would not discover it"]);
  return rows.map(([key, value]) => `${(key + ":").padEnd(10)} ${printable(value)}`).join("\n") + "\n";
}

/**
 * `edgeplug probe SOCKET`: for plugin authors. Dials one registration socket,
 * calls GetInfo, and says which handler of the policy would take the plugin
 * and why it would be refused. Sends no NotifyRegistrationStatus.
 */
import { resolvePolicy } from "../policy/load.ts";
import { handlerFactories } from "../agent.ts";
import { HandlerSet } from "../pluginmanager/handler-set.ts";
import { probePlugin, type ProbeResult } from "../pluginmanager/registration.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug probe SOCKET [--config PATH] [--output text|json]

Dials one registration socket, calls GetInfo, prints the PluginInfo and which
handler of the policy would take it. Sends no NotifyRegistrationStatus and
changes nothing.

Options:
  --config PATH        the policy whose handlers and rules apply (default: as for run)
  --output text|json   text for people (default) or JSON
${COMMON_OPTIONS_HELP}

Exit codes: 0 the plugin answered, 1 it did not, 2 bad usage or policy.
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
    const result = await probePlugin(parsed.positionals[0]!, policy, new HandlerSet(policy, handlerFactories(), { connectionLost() {} }));
    io.stdout(output === "json" ? JSON.stringify(probeToJson(result), null, 2) + "\n" : probeToText(result));
    return result.info ? EXIT_OK : EXIT_FAILURE;
  },
};

function probeToJson(result: ProbeResult) {
  return {
    socket: result.socket,
    answered: result.info !== null,
    info: result.info,
    failure: result.failure,
    error: result.error,
    handler: result.handler,
    accepted: result.info !== null && result.refusal === null,
    refusal: result.refusal,
  };
}

function probeToText(result: ProbeResult): string {
  const rows: [string, string][] = [["socket", result.socket]];
  if (!result.info) {
    rows.push(["answered", `no (${result.failure})`], ["error", result.error ?? "-"]);
  } else {
    const { info } = result;
    rows.push(
      ["type", info.type],
      ["name", info.name],
      ["endpoint", info.endpoint],
      ["versions", info.versions.join(", ") || "-"],
      ["handler", result.handler ?? "none"],
      ["verdict", result.refusal === null ? "would be registered" : `would be refused: ${result.refusal}`],
    );
  }
  return rows.map(([key, value]) => `${(key + ":").padEnd(10)} ${value}`).join("\n") + "\n";
}

/**
 * `edgeplug release --owner ID`: asks the running agent to free every
 * device the owner holds, and prints what was freed. Releasing an owner
 * that holds nothing is not an error (a script that releases twice, or
 * after a restart, gets exit 0 and is told so).
 */
import { toJson } from "@bufbuild/protobuf";
import type { ReleaseResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { ReleaseResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { printable } from "../log/printable.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import { AGENT_CALL_OPTIONS, callAgent, ownerFlag } from "./agent-call.ts";
import type { Command } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug release --owner ID [--config PATH | --api SOCKET] [--output text|json] [--timeout DUR]

Asks the running agent to free every device allocated to the owner, in every
container and resource, and prints what was freed. An owner that holds
nothing is not an error.

Options:
  --owner ID           whose devices to free (at most 253 characters)
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket (overrides --config)
  --output text|json   text for people (default) or the API's JSON
  --timeout DUR        how long to wait for the agent (default 2m)
${COMMON_OPTIONS_HELP}

Exit codes: 0 released (or nothing held), 1 refused (the reason on stderr) or agent unreachable, 2 bad usage.
`;

export const releaseCommand: Command = {
  name: "release",
  summary: "free the devices of an owner",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("release", args, AGENT_CALL_OPTIONS);
    const output = outputFlag("release", parsed.values.output);
    const owner = ownerFlag("release", parsed.values.owner);
    return callAgent(io, { ...parsed.values, command: "release", what: "the release" }, async (client, timeoutMs) => {
      const answer = await client.release({ owner }, { timeoutMs, signal: io.signal });
      io.stdout(output === "json" ? JSON.stringify(toJson(ReleaseResponseSchema, answer, { alwaysEmitImplicit: true }), null, 2) + "\n" : releaseText(owner, answer));
    });
  },
};

/** One line per freed allocation, or a line saying the owner held nothing. */
export function releaseText(owner: string, answer: ReleaseResponse): string {
  if (answer.released.length === 0) return printable(`${owner} held no devices; nothing released`) + "\n";
  return (
    answer.released
      .map((a) => printable(`released ${a.owner} container ${a.container}: ${a.resource} ${a.devices.join(", ")}`))
      .join("\n") + "\n"
  );
}

/**
 * `edgeplug policy show [--config PATH] [--output yaml|json]`: the effective
 * policy, every default filled in (like dumping the kubelet's configuration).
 * Without --config it shows the policy the agent would use: /etc/edgeplug/policy.yaml
 * when it exists, else the embedded default. The YAML it prints is itself a
 * valid policy that loads to the same effective policy.
 */
import { stringify } from "yaml";
import { policyToData } from "../policy/effective.ts";
import { resolvePolicy } from "../policy/load.ts";
import { parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug policy show [--config PATH] [--output yaml|json]

Prints the effective policy: every key, defaults filled in, durations as Go
durations, the node name and socket owners as computed on this machine.
Without --config: /etc/edgeplug/policy.yaml if it exists, else the embedded default policy.
An invalid policy prints its located errors on stderr, as validate does.

Options:
  --config PATH        the policy file to show
  --output FORMAT      yaml (default) or json
${COMMON_OPTIONS_HELP}

Exit codes: 0 shown, 2 invalid policy or bad usage.
`;

export const policyCommand: Command = {
  name: "policy",
  summary: "policy show: print the effective policy with every default",
  usage,
  async run(args, io) {
    const [subcommand, ...rest] = args;
    if (subcommand !== "show") {
      const got = subcommand === undefined ? "nothing" : JSON.stringify(subcommand);
      throw new UsageError(`edgeplug policy: expected the subcommand show, got ${got}`);
    }
    const parsed = parseCommandArgs("policy show", rest, { config: { type: "string" }, output: { type: "string" } });
    const output = parsed.values.output ?? "yaml";
    if (output !== "yaml" && output !== "json") {
      throw new UsageError(`edgeplug policy show: --output: expected yaml or json, got ${JSON.stringify(output)}`);
    }
    // A PolicyError goes to main, which prints every located error and exits 2.
    const policy = await resolvePolicy(parsed.values.config);
    const data = policyToData(policy);
    io.stdout(
      output === "json" ? JSON.stringify(data, null, 2) + "\n" : `# edgeplug effective policy from ${policy.source}, every default filled in\n${stringify(data, { lineWidth: 0 })}`,
    );
    return EXIT_OK;
  },
};

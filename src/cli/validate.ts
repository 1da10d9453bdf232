/**
 * `edgeplug validate [--config PATH]`: parses and checks a policy without
 * starting anything. Prints `ok` on stdout, or every located error on stderr.
 * Without --config it checks the policy the agent would use (docs/policy.md,
 * "Which policy is used"): /etc/edgeplug/policy.yaml when it exists, else the embedded one.
 */
import { PolicyError } from "../policy/errors.ts";
import { resolvePolicy } from "../policy/load.ts";
import type { Policy } from "../policy/types.ts";
import { printable } from "../log/printable.ts";
import { parseCommandArgs } from "./args.ts";
import { hostProblems } from "./validate-host.ts";
import type { Command } from "./command.ts";
import { EXIT_OK, EXIT_USAGE } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug validate [--config PATH] [--offline]

Parses and checks a policy; prints "ok" on stdout, or every error on stderr as
FILE:LINE:COLUMN: key.path: what was expected, what was found.
Then checks what would stop "run" on this host: the api.socketGroup group exists,
each directory the agent uses exists or can be created, socket paths fit.
Without --config: /etc/edgeplug/policy.yaml if it exists, else the embedded default policy.

Options:
  --config PATH        the policy file to check
  --offline            check the policy only, not this host (away from the node)
${COMMON_OPTIONS_HELP}

Exit codes: 0 valid, 2 invalid or bad usage.
`;

export const validateCommand: Command = {
  name: "validate",
  summary: "check a policy file without starting anything",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("validate", args, { config: { type: "string" }, offline: { type: "boolean" } });
    let policy: Policy;
    try {
      policy = await resolvePolicy(parsed.values.config);
      io.log.debug("policy is valid", { source: policy.source });
    } catch (error) {
      if (!(error instanceof PolicyError)) throw error;
      io.stderr(error.message + "\n");
      return EXIT_USAGE;
    }
    if (parsed.values.offline !== true) {
      const problems = hostProblems(policy);
      if (problems.length > 0) {
        io.stderr(problems.map((problem) => printable(`${policy.source}: on this host: ${problem}`)).join("\n") + "\n");
        return EXIT_USAGE;
      }
    }
    io.stdout("ok\n");
    return EXIT_OK;
  },
};

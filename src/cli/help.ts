/**
 * The top-level usage (`edgeplug --help`) and the `help [COMMAND]` command.
 * Each command carries its own full usage; this file only lists them.
 */
import type { Command } from "./command.ts";
import { EXIT_OK, UsageError } from "./command.ts";

/** The lines every command's usage ends its options with, so they read the same everywhere. */
export const COMMON_OPTIONS_HELP = `  --log-level LEVEL    debug, info, warn or error; overrides the policy's log.level
  -h, --help           this help`;

/** `edgeplug --help`: how to call edgeplug and one line per command. */
export function topLevelUsage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((command) => command.name.length));
  const list = commands.map((command) => `  ${command.name.padEnd(width)}  ${command.summary}`).join("\n");
  return `Usage: edgeplug [COMMAND] [OPTIONS]

edgeplug is the kubelet's plugin manager and device manager as one executable.
Without a command (or when the first argument is an option) it runs the agent.

Commands:
${list}

Every command takes --log-level debug|info|warn|error (overrides the policy's)
and --help. Without --config the policy is /etc/edgeplug/policy.yaml when it
exists, otherwise the embedded default policy.

Run 'edgeplug COMMAND --help' for a command's options.
`;
}

/** `edgeplug help [COMMAND]`: the same text as `--help`, for people who type it the other way round. */
export function createHelpCommand(commands: () => Promise<readonly Command[]>): Command {
  const usage = `Usage: edgeplug help [COMMAND]

Prints the list of commands, or the usage of COMMAND.

Options:
${COMMON_OPTIONS_HELP}
`;
  return {
    name: "help",
    summary: "print the usage of edgeplug or of one command",
    usage,
    async run(args, io) {
      const [name, ...extra] = args;
      if (extra.length > 0) throw new UsageError(`edgeplug help: unexpected argument ${JSON.stringify(extra[0])}`);
      if (name === undefined) {
        io.stdout(topLevelUsage(await commands()));
        return EXIT_OK;
      }
      const command = (await commands()).find((candidate) => candidate.name === name);
      if (!command) throw new UsageError(`edgeplug help: unknown command ${JSON.stringify(name)}`);
      io.stdout(command.usage);
      return EXIT_OK;
    },
  };
}

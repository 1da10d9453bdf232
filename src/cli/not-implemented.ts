/**
 * Placeholders for the commands whose implementation has not landed yet.
 * Each has SPEC.md section 1's usage, so `--help` already documents it, and
 * answers "not implemented yet" with exit 2. To land a command, write
 * src/cli/<name>.ts exporting a Command and point the command's line in
 * cli.ts's COMMANDS table at it.
 */
import type { Command } from "./command.ts";
import { EXIT_USAGE } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

function notImplemented(name: string, summary: string, usage: string): Command {
  return {
    name,
    summary,
    usage,
    async run(_args, io) {
      io.stderr(`edgeplug ${name}: not implemented yet\n`);
      return EXIT_USAGE;
    },
  };
}

export const allocateCommand: Command = notImplemented(
  "allocate",
  "ask the running agent to allocate devices to an owner",
  `Usage: edgeplug allocate --owner ID [--container NAME] RESOURCE=COUNT...

Asks the running agent to allocate devices and prints the allocation.

Options:
  --owner ID           who the devices are for (a pod UID in the checkpoint)
  --container NAME     container name (default main)
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket
${COMMON_OPTIONS_HELP}

Exit codes: 0 allocated, 1 refused (reason printed), 2 bad usage.
`,
);

export const releaseCommand: Command = notImplemented(
  "release",
  "free the devices of an owner",
  `Usage: edgeplug release --owner ID

Asks the running agent to free every device allocated to the owner.

Options:
  --owner ID           whose devices to free
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket
${COMMON_OPTIONS_HELP}

Exit codes: 0 released, 1 failed, 2 bad usage.
`,
);

export const checkpointCommand: Command = notImplemented(
  "checkpoint",
  "verify a device-manager checkpoint file (checkpoint verify PATH)",
  `Usage: edgeplug checkpoint verify PATH

Reads a kubelet_internal_checkpoint file, verifies its checksum and prints its content.

Options:
${COMMON_OPTIONS_HELP}

Exit codes: 0 valid, 1 corrupt or missing, 2 bad usage.
`,
);

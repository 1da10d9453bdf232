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

export const runCommand: Command = notImplemented(
  "run",
  "run the agent (the default command)",
  `Usage: edgeplug [run] [--config PATH]
       edgeplug [run] --config PATH --reconcile-once [--timeout DUR] [--expect N]
                [--require NAME]... [--output text|json]

Runs the agent until SIGTERM/SIGINT, or with --reconcile-once makes one pass:
registers every socket under the watched directories, writes the checkpoint,
prints a report and exits.

Options:
  --config PATH        the policy (default: /etc/edgeplug/policy.yaml if it exists, else the embedded default)
  --reconcile-once     one pass, then a report; never binds api.socket or api.metrics
  --timeout DUR        how long --reconcile-once retries (Go duration, default 10s)
  --expect N           --reconcile-once waits for at least N registered plugins
  --require NAME       --reconcile-once waits for a registered plugin of that name (repeatable)
  --output text|json   report format (default text)
${COMMON_OPTIONS_HELP}

Exit codes: 0 clean stop or report ok, 1 could not start or report not ok, 2 bad usage or policy.
`,
);

export const probeCommand: Command = notImplemented(
  "probe",
  "dial one registration socket and show its PluginInfo (for plugin authors)",
  `Usage: edgeplug probe SOCKET [--config PATH] [--output text|json]

Dials one registration socket, calls GetInfo, prints the PluginInfo and which
handler of the policy would take it. Sends no NotifyRegistrationStatus.

Options:
  --config PATH        the policy whose handlers are consulted
  --output text|json   output format (default text)
${COMMON_OPTIONS_HELP}

Exit codes: 0 the plugin answered, 1 it did not, 2 bad usage.
`,
);

export const statusCommand: Command = notImplemented(
  "status",
  "show the running agent's plugins, resources and allocations",
  `Usage: edgeplug status [--config PATH | --api SOCKET] [--output text|json] [--watch]

Asks the running agent over its API socket; --watch then prints each event.

Options:
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket
  --output text|json   output format (default text)
  --watch              keep printing events as they come
${COMMON_OPTIONS_HELP}

Exit codes: 0 answered, 1 agent unreachable, 2 bad usage.
`,
);

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

/**
 * `edgeplug checkpoint verify PATH`: reads a device-manager checkpoint
 * (written by edgeplug or by a kubelet), verifies it as the kubelet does and
 * prints what it holds. Changes nothing: a corrupt file stays where it is.
 */
import { fromBinary, type JsonValue, toJson } from "@bufbuild/protobuf";
import { ContainerAllocateResponseSchema } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { CheckpointCorruptError, decodeCheckpointWithChecksum, readCheckpointBytes } from "../devicemanager/checkpoint/checkpoint.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug checkpoint verify PATH [--output text|json]

Reads a kubelet_internal_checkpoint file (edgeplug's or a kubelet's), verifies
its checksum as the kubelet does and prints its content: the healthy devices
registered per resource and each allocation with the plugin's Allocate
response. Nothing is changed, not even a corrupt file.

Options:
  --output text|json   text for people (default) or JSON
${COMMON_OPTIONS_HELP}

Exit codes: 0 valid, 1 corrupt, missing or unreadable (reason on stderr), 2 bad usage.
`;

export const checkpointCommand: Command = {
  name: "checkpoint",
  summary: "verify a device-manager checkpoint file (checkpoint verify PATH)",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("checkpoint", args, { output: { type: "string" } }, { positionals: true });
    const [action, file, ...extra] = parsed.positionals;
    if (action !== "verify") {
      throw new UsageError(
        action === undefined ? "edgeplug checkpoint: expected an action: verify PATH" : `edgeplug checkpoint: unknown action ${JSON.stringify(action)}; expected verify PATH`,
      );
    }
    if (file === undefined || extra.length > 0) throw new UsageError("edgeplug checkpoint verify: expected exactly one PATH");
    const output = outputFlag("checkpoint", parsed.values.output);

    let verdict: Verdict;
    try {
      verdict = decodeCheckpointWithChecksum(await readCheckpointBytes(file));
    } catch (error) {
      const reason = describeFailure(error);
      if (output === "json") io.stdout(JSON.stringify({ path: file, valid: false, error: reason }, null, 2) + "\n");
      io.stderr(`edgeplug checkpoint verify: ${file}: ${reason}\n`);
      return EXIT_FAILURE;
    }
    io.stdout(output === "json" ? JSON.stringify(toReport(file, verdict), null, 2) + "\n" : toText(file, verdict));
    return EXIT_OK;
  },
};

function describeFailure(error: unknown): string {
  if (error instanceof CheckpointCorruptError) return `corrupt: ${error.message}`;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === "ENOENT") return "missing: no such file";
  return `unreadable: ${(error as Error).message}`;
}

interface AllocationReport {
  podUID: string;
  containerName: string;
  resourceName: string;
  /** NUMA node ("-1": no topology) -> device ids */
  deviceIDs: Record<string, string[]>;
  /** The plugin's ContainerAllocateResponse as proto3 JSON; null when the bytes do not decode (the kubelet skips such entries). */
  allocResp: JsonValue | null;
  allocRespError: string | null;
}

type Verdict = ReturnType<typeof decodeCheckpointWithChecksum>;

function toReport(path: string, { data, checksum, layout }: Verdict) {
  const allocations: AllocationReport[] = data.podDeviceEntries.map((entry) => {
    const decoded = decodeAllocResp(entry.allocResp);
    return {
      podUID: entry.podUID,
      containerName: entry.containerName,
      resourceName: entry.resourceName,
      deviceIDs: Object.fromEntries([...entry.deviceIDs].map(([node, ids]) => [String(node), ids])),
      allocResp: decoded.json,
      allocRespError: decoded.error,
    };
  });
  return {
    path,
    valid: true,
    checksum,
    /** "1.20" (a kubelet since 1.20, or edgeplug), or "1.19": a kubelet up to 1.19's, its devices shown on NUMA node 0 as newer kubelets read them. */
    layout,
    registeredDevices: Object.fromEntries(data.registeredDevices),
    podDeviceEntries: allocations,
  };
}

function decodeAllocResp(bytes: Uint8Array): { json: JsonValue | null; error: string | null } {
  try {
    return { json: toJson(ContainerAllocateResponseSchema, fromBinary(ContainerAllocateResponseSchema, bytes)), error: null };
  } catch (error) {
    return { json: null, error: `not a ContainerAllocateResponse: ${(error as Error).message}` };
  }
}

function toText(path: string, verdict: Verdict): string {
  const report = toReport(path, verdict);
  const layout = report.layout === "1.19" ? ", written by a kubelet up to 1.19: devices without NUMA nodes, read as on node 0 as newer kubelets do" : "";
  const lines = [`${shown(path)}: valid (checksum ${report.checksum}${layout})`];
  const resources = Object.entries(report.registeredDevices);
  lines.push(`registered devices (healthy, per resource): ${resources.length === 0 ? "none" : ""}`.trimEnd());
  for (const [resource, ids] of resources) {
    lines.push(`  ${shown(resource)} (${ids.length}): ${ids.map(shown).join(" ")}`.trimEnd());
  }
  lines.push(`allocations: ${report.podDeviceEntries.length === 0 ? "none" : ""}`.trimEnd());
  for (const entry of report.podDeviceEntries) {
    const devices = Object.entries(entry.deviceIDs)
      .map(([node, ids]) => `${ids.map(shown).join(" ")} (NUMA ${node === "-1" ? "none" : node})`)
      .join(", ");
    lines.push(`  owner ${shown(entry.podUID)} container ${shown(entry.containerName)} ${shown(entry.resourceName)}: ${devices || "no devices"}`);
    lines.push(
      entry.allocResp === null ? `    allocate response: ${entry.allocRespError}` : `    allocate response: ${JSON.stringify(entry.allocResp)}`,
    );
  }
  return lines.join("\n") + "\n";
}

/** Checkpoint contents are untrusted: anything but plain printable text is shown quoted, escapes included. */
function shown(text: string): string {
  return /^[\x21-\x7e]+$/.test(text) ? text : JSON.stringify(text);
}

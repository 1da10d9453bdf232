/**
 * `edgeplug allocate --owner ID [--container NAME] RESOURCE=COUNT...`: asks
 * the running agent for devices, as the kubelet allocates them at pod
 * admission, and prints what the device plugins answered (for people, or
 * the API's JSON with `--output json`). A refusal prints the agent's reason,
 * which is the kubelet's text, and exits 1.
 */
import { toJson } from "@bufbuild/protobuf";
import type { ContainerAllocateResponse } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import type { AllocateResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { AllocateResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { MAX_RESOURCES_PER_REQUEST } from "../handlers/deviceplugin/allocation.ts";
import { isExtendedResourceName } from "../handlers/deviceplugin/names.ts";
import { printable } from "../log/printable.ts";
import { outputFlag, parseCommandArgs } from "./args.ts";
import { AGENT_CALL_OPTIONS, callAgent, containerFlag, ownerFlag } from "./agent-call.ts";
import type { Command } from "./command.ts";
import { UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

/** A count travels as a uint32; anything larger cannot be asked for at all (the agent also holds it to security.maxDevicesPerResource). */
export const MAX_COUNT = 0xffff_ffff;

const usage = `Usage: edgeplug allocate --owner ID [--container NAME] RESOURCE=COUNT... [--config PATH | --api SOCKET] [--output text|json] [--timeout DUR]

Asks the running agent to allocate COUNT healthy, free devices of each
RESOURCE (an extended resource name such as acme.io/gpu) to the owner, as
the kubelet does when it admits a pod: the device plugin's
GetPreferredAllocation when it offers one, its Allocate, and its
PreStartContainer when it requires one. Prints the devices and what the
plugins answered: environment variables, mounts, device nodes, annotations
and CDI devices. All or nothing: when one resource is refused, nothing is
allocated. Asking again for the same counts prints the same allocation.

Options:
  --owner ID           who the devices are for: at most 253 characters (a pod
                       UID or name; the owner is a pod in namespace edgeplug
                       in the pod-resources API)
  --container NAME     container name, at most 63 characters (default main)
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket (overrides --config)
  --output text|json   text for people (default) or the API's JSON
  --timeout DUR        how long to wait for the agent (default 2m)
${COMMON_OPTIONS_HELP}

Exit codes: 0 allocated, 1 refused (the reason on stderr) or agent unreachable, 2 bad usage.
`;

const options = { ...AGENT_CALL_OPTIONS, container: { type: "string" } } as const;

export const allocateCommand: Command = {
  name: "allocate",
  summary: "ask the running agent to allocate devices to an owner",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("allocate", args, options, { positionals: true });
    const output = outputFlag("allocate", parsed.values.output);
    const owner = ownerFlag("allocate", parsed.values.owner);
    const container = containerFlag("allocate", parsed.values.container);
    const resources = parseRequests(parsed.positionals);
    return callAgent(io, { ...parsed.values, command: "allocate", what: "the allocation" }, async (client, timeoutMs) => {
      const answer = await client.allocate({ owner, container, resources }, { timeoutMs, signal: io.signal });
      io.stdout(output === "json" ? JSON.stringify(toJson(AllocateResponseSchema, answer, { alwaysEmitImplicit: true }), null, 2) + "\n" : allocationText(answer));
    });
  },
};

/** Parses `RESOURCE=COUNT` arguments; every mistake is a usage error naming the argument. */
export function parseRequests(positionals: string[]): { resource: string; count: number }[] {
  if (positionals.length === 0) throw new UsageError("edgeplug allocate: give at least one RESOURCE=COUNT, e.g. acme.io/gpu=1");
  if (positionals.length > MAX_RESOURCES_PER_REQUEST) {
    throw new UsageError(`edgeplug allocate: ${positionals.length} RESOURCE=COUNT given; at most ${MAX_RESOURCES_PER_REQUEST} per request`);
  }
  const seen = new Set<string>();
  return positionals.map((argument) => {
    const bad = (why: string) => new UsageError(`edgeplug allocate: ${JSON.stringify(argument)}: ${why}`);
    const equals = argument.lastIndexOf("=");
    if (equals < 0) throw bad("expected RESOURCE=COUNT, e.g. acme.io/gpu=1");
    const resource = argument.slice(0, equals);
    const text = argument.slice(equals + 1);
    if (!isExtendedResourceName(resource)) throw bad(`${JSON.stringify(resource)} is not an extended resource name (DOMAIN/NAME, e.g. acme.io/gpu)`);
    if (!/^[0-9]+$/.test(text)) throw bad(`COUNT must be a whole number, got ${JSON.stringify(text)}`);
    const count = Number(text);
    if (count < 1) throw bad("COUNT must be at least 1");
    if (count > MAX_COUNT) throw bad(`COUNT must be at most ${MAX_COUNT} (a request's uint32), got ${text}`);
    if (seen.has(resource)) throw bad(`${resource} is given twice`);
    seen.add(resource);
    return { resource, count };
  });
}

/** The allocation for people: one block per resource; every value from a plugin shown with control characters escaped. */
export function allocationText(answer: AllocateResponse): string {
  const first = answer.allocations[0];
  const lines: string[] = first ? [`allocated to ${first.owner} (container ${first.container})`] : ["nothing allocated"];
  for (const allocation of answer.allocations) {
    lines.push(`${allocation.resource}: ${allocation.devices.join(", ")}`);
    if (allocation.response) lines.push(...responseLines(allocation.response).map((line) => `  ${line}`));
  }
  return lines.map(printable).join("\n") + "\n";
}

function responseLines(response: ContainerAllocateResponse): string[] {
  const sortedEntries = (map: { [key: string]: string }) => Object.entries(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return [
    ...sortedEntries(response.envs).map(([name, value]) => `env         ${name}=${value}`),
    ...response.mounts.map((m) => `mount       ${m.hostPath} -> ${m.containerPath}${m.readOnly ? " (read-only)" : ""}`),
    ...response.devices.map((d) => `device      ${d.hostPath} -> ${d.containerPath}${d.permissions ? ` (${d.permissions})` : ""}`),
    ...sortedEntries(response.annotations).map(([key, value]) => `annotation  ${key}=${value}`),
    ...response.cdiDevices.map((c) => `cdi         ${c.name}`),
  ];
}

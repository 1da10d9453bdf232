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
import { MAX_RESOURCES_PER_REQUEST } from "../devicemanager/allocation.ts";
import { isExtendedResourceName } from "../devicemanager/names.ts";
import { OWNER_LIFETIME_LIMITS } from "../devicemanager/owner-lifetimes.ts";
import { MAX_PID, processIdentity } from "../platform/process-watch.ts";
import { printable } from "../log/printable.ts";
import type { Client } from "@connectrpc/connect";
import type { Agent, ResourceStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import { formatDuration } from "../policy/duration.ts";
import { outputFlag, parseCommandArgs, waitFlag } from "./args.ts";
import { AGENT_CALL_OPTIONS, callAgent, CallFailure, containerFlag, ownerFlag } from "./agent-call.ts";
import type { Command, CommandIO } from "./command.ts";
import { UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

/** A count travels as a uint32; anything larger cannot be asked for at all (the agent also holds it to security.maxDevicesPerResource). */
export const MAX_COUNT = 0xffff_ffff;

const usage = `Usage: edgeplug allocate --owner ID [--container NAME] [--owner-pid PID | --lease DUR] RESOURCE=COUNT... [--config PATH | --api SOCKET] [--output text|json] [--timeout DUR] [--wait DUR]

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
  --owner-pid PID      the owner's devices are released when process PID exits (a process of
                       this machine's PID namespace; the process is pinned by its start time, so
                       a PID reused by another process later neither keeps nor takes devices)
  --lease DUR          the owner's devices are released DUR (1s to 24h) after the last allocate
                       for the owner with --lease: run the same allocate again to renew it.
                       Without either the owner holds its devices until edgeplug release
  --config PATH        find the agent through this policy's api.socket
  --api SOCKET         the agent's API socket (overrides --config)
  --output text|json   text for people (default) or the API's JSON
  --timeout DUR        how long to wait for the agent (default 2m)
  --wait DUR           first wait, at most DUR (at most 1h), until every RESOURCE is connected with
                       at least COUNT healthy devices (a device plugin registering after a node
                       restart), instead of being refused at once
${COMMON_OPTIONS_HELP}

Exit codes: 0 allocated, 1 refused (the reason on stderr), not ready within --wait, or agent unreachable, 2 bad usage.
`;

const options = { ...AGENT_CALL_OPTIONS, container: { type: "string" }, wait: { type: "string" }, "owner-pid": { type: "string" }, lease: { type: "string" } } as const;

/** The longest `--wait`: long enough for a node's device plugins to come back after a reboot, short enough that a forgotten script ends. */
export const MAX_WAIT_MS = 3_600_000;

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
    const waitMs = parsed.values.wait === undefined ? null : waitFlag("allocate", "wait", parsed.values.wait);
    const lifetime = lifetimeFlags(parsed.values["owner-pid"], parsed.values.lease);
    if (waitMs !== null && waitMs > MAX_WAIT_MS) {
      throw new UsageError(`edgeplug allocate: --wait: must be at most ${formatDuration(MAX_WAIT_MS)}, got ${JSON.stringify(parsed.values.wait)}`);
    }
    return callAgent(io, { ...parsed.values, command: "allocate", what: "the allocation" }, async (client, timeoutMs) => {
      if (waitMs !== null) await waitUntilReady(client, resources, waitMs, io);
      const answer = await client.allocate({ owner, container, resources, ...lifetime }, { timeoutMs, signal: io.signal });
      io.stdout(output === "json" ? JSON.stringify(toJson(AllocateResponseSchema, answer, { alwaysEmitImplicit: true }), null, 2) + "\n" : allocationText(answer));
    });
  },
};

/**
 * Waits, following the agent's events, until every requested resource is
 * connected with at least its count of healthy devices; throws a
 * CallFailure naming what is missing when `waitMs` passes first. Whether
 * enough of them are free is the allocation's to say, with the kubelet's reason.
 */
async function waitUntilReady(client: Client<typeof Agent>, requests: { resource: string; count: number }[], waitMs: number, io: CommandIO): Promise<void> {
  const known = new Map<string, ResourceStatus>();
  const missing = () =>
    requests.flatMap(({ resource, count }) => {
      const state = known.get(resource);
      if (state === undefined) return [`${resource}: no device plugin has registered it`];
      if (!state.connected) return [`${resource}: its device plugin is not connected`];
      if (state.healthy.length < count) return [`${resource}: ${state.healthy.length} healthy of ${count} wanted`];
      return [];
    });
  const expired = AbortSignal.timeout(waitMs);
  const stop = new AbortController();
  let waited = false;
  try {
    for await (const event of client.watchEvents({}, { signal: AbortSignal.any([expired, io.signal, stop.signal]) })) {
      if (event.kind.case === "snapshot") {
        known.clear();
        for (const resource of event.kind.value.resources) known.set(resource.name, resource);
      } else if (event.kind.case === "resource" && event.kind.value.resource) {
        const resource = event.kind.value.resource;
        if (event.kind.value.removed) known.delete(resource.name);
        else known.set(resource.name, resource);
      } else {
        continue;
      }
      if (missing().length === 0) {
        stop.abort();
        return;
      }
      if (!waited) io.stderr(printable(`edgeplug allocate: waiting up to ${formatDuration(waitMs)}: ${missing().join("; ")}`) + "\n");
      waited = true;
    }
  } catch (error) {
    if (stop.signal.aborted) return;
    if (io.signal.aborted) throw new CallFailure("interrupted while waiting (--wait); nothing allocated");
    if (!expired.aborted) throw error;
  }
  if (expired.aborted) throw new CallFailure(`not ready within ${formatDuration(waitMs)} (--wait), nothing allocated: ${missing().join("; ")}`);
  throw new CallFailure("the agent ended its event stream before the resources were ready; nothing allocated");
}

/**
 * `--owner-pid` and `--lease` as the request's fields. The process is read
 * here, when the user names it: its start time goes with the PID, and the
 * agent refuses another process that holds the PID by the time it serves
 * the request.
 */
export function lifetimeFlags(pidText: string | undefined, leaseText: string | undefined): { ownerPid?: number; ownerPidStartTime?: bigint; leaseMs?: bigint } {
  if (pidText !== undefined && leaseText !== undefined) throw new UsageError("edgeplug allocate: --owner-pid and --lease exclude each other: an owner is held by a process or by a lease");
  if (pidText !== undefined) {
    if (!/^[0-9]{1,7}$/.test(pidText) || Number(pidText) < 1 || Number(pidText) > MAX_PID) {
      throw new UsageError(`edgeplug allocate: --owner-pid: a process ID between 1 and ${MAX_PID}, got ${JSON.stringify(pidText)}`);
    }
    const identity = processIdentity(Number(pidText));
    if (identity === null) throw new UsageError(`edgeplug allocate: --owner-pid: no process ${pidText} is running`);
    return { ownerPid: identity.pid, ownerPidStartTime: BigInt(identity.startTime) };
  }
  if (leaseText !== undefined) {
    const { minLeaseMs, maxLeaseMs } = OWNER_LIFETIME_LIMITS;
    const leaseMs = waitFlag("allocate", "lease", leaseText);
    if (leaseMs < minLeaseMs || leaseMs > maxLeaseMs) {
      throw new UsageError(`edgeplug allocate: --lease: must be between ${formatDuration(minLeaseMs)} and ${formatDuration(maxLeaseMs)}, got ${JSON.stringify(leaseText)}`);
    }
    return { leaseMs: BigInt(leaseMs) };
  }
  return {};
}

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

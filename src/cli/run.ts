/**
 * `edgeplug run`: the daemon until SIGTERM/SIGINT, or with
 * `--reconcile-once` one pass for provisioning scripts: discover, register,
 * wait for every socket and the expectations (or the timeout), report, exit.
 */
import { once } from "node:events";
import process from "node:process";
import { EdgeplugAgent } from "../agent/agent.ts";
import { logDeviceHealth } from "../devicemanager/health-log.ts";
import { type Expectations, REPORT_SCHEMA } from "../api/report.ts";
import type { Logger } from "../log/logger.ts";
import { applyDaemonV8Flags } from "../platform/daemon-v8-flags.ts";
import { serviceNotifier } from "../platform/sd-notify.ts";
import { formatPolicyIssue, PolicyError } from "../policy/errors.ts";
import { resolvePolicy } from "../policy/load.ts";
import type { Policy } from "../policy/types.ts";
import { messageOf } from "../log/error-message.ts";
import { outputFlag, parseCommandArgs, waitFlag } from "./args.ts";
import type { Command, CommandIO } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, reportCannotStart, UsageError } from "./command.ts";
import type { LogFormat } from "../log/logger.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";
import { installLightHeaders } from "./light-headers.ts";
import { isExtendedResourceName } from "../devicemanager/names.ts";
import { reconcileOnce } from "./reconcile-once.ts";

const usage = `Usage: edgeplug [run] [--config PATH]
       edgeplug [run] [--config PATH] --reconcile-once [--timeout DUR] [--expect N]
                [--require NAME]... [--expect-resource NAME=N]... [--strict] [--output text|json]

Runs the agent until SIGTERM/SIGINT, or with --reconcile-once makes one pass:
registers every socket under the watched directories and every device plugin
that registers on kubelet.sock, prints a report and exits as soon as the
verdict is known, or when the timeout elapses.

Options:
  --config PATH        the policy (default: /etc/edgeplug/policy.yaml if it exists, else the embedded default)
  --reconcile-once     one pass, then a report; never binds api.socket, api.metrics or podResources.socket
  --timeout DUR        how long --reconcile-once retries (Go duration, more than 0, at most 596h31m23.647s; default 10s)
  --expect N           --reconcile-once waits for at least N registered plugins (watched
                       directories and kubelet.sock together)
  --require NAME       --reconcile-once waits for a registered plugin of that name (repeatable;
                       a device plugin on kubelet.sock is named by its resource)
  --expect-resource NAME=N
                       --reconcile-once waits for resource NAME with at least N healthy devices,
                       whichever way its plugin registered (repeatable)
  --strict             with --expect/--require, every socket still counts (default: only the expectations decide)
  --output text|json   report format (default text)
${COMMON_OPTIONS_HELP}

Exit codes: 0 clean stop or report ok; 1 the daemon could not start, or the report is not ok;
2 bad usage or policy; 3 --reconcile-once could not start (a JSON object says why with --output json).
`;

const options = {
  config: { type: "string" },
  "reconcile-once": { type: "boolean" },
  timeout: { type: "string" },
  expect: { type: "string" },
  require: { type: "string", multiple: true },
  "expect-resource": { type: "string", multiple: true },
  strict: { type: "boolean" },
  output: { type: "string" },
} as const;

const DEFAULT_RECONCILE_TIMEOUT_MS = 10_000;

export const runCommand: Command = {
  name: "run",
  summary: "run the agent (the default command)",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("run", args, options);
    const { values } = parsed;
    const once = values["reconcile-once"] === true;
    if (!once) {
      for (const flag of ["timeout", "expect", "require", "expect-resource", "strict", "output"] as const) {
        if (values[flag] !== undefined) throw new UsageError(`edgeplug run: --${flag} needs --reconcile-once`);
      }
    }
    const timeoutMs = values.timeout === undefined ? DEFAULT_RECONCILE_TIMEOUT_MS : waitFlag("run", "timeout", values.timeout);
    const expectations: Expectations = {
      expect: countFlag(values.expect),
      require: (values.require ?? []).map(requireFlag),
      resources: expectResourceFlags(values["expect-resource"] ?? []),
      strict: values.strict === true,
    };
    const output = outputFlag("run", values.output);
    // Before any Connect code runs: Node's own Headers would load undici, megabytes of
    // the agent's resident memory for a class Connect only builds metadata with (docs/performance.md, "Memory").
    installLightHeaders();
    const policy = await loadPolicy(values.config, once ? output : "text", io);
    io.log.configure(policy.log);
    if (expectations.expect !== null && expectations.expect > policy.security.maxPlugins) {
      throw new UsageError(
        `edgeplug run: --expect: ${expectations.expect} can never be met: the policy ${policy.source} allows at most ${policy.security.maxPlugins} plugins (security.maxPlugins)`,
      );
    }
    for (const [name, count] of Object.entries(expectations.resources)) {
      if (count > policy.security.maxDevicesPerResource) {
        throw new UsageError(
          `edgeplug run: --expect-resource: ${name}=${count} can never be met: the policy ${policy.source} allows at most ${policy.security.maxDevicesPerResource} devices per resource (security.maxDevicesPerResource)`,
        );
      }
    }
    if (once) return reconcileOnce(policy, io, { timeoutMs, expectations, output });
    return runDaemon(policy, values.config, io);
  },
};

/** The policy; when it is invalid and a script asked for JSON, a JSON object says so too (exit 2 all the same). */
async function loadPolicy(configPath: string | undefined, output: "text" | "json", io: CommandIO): Promise<Policy> {
  try {
    return await resolvePolicy(configPath);
  } catch (error) {
    if (output === "json" && error instanceof PolicyError) {
      const errors = error.issues.map(formatPolicyIssue);
      io.stdout(JSON.stringify({ schema: REPORT_SCHEMA, ok: false, error: "invalid policy", errors }, null, 2) + "\n");
    }
    throw error;
  }
}

/** How long stopping waits for the last systemd notification (the agent exits within 2 s). */
const NOTIFY_GRACE_MS = 1000;

async function runDaemon(policy: Policy, configPath: string | undefined, io: CommandIO): Promise<number> {
  // Here, once the daemon's modules are loaded and before it allocates: see daemon-v8-flags.ts.
  applyDaemonV8Flags();
  const agent = new EdgeplugAgent({ policy, log: io.log });
  const stopHealthLog = logDeviceHealth(agent.devices, io.log);
  // Under systemd (Type=notify): READY=1 once every readiness gate of /readyz is done.
  const notifier = serviceNotifier({ env: process.env, log: io.log });
  // SIGHUP re-reads the policy; reloads run one at a time, in arrival order, after the start. The handler
  // is in place before the start, which logs "edgeplug running": a SIGHUP sent on seeing that line (or
  // earlier) is a reload, never Node's default for the signal, which ends the process.
  const starting = started(() => agent.start(), io, policy.log.format);
  let reloads = starting.then(() => {});
  const onHangup = () => {
    void notifier?.reloading();
    reloads = reloads.then(async () => {
      if (!(await starting)) return;
      await reloadPolicy(agent, configPath, io.log);
      // Applied or refused, the reload is over: the agent runs a policy again.
      await agent.health.whenReady();
      void notifier?.ready();
    });
  };
  process.on("SIGHUP", onHangup);
  try {
    if (!(await starting)) {
      stopHealthLog();
      await notifier?.close(0);
      return EXIT_FAILURE;
    }
    void agent.health.whenReady().then(() => notifier?.ready());
    if (!io.signal.aborted) await once(io.signal, "abort");
  } finally {
    process.off("SIGHUP", onHangup);
  }
  io.log.info("stopping", { reason: String(io.signal.reason?.message ?? io.signal.reason) });
  void notifier?.stopping();
  await reloads;
  await agent.stop();
  stopHealthLog();
  await notifier?.close(NOTIFY_GRACE_MS);
  return EXIT_OK;
}

/** Applies the policy file again; an invalid one is refused with its errors and the running policy stays. */
async function reloadPolicy(agent: EdgeplugAgent, configPath: string | undefined, log: Logger): Promise<void> {
  let next: Policy;
  try {
    // The check runs in slices (the YAML scan) and is bounded: the API and registrations go on meanwhile.
    const read = (path: string, bytes: number) => log.info("reloading the policy", { policy: path, bytes });
    next = await resolvePolicy(configPath, { observer: { read } });
  } catch (error) {
    const errors = error instanceof PolicyError ? error.issues.map(formatPolicyIssue) : [String(error)];
    log.error("policy reload refused; the running policy stays in force", { errors });
    agent.policyReloadFailed();
    return;
  }
  agent.applyPolicy(next);
}

/** `--expect N`: a whole number of plugins, 0 or more. */
function countFlag(value: string | undefined): number | null {
  if (value === undefined) return null;
  const count = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(count)) {
    throw new UsageError(`edgeplug run: --expect: expected a whole number of plugins (0 or more), got ${JSON.stringify(value)}`);
  }
  return count;
}

/** `--require NAME`: a plugin name as GetInfo reports it; never empty. */
function requireFlag(name: string): string {
  if (name.trim() === "") throw new UsageError(`edgeplug run: --require: expected a plugin name, got ${JSON.stringify(name)}`);
  return name;
}

/** `--expect-resource NAME=N`: an extended resource name, given once, and a whole number of devices, 1 or more. */
function expectResourceFlags(values: string[]): Record<string, number> {
  const resources: Record<string, number> = {};
  for (const value of values) {
    const bad = (why: string) => new UsageError(`edgeplug run: --expect-resource: ${JSON.stringify(value)}: ${why}`);
    const equals = value.lastIndexOf("=");
    if (equals < 0) throw bad("expected NAME=N, e.g. example.com/dev=2");
    const name = value.slice(0, equals);
    const text = value.slice(equals + 1);
    if (!isExtendedResourceName(name)) throw bad(`${JSON.stringify(name)} is not an extended resource name (DOMAIN/NAME, e.g. example.com/dev)`);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) < 1) throw bad(`N must be a whole number of devices, 1 or more, got ${JSON.stringify(text)}`);
    if (Object.hasOwn(resources, name)) throw bad(`${name} is given twice`);
    resources[name] = Number(text);
  }
  return resources;
}

/** Runs `start`; when it fails (a socket in use, a directory it cannot create), says why on stderr (exit 1). */
async function started(start: () => Promise<void>, io: CommandIO, format: LogFormat): Promise<boolean> {
  try {
    await start();
    return true;
  } catch (error) {
    reportCannotStart(io, format, messageOf(error));
    return false;
  }
}

/**
 * `edgeplug run`: the daemon until SIGTERM/SIGINT, or with
 * `--reconcile-once` one pass for provisioning scripts: discover, register,
 * wait for every socket and the expectations (or the timeout), report, exit.
 */
import { once } from "node:events";
import process from "node:process";
import { EdgeplugAgent, handlerFactories } from "../agent.ts";
import { buildReport, reportToText, type Expectations } from "../api/report.ts";
import { buildStatus } from "../api/status.ts";
import type { Logger } from "../log/logger.ts";
import { formatDuration } from "../policy/duration.ts";
import { formatPolicyIssue, PolicyError } from "../policy/errors.ts";
import { resolvePolicy } from "../policy/load.ts";
import type { Policy } from "../policy/types.ts";
import { PluginManager } from "../pluginmanager/manager.ts";
import type { PluginRecord } from "../pluginmanager/types.ts";
import { durationFlag, outputFlag, parseCommandArgs } from "./args.ts";
import type { Command, CommandIO } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, UsageError } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug [run] [--config PATH]
       edgeplug [run] --config PATH --reconcile-once [--timeout DUR] [--expect N]
                [--require NAME]... [--output text|json]

Runs the agent until SIGTERM/SIGINT, or with --reconcile-once makes one pass:
registers every socket under the watched directories, prints a report and
exits as soon as every socket is registered and the expectations hold, or
when the timeout elapses.

Options:
  --config PATH        the policy (default: /etc/edgeplug/policy.yaml if it exists, else the embedded default)
  --reconcile-once     one pass, then a report; never binds api.socket or api.metrics
  --timeout DUR        how long --reconcile-once retries (Go duration, default 10s)
  --expect N           --reconcile-once waits for at least N registered plugins
  --require NAME       --reconcile-once waits for a registered plugin of that name (repeatable)
  --output text|json   report format (default text)
${COMMON_OPTIONS_HELP}

Exit codes: 0 clean stop or report ok, 1 could not start or report not ok, 2 bad usage or policy.
`;

const options = {
  config: { type: "string" },
  "reconcile-once": { type: "boolean" },
  timeout: { type: "string" },
  expect: { type: "string" },
  require: { type: "string", multiple: true },
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
      for (const flag of ["timeout", "expect", "require", "output"] as const) {
        if (values[flag] !== undefined) throw new UsageError(`edgeplug run: --${flag} needs --reconcile-once`);
      }
    }
    const timeoutMs =
      values.timeout === undefined ? DEFAULT_RECONCILE_TIMEOUT_MS : durationFlag("run", "timeout", values.timeout);
    const expectations: Expectations = { expect: countFlag(values.expect), require: values.require ?? [] };
    const output = outputFlag("run", values.output);
    const policy = await resolvePolicy(values.config);
    io.log.configure(policy.log);
    if (once) return reconcileOnce(policy, io, { timeoutMs, expectations, output });
    return runDaemon(policy, values.config, io);
  },
};

async function runDaemon(policy: Policy, configPath: string | undefined, io: CommandIO): Promise<number> {
  const agent = new EdgeplugAgent({ policy, log: io.log });
  if (!(await started(() => agent.start(), io))) return EXIT_FAILURE;
  // SIGHUP re-reads the policy; reloads run one at a time, in arrival order.
  let reloads = Promise.resolve();
  const onHangup = () => {
    reloads = reloads.then(() => reloadPolicy(agent, configPath, io.log));
  };
  process.on("SIGHUP", onHangup);
  try {
    if (!io.signal.aborted) await once(io.signal, "abort");
  } finally {
    process.off("SIGHUP", onHangup);
  }
  io.log.info("stopping", { reason: String(io.signal.reason?.message ?? io.signal.reason) });
  await reloads;
  await agent.stop();
  return EXIT_OK;
}

/** Applies the policy file again; an invalid one is refused with its errors and the running policy stays. */
async function reloadPolicy(agent: EdgeplugAgent, configPath: string | undefined, log: Logger): Promise<void> {
  let next: Policy;
  try {
    next = await resolvePolicy(configPath);
  } catch (error) {
    const errors = error instanceof PolicyError ? error.issues.map(formatPolicyIssue) : [String(error)];
    log.error("policy reload refused; the running policy stays in force", { errors });
    return;
  }
  agent.applyPolicy(next);
}

async function reconcileOnce(
  policy: Policy,
  io: CommandIO,
  settings: { timeoutMs: number; expectations: Expectations; output: "text" | "json" },
): Promise<number> {
  const startedAt = new Date();
  const { expectations } = settings;
  const manager = new PluginManager({ policy, log: io.log, handlers: handlerFactories() });
  if (!(await started(() => manager.start(), io))) return EXIT_FAILURE;
  const done = (plugins: PluginRecord[]) => {
    const registered = plugins.filter((plugin) => plugin.state === "registered");
    return (
      registered.length === plugins.length &&
      registered.length >= expectations.expect &&
      expectations.require.every((name) => registered.some((plugin) => plugin.name === name))
    );
  };
  await manager.whenSettled({
    predicate: done,
    signal: AbortSignal.any([AbortSignal.timeout(settings.timeoutMs), io.signal]),
  });
  await manager.stop();

  const unfinished = `not registered within ${formatDuration(settings.timeoutMs)}`;
  const plugins = manager.plugins().map((plugin) => finalState(plugin, unfinished));
  const status = buildStatus({ node: policy.nodeName, plugins });
  const report = buildReport(status, expectations, startedAt, new Date());
  io.stdout(settings.output === "json" ? JSON.stringify(report, null, 2) + "\n" : reportToText(report, status));
  logOutcome(io.log, report.ok, report.expectations.unmet, plugins);
  return report.ok ? EXIT_OK : EXIT_FAILURE;
}

/** SPEC.md section 5: at the end of --reconcile-once a plugin that never registered is `failed`. */
function finalState(plugin: PluginRecord, unfinished: string): PluginRecord {
  if (plugin.state === "registered" || plugin.state === "failed") return plugin;
  return { ...plugin, state: "failed", error: plugin.error ?? unfinished };
}

function logOutcome(log: Logger, ok: boolean, unmet: string[], plugins: PluginRecord[]): void {
  const registered = plugins.filter((plugin) => plugin.state === "registered").length;
  const fields = { registered, failed: plugins.length - registered, unmet };
  if (ok) log.info("reconcile-once done", fields);
  else log.warn("reconcile-once did not converge", fields);
}

function countFlag(value: string | undefined): number {
  if (value === undefined) return 0;
  if (!/^\d+$/.test(value)) {
    throw new UsageError(`edgeplug run: --expect: expected a number of plugins, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** Runs `start`; when it fails (a socket in use, a directory it cannot create), says why on stderr (exit 1). */
async function started(start: () => Promise<void>, io: CommandIO): Promise<boolean> {
  try {
    await start();
    return true;
  } catch (error) {
    io.stderr(`edgeplug: cannot start: ${error instanceof Error ? error.message : String(error)}\n`);
    return false;
  }
}

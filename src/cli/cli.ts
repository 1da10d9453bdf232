/**
 * The command line: picks the command from argv, applies the global
 * `--log-level`, handles `--help`, runs the command and turns its outcome
 * into an exit code (docs/commands.md).
 *
 * Commands are a table of loaders: each command's module (and the libraries
 * it needs: ajv, yaml, Connect, generated code) is evaluated only when that
 * command runs, so `version` and `--help` start as fast as Node itself; in
 * the single executable esbuild turns these imports into lazy initialisers.
 * A command lands by pointing its line at its own file.
 *
 * @example
 * ```ts
 * const code = await main(["validate", "--config", "config/dev.yaml"]);
 * ```
 */
import process from "node:process";
import { createLogger, isLogLevel, type Logger, type LoggerSettings, type LogLevel } from "../log/logger.ts";
import { printable } from "../log/printable.ts";
import { PolicyError } from "../policy/errors.ts";
import { messageOf } from "../log/error-message.ts";
import type { Command, CommandIO } from "./command.ts";
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError } from "./command.ts";
import { createHelpCommand, topLevelUsage } from "./help.ts";

type CommandLoader = () => Promise<Command>;

/** Every command by name, in the order `edgeplug --help` lists them. */
export const COMMANDS: Readonly<Record<string, CommandLoader>> = {
  run: async () => (await import("./run.ts")).runCommand,
  validate: async () => (await import("./validate.ts")).validateCommand,
  policy: async () => (await import("./policy.ts")).policyCommand,
  probe: async () => (await import("./probe.ts")).probeCommand,
  status: async () => (await import("./status.ts")).statusCommand,
  allocate: async () => (await import("./allocate.ts")).allocateCommand,
  release: async () => (await import("./release.ts")).releaseCommand,
  checkpoint: async () => (await import("./checkpoint.ts")).checkpointCommand,
  fleet: async () => (await import("./fleet.ts")).fleetCommand,
  version: async () => (await import("./version.ts")).versionCommand,
  help: async () => createHelpCommand(loadAllCommands),
};

/** Loads every command, for the top-level usage that lists them all. */
export async function loadAllCommands(): Promise<Command[]> {
  return Promise.all(Object.values(COMMANDS).map((load) => load()));
}

/** What main needs from its surroundings; tests pass their own, the process entry passes the real ones. */
export interface MainEnvironment {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Aborted on SIGTERM/SIGINT. */
  signal: AbortSignal;
  log: Logger;
}

/**
 * Runs the command named by `argv` (the arguments after the executable) and
 * resolves to its exit code. Never throws and never exits the process.
 */
export async function main(argv: string[], env: Partial<MainEnvironment> = {}): Promise<number> {
  const stdout = env.stdout ?? ((text: string) => void process.stdout.write(text));
  const stderr = env.stderr ?? ((text: string) => void process.stderr.write(text));
  const log = env.log ?? createLogger();

  let commandName = "";
  try {
    const { logLevel, rest } = extractLogLevel(argv);
    const io: CommandIO = {
      stdout,
      stderr,
      signal: env.signal ?? new AbortController().signal,
      log: logLevel === undefined ? log : pinLevel(log, logLevel),
    };
    const { name, args } = selectCommand(rest);
    if (name === undefined) {
      stdout(topLevelUsage(await loadAllCommands()));
      return EXIT_OK;
    }
    commandName = name;
    const command = await COMMANDS[name]!();
    if (asksForHelp(args)) {
      stdout(command.usage);
      return EXIT_OK;
    }
    return await command.run(args, io);
  } catch (error) {
    if (error instanceof UsageError) {
      const hint = commandName ? `edgeplug ${commandName} --help` : "edgeplug --help";
      stderr(`${printableLines(error.message)}\nRun '${hint}' for usage.\n`);
      return EXIT_USAGE;
    }
    if (error instanceof PolicyError) {
      stderr(printableLines(error.message) + "\n");
      return EXIT_USAGE;
    }
    log.error(`edgeplug ${commandName || "command"} failed`, {
      error: messageOf(error),
      stack: error instanceof Error ? error.stack : undefined,
    });
    return EXIT_FAILURE;
  }
}

/** Each line of a multi-line message with its control characters escaped (arguments and policy values are echoed). */
function printableLines(message: string): string {
  return message.split("\n").map(printable).join("\n");
}

/**
 * The command's name and its arguments. No arguments, or a first argument
 * that is an option (`--config`), means `run`; `--help` alone means the
 * top-level usage (name undefined); `--version` means `version`.
 */
function selectCommand(argv: string[]): { name: string | undefined; args: string[] } {
  const [first, ...rest] = argv;
  if (first === undefined) return { name: "run", args: [] };
  if (first === "--help" || first === "-h") return { name: undefined, args: [] };
  if (first === "--version") return { name: "version", args: rest };
  if (first.startsWith("-")) return { name: "run", args: argv };
  if (!Object.hasOwn(COMMANDS, first)) throw new UsageError(`edgeplug: unknown command ${JSON.stringify(first)}`);
  return { name: first, args: rest };
}

/** `--help` or `-h` among the options (not after `--`, where it would be a positional). */
function asksForHelp(args: string[]): boolean {
  for (const arg of args) {
    if (arg === "--") return false;
    if (arg === "--help" || arg === "-h") return true;
  }
  return false;
}

/**
 * Takes the global `--log-level LEVEL` / `--log-level=LEVEL` out of argv so
 * that every command accepts it without declaring it.
 */
export function extractLogLevel(argv: string[]): { logLevel: LogLevel | undefined; rest: string[] } {
  let logLevel: LogLevel | undefined;
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      rest.push(...argv.slice(i));
      break;
    }
    let value: string | undefined;
    if (arg === "--log-level") {
      value = argv[++i];
      if (value === undefined) throw new UsageError("edgeplug: --log-level needs a value: debug, info, warn or error");
    } else if (arg.startsWith("--log-level=")) {
      value = arg.slice("--log-level=".length);
    } else {
      rest.push(arg);
      continue;
    }
    if (!isLogLevel(value)) {
      throw new UsageError(`edgeplug: --log-level: expected one of debug, info, warn, error, got ${JSON.stringify(value)}`);
    }
    logLevel = value;
  }
  return { logLevel, rest };
}

/**
 * A logger whose level the flag fixed: commands configure it from the
 * policy's `log` section as usual, and the level part of that is ignored.
 */
function pinLevel(log: Logger, level: LogLevel): Logger {
  log.configure({ level });
  return {
    ...log,
    with: (fields) => pinLevel(log.with(fields), level),
    configure: (settings: Partial<LoggerSettings>) => {
      const { level: _policyLevel, ...others } = settings;
      log.configure(others);
    },
  };
}

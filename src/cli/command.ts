/**
 * What every `edgeplug` sub-command implements. Commands write results to
 * `io.stdout`, diagnostics to `io.stderr` (through the logger), and return
 * the process exit code; they never call process.exit themselves.
 */
import type { Logger } from "../log/logger.ts";
import type { LogFormat } from "../log/logger.ts";
import { printable } from "../log/printable.ts";

export interface CommandIO {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Aborted on SIGTERM/SIGINT; long-running commands stop when it fires. */
  signal: AbortSignal;
  log: Logger;
}

export interface Command {
  name: string;
  /** One line for the command list. */
  summary: string;
  /** Full usage text printed by `--help` (stdout, exit 0). */
  usage: string;
  run(args: string[], io: CommandIO): Promise<number>;
}

/** Exit codes shared by all commands (docs/commands.md). */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;
/** `run --reconcile-once` only: the agent could not start (docs/commands.md); the daemon says 1, as it always has. */
export const EXIT_CANNOT_START = 3;

/** Thrown for bad usage and bad policies; main prints the message and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * Says on stderr that the agent could not start: with JSON logs (the
 * policy's `log.format`) a `cannot start` log record like every other line,
 * so a log shipper never meets a line it cannot parse; with text logs the
 * plain `edgeplug: cannot start: REASON`.
 */
export function reportCannotStart(io: CommandIO, format: LogFormat, reason: string): void {
  if (format === "json") io.log.error("cannot start", { error: reason });
  else io.stderr(printable(`edgeplug: cannot start: ${reason}`) + "\n");
}

/**
 * Runs `main` as the process: SIGTERM/SIGINT abort the commands' signal, and
 * the process ends with the command's exit code.
 *
 * How the process ends: the exit code is set on `process.exitCode` and the
 * event loop is left to drain, so buffered output is never cut off and a
 * command that leaves a socket or timer open is noticed rather than hidden.
 * Should anything still hold the loop a second after the command returned,
 * a warning is logged and the process exits anyway: a CLI must never hang
 * (on SIGTERM the agent exits within 2 s).
 *
 * A stdout that cannot be written is not a crash: when the reader went away
 * (EPIPE: `edgeplug status | head -c 10`) the rest of the output is dropped
 * and a long-running command stops quietly, keeping its exit code, as other
 * CLIs do; any other write error (ENOSPC on `> /dev/full`) is one line on
 * stderr and exit 1, since the result did not reach its destination.
 */
import process from "node:process";
import { setTimeout } from "node:timers";
import { createLogger } from "../log/logger.ts";
import { main } from "./cli.ts";
import { EXIT_FAILURE } from "./command.ts";

/** How long open handles may keep the process alive after the command returned. */
const DRAIN_GRACE_MS = 1000;

const SIGNAL_NUMBERS = { SIGINT: 2, SIGTERM: 15 } as const;
type StopSignal = keyof typeof SIGNAL_NUMBERS;

/**
 * Runs the command in `argv` (the arguments after the executable) and sets
 * the process's exit code. A second SIGTERM/SIGINT while the command is still
 * stopping exits at once with 128 + the signal number, as shells expect.
 */
export async function runAsProcess(argv: string[]): Promise<void> {
  const log = createLogger();
  const controller = new AbortController();
  const onSignal = (signal: StopSignal) => {
    if (!controller.signal.aborted) {
      log.debug("stopping", { signal });
      controller.abort(new Error(`received ${signal}`));
      return;
    }
    process.exit(128 + SIGNAL_NUMBERS[signal]);
  };
  const handlers = (Object.keys(SIGNAL_NUMBERS) as StopSignal[]).map((signal) => {
    const handler = () => onSignal(signal);
    process.on(signal, handler);
    return { signal, handler };
  });

  const stdout = guardStdout(controller);
  // Nobody is left to tell when stderr itself fails; logging must not crash the agent.
  process.stderr.on("error", () => {});

  const code = await main(argv, { signal: controller.signal, log, stdout: stdout.write });

  for (const { signal, handler } of handlers) process.off(signal, handler);
  process.exitCode = stdout.failed() ? EXIT_FAILURE : code;
  setTimeout(() => {
    log.warn("open handles kept the process alive after the command finished; exiting", { exitCode: code });
    process.exit(code);
  }, DRAIN_GRACE_MS).unref();
}

/**
 * Writes to process.stdout until a write fails. EPIPE (the reader left)
 * aborts the command quietly; another error is reported once on stderr and
 * makes the exit code 1, even when it arrives after the command returned.
 */
function guardStdout(controller: AbortController): { write: (text: string) => void; failed: () => boolean } {
  let broken: NodeJS.ErrnoException | null = null;
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (broken) return;
    broken = error;
    if (error.code !== "EPIPE") {
      const reason = error.code === "ENOSPC" ? "no space left on device" : error.message;
      process.stderr.write(`edgeplug: cannot write the output to stdout: ${reason}${error.code ? ` (${error.code})` : ""}\n`);
      process.exitCode = EXIT_FAILURE;
    }
    if (!controller.signal.aborted) controller.abort(new Error(`stdout: ${error.code ?? error.message}`));
  });
  return {
    write: (text) => {
      if (!broken) process.stdout.write(text);
    },
    failed: () => broken !== null && broken.code !== "EPIPE",
  };
}

/**
 * Strict argument parsing shared by every command: unknown flags and bad
 * values are usage errors naming the flag. `--help` and the global
 * `--log-level` never get here: main (cli.ts) handles them for every command.
 */
import { parseArgs } from "node:util";
import { formatDuration, MAX_TIMER_MS, parseDuration } from "../policy/duration.ts";
import { UsageError } from "./command.ts";

type OptionSpec = { type: "string" | "boolean"; multiple?: boolean; short?: string };
type OptionSpecs = Record<string, OptionSpec>;

type ValueOf<S extends OptionSpec> = S["type"] extends "boolean" ? boolean | undefined
  : S["multiple"] extends true ? string[] | undefined
  : string | undefined;

export interface ParsedArgs<S extends OptionSpecs> {
  values: { [K in keyof S]: ValueOf<S[K]> };
  positionals: string[];
}

/** Parses `args` against `options`; throws UsageError naming the bad flag or value. */
export function parseCommandArgs<S extends OptionSpecs>(
  command: string,
  args: string[],
  options: S,
  { positionals = false }: { positionals?: boolean } = {},
): ParsedArgs<S> {
  let parsed: { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({
      args,
      options,
      allowPositionals: true,
      strict: true,
    }) as typeof parsed;
  } catch (error) {
    throw new UsageError(`edgeplug ${command}: ${negativeValue(args, error as Error) ?? (error as Error).message}`);
  }
  if (!positionals && parsed.positionals.length > 0) {
    throw new UsageError(`edgeplug ${command}: unexpected argument ${JSON.stringify(parsed.positionals[0])}`);
  }
  return {
    values: parsed.values as unknown as ParsedArgs<S>["values"],
    positionals: parsed.positionals,
  };
}

/**
 * parseArgs calls `--timeout -1s` ambiguous (the value looks like a flag);
 * what the user meant is a negative number, which no flag accepts: say that.
 */
function negativeValue(args: string[], error: Error): string | null {
  const flag = /^Option '(--[\w-]+)' argument is ambiguous/.exec(error.message)?.[1];
  if (flag === undefined) return null;
  const value = args[args.indexOf(flag) + 1];
  if (value === undefined || !/^-[\d.]/.test(value)) return null;
  return `${flag}: must not be negative, got ${JSON.stringify(value)}`;
}

/** Parses a flag's Go duration, naming the flag when it is not one. */
export function durationFlag(command: string, flag: string, value: string): number {
  try {
    return parseDuration(value);
  } catch (error) {
    throw new UsageError(`edgeplug ${command}: --${flag}: ${(error as Error).message}`);
  }
}

/** Parses a flag's Go duration as a wait: more than 0 and at most MAX_TIMER_MS (a longer timer would fire after 1 ms). */
export function waitFlag(command: string, flag: string, value: string): number {
  if (value.startsWith("-")) throw new UsageError(`edgeplug ${command}: --${flag}: must not be negative, got ${JSON.stringify(value)}`);
  const ms = durationFlag(command, flag, value);
  if (ms <= 0) throw new UsageError(`edgeplug ${command}: --${flag}: must be more than 0, got ${JSON.stringify(value)}`);
  if (!(ms <= MAX_TIMER_MS)) {
    throw new UsageError(`edgeplug ${command}: --${flag}: must be at most ${formatDuration(MAX_TIMER_MS)} (2^31-1 ms), got ${JSON.stringify(value)}`);
  }
  return ms;
}

/** Parses `--output`, which every reporting command accepts. */
export function outputFlag(command: string, value: string | undefined): "text" | "json" {
  if (value === undefined || value === "text" || value === "json") return value ?? "text";
  throw new UsageError(`edgeplug ${command}: --output: expected text or json, got ${JSON.stringify(value)}`);
}

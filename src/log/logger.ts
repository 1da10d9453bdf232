/**
 * edgeplug's one logger: structured records to stderr, as JSON lines or as
 * `key=value` text. stdout is never written here; it carries command results.
 *
 * @example
 * ```ts
 * const log = createLogger({ level: "info", format: "text" });
 * log.info("plugin registered", { socket: "/run/p.sock", type: "DevicePlugin" });
 * ```
 */
import { messageOf } from "./error-message.ts";
import { hasUnsafeCharacters, printable } from "./printable.ts";

export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ["json", "text"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every record and shares this one's settings. */
  with(fields: LogFields): Logger;
  /** Changes level and format for this logger and every logger derived from it. */
  configure(settings: Partial<LoggerSettings>): void;
  enabled(level: LogLevel): boolean;
}

export interface LoggerSettings {
  level: LogLevel;
  format: LogFormat;
  /** Where finished lines go; stderr unless a test collects them. */
  write: (line: string) => void;
  now: () => Date;
}

const severity: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export function isLogLevel(value: string): value is LogLevel {
  return (LOG_LEVELS as readonly string[]).includes(value);
}

export function createLogger(settings: Partial<LoggerSettings> = {}): Logger {
  const shared: LoggerSettings = {
    level: settings.level ?? "info",
    format: settings.format ?? "json",
    write: settings.write ?? ((line) => process.stderr.write(line)),
    now: settings.now ?? (() => new Date()),
  };
  return derive(shared, {});
}

function derive(shared: LoggerSettings, bound: LogFields): Logger {
  const emit = (level: LogLevel, message: string, fields?: LogFields) => {
    if (severity[level] < severity[shared.level]) return;
    const record = { ...bound, ...fields };
    shared.write(
      shared.format === "json" ? formatJson(shared.now(), level, message, record) : formatText(shared.now(), level, message, record),
    );
  };
  return {
    debug: (message, fields) => emit("debug", message, fields),
    info: (message, fields) => emit("info", message, fields),
    warn: (message, fields) => emit("warn", message, fields),
    error: (message, fields) => emit("error", message, fields),
    with: (fields) => derive(shared, { ...bound, ...fields }),
    configure: (next) => Object.assign(shared, next),
    enabled: (level) => severity[level] >= severity[shared.level],
  };
}

function formatJson(time: Date, level: LogLevel, msg: string, fields: LogFields): string {
  return JSON.stringify({ time: time.toISOString(), level, msg, ...plain(fields) }) + "\n";
}

/**
 * logfmt-style text for people: values with spaces, quotes, `=` or control
 * characters are quoted JSON strings, and what JSON leaves raw (DEL, C1,
 * bidi controls) is escaped too, so a plugin's name cannot forge a log line
 * or drive the terminal.
 */
function formatText(time: Date, level: LogLevel, msg: string, fields: LogFields): string {
  let line = `${time.toISOString()} ${level.toUpperCase().padEnd(5)} ${printable(msg)}`;
  for (const [key, value] of Object.entries(plain(fields))) {
    if (value === undefined) continue;
    const text = typeof value === "string" ? value : JSON.stringify(value);
    const quoted = text === "" || /[\s"=\\]/.test(text) || hasUnsafeCharacters(text);
    line += ` ${printable(key)}=${quoted ? printable(JSON.stringify(text)) : text}`;
  }
  return line + "\n";
}

/** Errors do not survive JSON.stringify; keep their message (and code, when any). */
function plain(fields: LogFields): LogFields {
  const out: LogFields = {};
  for (const [key, value] of Object.entries(fields)) {
    out[key] = value instanceof Error ? value.message : value;
  }
  return out;
}

/** Runs `call`, logging what it throws: observers and listeners must not break the code that tells them. */
export function guarded(log: Logger, message: string, call: () => void, fields: LogFields = {}): void {
  try {
    call();
  } catch (error) {
    log.error(message, { ...fields, error: messageOf(error) });
  }
}

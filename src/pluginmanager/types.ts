/**
 * The plugin manager's public vocabulary: what a registration socket looks
 * like from outside (status, events) and what a handler for a plugin type
 * implements. Nothing here knows about gRPC.
 */
import type { HandlerPolicy } from "../policy/types.ts";

/** SPEC.md section 5: `pending` until the first attempt ends, then one of the others. */
export const PLUGIN_STATES = ["pending", "registered", "failed", "stale"] as const;
export type PluginState = (typeof PLUGIN_STATES)[number];

/** How one registration attempt ended; `aborted`: the socket went away or the manager is stopping. */
export type AttemptState = "registered" | "failed" | "stale" | "aborted";

/**
 * Why an attempt failed, set where it failed (docs/metrics.md lists them):
 * stale (nothing listens), socket_missing (the discovered socket is gone or
 * replaced), socket_owner, get_info (no answer, a gRPC error, not gRPC),
 * invalid_info (an answer out of bounds), no_handler, handler_unavailable,
 * policy (dir types, allow/deny, versions), max_plugins, validation,
 * register, notify.
 */
export const ATTEMPT_FAILURES = [
  "stale", "socket_missing", "socket_owner", "get_info", "invalid_info", "no_handler",
  "handler_unavailable", "policy", "max_plugins", "validation", "register", "notify",
] as const;
export type AttemptFailure = (typeof ATTEMPT_FAILURES)[number];

/**
 * Why a socket is not registered: an attempt's failure, or connection_lost
 * (a handler's connection to the registered plugin dropped), or timeout
 * (`--reconcile-once` ended before its first attempt did).
 */
export const FAILURE_REASONS = [...ATTEMPT_FAILURES, "connection_lost", "timeout"] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

/** Refusals another attempt cannot undo while the policy and the plugin stay as they are. */
export const PERMANENT_FAILURES: ReadonlySet<FailureReason> = new Set(["socket_owner", "invalid_info", "no_handler", "handler_unavailable", "policy"]);

/** A failure with the reason it counts under and the text a person (and the plugin) reads. */
export interface Failure {
  reason: FailureReason;
  error: string;
}

/** One registration socket as `status` shows it. */
export interface PluginRecord {
  socket: string;
  /** type, name and endpoint are null until GetInfo has answered. */
  type: string | null;
  name: string | null;
  /** The registration socket's own path when the plugin gave none. */
  endpoint: string | null;
  /** As the plugin advertised them; [] before GetInfo answered. */
  versions: string[];
  state: PluginState;
  /** Attempts since this socket (path and inode) was discovered. */
  attempts: number;
  registeredAt: Date | null;
  /** Last attempt's error, kept while retrying; null once registered. */
  error: string | null;
  /** What `error` counts as; null exactly when `error` is. */
  reason: FailureReason | null;
  discoveredAt: Date;
  lastAttemptAt: Date | null;
}

/** What a handler is told about a plugin; the same object comes back on deregistration. */
export interface PluginRegistration {
  /** The registration socket the plugin was discovered on. */
  socket: string;
  type: string;
  name: string;
  /** Service endpoint, already defaulted to `socket` when the plugin gave none. */
  endpoint: string;
  versions: string[];
}

/**
 * A handler for one plugin type, as the kubelet's PluginHandler: validate,
 * register, deregister. Several sockets may carry the same name; handlers
 * key their state by socket (or endpoint), never by name alone. The plugin
 * manager has already checked the policy's name and version rules (and the
 * input bounds) before `validatePlugin`: a handler checks only what is its own.
 */
export interface PluginHandler {
  /**
   * The handler keeps a connection to each plugin it holds and reports its
   * loss through {@link HandlerContext.connectionLost} (device plugins, DRA);
   * the periodic liveness dial leaves its plugins alone.
   */
  readonly watchesConnection?: boolean;
  /** Throws an Error whose message is sent to the plugin when it is refused. */
  validatePlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** Throws when the plugin cannot be used; the manager then retries with backoff. */
  registerPlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** Never dials the plugin; must not throw. */
  deregisterPlugin(plugin: PluginRegistration): void;
}

/** What the plugin manager offers the handlers it builds. */
export interface HandlerContext {
  /**
   * A registered plugin's service connection dropped (device plugin
   * ListAndWatch ended, DRA channel lost): the plugin manager marks it
   * `stale` with this reason, emits an event, calls the handler's
   * `deregisterPlugin` (the handler keeps what it must for a grace period)
   * and registers it again with backoff. A plugin that is not (or no longer)
   * registered with that handler is ignored. Never throws.
   */
  connectionLost(plugin: PluginRegistration, reason: string): void;
}

/**
 * Builds the handler for one declared type. Keyed by the built-in type name
 * (`DevicePlugin`, `CSIPlugin`, `DRAPlugin`) or by `generic` for every
 * `kind: generic` type. Handlers are rebuilt when a policy reload changes
 * their handler policy: state that must survive a reload lives outside the
 * handler (a factory returns a view of a long-lived manager). A factory must
 * not start anything: `probe` builds handlers only to tell which one would
 * take a plugin.
 */
export type HandlerFactory = (policy: HandlerPolicy, context: HandlerContext) => PluginHandler;
/** Handler factories by built-in type or `generic`, handed in by the composition root (src/agent.ts). */
export type HandlerFactories = Readonly<Record<string, HandlerFactory>>;

export interface PluginChange {
  plugin: PluginRecord;
  /** The socket left the list (deleted, re-created, or no longer watched). */
  removed: boolean;
}

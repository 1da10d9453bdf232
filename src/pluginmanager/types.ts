/** The plugin manager's vocabulary: attempts, failure reasons and the handler contract. */
import type { HandlerPolicy } from "../policy/types.ts";
import type { PluginInfoSummary } from "./registration-client.ts";

/** How one registration attempt ended; `aborted`: the socket went away or the manager is stopping. */
export type AttemptState = "registered" | "failed" | "stale" | "aborted";

/** Why an attempt failed, set where it failed; docs/metrics.md explains each. */
export const ATTEMPT_FAILURES = [
  "stale",
  "socket_missing",
  "socket_owner",
  "get_info",
  "invalid_info",
  "no_handler",
  "handler_unavailable",
  "policy",
  "max_plugins",
  "validation",
  "register",
  "notify",
] as const;
export type AttemptFailure = (typeof ATTEMPT_FAILURES)[number];

/** An attempt's failure, a registered plugin's lost connection, or `--reconcile-once` ending first. */
export const FAILURE_REASONS = [...ATTEMPT_FAILURES, "connection_lost", "timeout"] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

/** The reason a failure counts under, and the text a person (and the plugin) reads. */
export interface Failure {
  reason: FailureReason;
  error: string;
}

/** What a handler is told of a plugin: GetInfo's answer at `socket`; the same object comes back at deregistration. */
export interface PluginRegistration extends PluginInfoSummary {
  socket: string;
}

/**
 * The kubelet's PluginHandler, asked once policy rules and input bounds
 * passed; several sockets may carry one name, so it keys by socket or endpoint.
 */
export interface PluginHandler {
  /** It reports connection loss itself (device plugins, DRA), so the liveness dial skips its plugins. */
  readonly watchesConnection?: boolean;
  /** A thrown message is sent to the refused plugin. */
  validatePlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** A throw is retried with backoff. */
  registerPlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** Never dials the plugin; must not throw. */
  deregisterPlugin(plugin: PluginRegistration): void;
}

export interface HandlerContext {
  /** A registered plugin's connection dropped: it turns `stale` and is registered again with backoff; never throws. */
  connectionLost(plugin: PluginRegistration, reason: string): void;
}

/** Builds one declared type's handler, again when a reload changes its policy; starts nothing (`probe` builds them too). */
export type HandlerFactory = (policy: HandlerPolicy, context: HandlerContext) => PluginHandler;
/** This build's handler factories, handed in by the composition root (src/agent/agent.ts). */
export type HandlerFactories = Readonly<Record<string, HandlerFactory>>;

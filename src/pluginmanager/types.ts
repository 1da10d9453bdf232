/**
 * The plugin manager's public vocabulary: what a registration socket looks
 * like from outside (status, events) and what a handler for a plugin type
 * implements. Nothing here knows about gRPC.
 */

/** SPEC.md section 5: `pending` until the first attempt ends, then one of the others. */
export const PLUGIN_STATES = ["pending", "registered", "failed", "stale"] as const;
export type PluginState = (typeof PLUGIN_STATES)[number];

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
 * key their state by socket (or endpoint), never by name alone.
 */
export interface PluginHandler {
  /** Throws an Error whose message is sent to the plugin when it is refused. */
  validatePlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** Throws when the plugin cannot be used; the manager then retries with backoff. */
  registerPlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void>;
  /** Never dials the plugin; must not throw. */
  deregisterPlugin(plugin: PluginRegistration): void;
}

export interface PluginChange {
  plugin: PluginRecord;
  /** The socket left the list (deleted, re-created, or no longer watched). */
  removed: boolean;
}

/**
 * The fleet's topics and their bounds (docs/fleet.md), shared by the
 * publisher (the agent) and the reader (`edgeplug fleet status`):
 *   PREFIX/v1/NODE/online  retained: {online, since, version, updatedAt}
 *   PREFIX/v1/NODE/status  retained: the status JSON of `status --output json`
 *   PREFIX/v1/NODE/events  not retained: one `status --watch --output json` event each, and `gap`
 */

/** The topics' schema version: a change of payload shape gets a new one, read beside the old. */
export const FLEET_TOPIC_VERSION = "v1";
/** The largest payload published or read; a status over it is not published (counted as a drop). */
export const MAX_FLEET_PAYLOAD_BYTES = 4 * 1024 * 1024;

export type FleetTopicKind = "online" | "status" | "events";

/**
 * A node name as one topic level: `/`, `+`, `#`, `%` and control bytes are
 * percent-encoded, so a name can neither add levels nor be a wildcard.
 */
export function nodeLevel(node: string): string {
  // deno-lint-ignore no-control-regex
  return node.replace(/[/+#%\u0000-\u001f\u007f]/g, (char) => `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`);
}

/** The node name a topic level stands for (the reverse of {@link nodeLevel}). */
export function nodeFromLevel(level: string): string {
  return level.replace(/%([0-9A-F]{2})/g, (_match, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

export function fleetTopic(prefix: string, node: string, kind: FleetTopicKind): string {
  return `${prefix}/${FLEET_TOPIC_VERSION}/${nodeLevel(node)}/${kind}`;
}

/** What the retained online topic holds. */
export interface OnlinePayload {
  online: boolean;
  /** When the link connected (online) or went down cleanly (offline); absent from the broker's will. */
  since?: string;
  version?: string;
  /** Refreshed every keepalive while online: a reader calls the node stale when it stops moving. */
  updatedAt?: string;
}

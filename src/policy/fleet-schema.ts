/**
 * The policy's `fleet:` section (docs/fleet.md, docs/policy.md), a part of
 * the schema in schema.ts, and the URL and topic patterns the fleet reader
 * (`edgeplug fleet status`) checks its flags against.
 */

type Schema = Record<string, unknown>;

/** An MQTT broker URL: `mqtt://` or `mqtts://`, a host name, IPv4 or `[IPv6]` address, and an optional port; no path. */
export const BROKER_URL_PATTERN = "^mqtts?://(?:[A-Za-z0-9.-]+|\\[[0-9A-Fa-f:.]+\\])(?::(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?/?$";
/** Topic levels separated by `/`, none empty, without MQTT's wildcards `+` and `#`. */
export const TOPIC_PREFIX_PATTERN = "^[^/+#\\u0000]+(?:/[^/+#\\u0000]+)*$";
/** Most brokers one fleet link cycles through. */
export const MAX_FLEET_BROKERS = 16;

/** The helpers of schema.ts, passed in (schema.ts imports this module: importing it back would be a cycle). */
export interface SchemaParts {
  expecting: <T extends Schema>(phrase: string, schema: T) => T;
  duration: (description: string, defaultValue: string) => Schema;
  section: (description: string, properties: Record<string, Schema>, required?: string[]) => Schema;
  stringList: (phrase: string, schema: Schema) => Schema;
  absolutePathPattern: string;
}

/** `fleet:` (docs/fleet.md): left out, the node publishes nothing. */
export function fleetSchema({ expecting, duration, section, stringList, absolutePathPattern }: SchemaParts): Schema {
  const nullablePath = (description: string): Schema => expecting("an absolute path or null", { description, type: ["string", "null"], pattern: absolutePathPattern, default: null });
  return expecting("a mapping with brokers and optionally clientId, prefix, qos, keepalive, usernameFile, passwordFile, tls, minInterval, events", {
    description: "Publishing this node's status and events to an MQTT broker (docs/fleet.md); left out, nothing is published",
    type: "object",
    additionalProperties: false,
    required: ["brokers"],
    properties: {
      brokers: stringList(`a list of 1 to ${MAX_FLEET_BROKERS} broker URLs like "mqtt://broker:1883"`, {
        description: "Broker URLs (mqtt:// or mqtts://), tried in turn: the link moves to the next when one goes",
        minItems: 1,
        maxItems: MAX_FLEET_BROKERS,
        items: expecting('a broker URL like "mqtt://broker:1883" or "mqtts://broker:8883"', { type: "string", pattern: BROKER_URL_PATTERN }),
      }),
      clientId: expecting("a non-empty client id of at most 128 characters", {
        description: "MQTT client id; default: the node name (a broker ACL can then match topics to it)",
        type: "string",
        minLength: 1,
        maxLength: 128,
      }),
      prefix: expecting('topic levels like "edgeplug" or "site/a" without +, # or empty levels', {
        description: "First topic levels: topics are PREFIX/v1/NODE/online, status and events",
        type: "string",
        pattern: TOPIC_PREFIX_PATTERN,
        maxLength: 256,
        default: "edgeplug",
      }),
      qos: expecting("0 or 1", { description: "MQTT QoS of every publish", enum: [0, 1], default: 1 }),
      keepalive: duration("MQTT keepalive; the online topic is refreshed at this period too; above 0 and at most 18h12m15s", "30s"),
      usernameFile: nullablePath("File holding the user name (one line); null: none. Refused when group- or world-readable"),
      passwordFile: nullablePath("File holding the password (one line); null: none. Refused when group- or world-readable"),
      tls: section("TLS for mqtts:// brokers (files in PEM)", {
        ca: nullablePath("CA certificates the broker's certificate must chain to; null: the system's"),
        cert: nullablePath("Client certificate, with key; null: none"),
        key: nullablePath("Client private key, with cert; refused when group- or world-readable; null: none"),
      }),
      minInterval: duration("Least time between two status publishes (the latest status wins); 0 publishes every change", "1s"),
      events: expecting("true or false", { description: "Publish each event on PREFIX/v1/NODE/events", type: "boolean", default: true }),
    },
  });
}

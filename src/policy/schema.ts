/**
 * The JSON Schema of the whole policy (docs/policy.md). It is the contract:
 * `validate` accepts exactly what it describes, unknown keys are errors, every
 * property carries a `description`, and every default a value can have is
 * declared here once, as a `default` keyword that ajv applies (`useDefaults`).
 * docs/policy.md, config/default.yaml and the precompiled validator
 * (gen/policy-validator.ts, made by scripts/generate-policy.ts) derive from
 * it. Rules a schema cannot express (unique watch paths, declared handler
 * types, backoff ordering, duration bounds, a key given twice) live in rules.ts.
 *
 * This module evaluates no ajv: commands validate with the precompiled code.
 *
 * @example
 * ```ts
 * schemaNodeAt("#/properties/reconcile/properties/resync"); // { ..., default: "10s" }
 * ```
 */
import { DURATION_PATTERN } from "./duration.ts";
import { fleetSchema } from "./fleet-schema.ts";
import { BUILTIN_PLUGIN_TYPES, TOPOLOGY_POLICIES } from "./types.ts";
import { LOG_FORMATS, LOG_LEVELS } from "../log/logger.ts";

/** Go durations, plus the bare `"0"` Go also accepts. */
export const POLICY_DURATION_PATTERN = `^0$|${DURATION_PATTERN}`;
/** Every path in the policy is absolute: the agent's working directory is not part of the contract. */
export const ABSOLUTE_PATH_PATTERN = "^/";
/** `host:port` for the metrics listener: a host name, an IPv4 address, `[IPv6]` or nothing (all interfaces), and a port 0-65535. */
export const LISTEN_ADDRESS_PATTERN = "^(?:[A-Za-z0-9.-]*|\\[[0-9A-Fa-f:.]+\\]):(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$";

type Schema = Record<string, unknown>;

// What each schema node expects, in words, for error messages: kept beside
// the schema (not inside it) so the schema stays plain JSON Schema.
const expectedPhrases = new WeakMap<object, string>();

function expecting<T extends Schema>(phrase: string, schema: T): T {
  expectedPhrases.set(schema, phrase);
  return schema;
}

/** What a node of {@link POLICY_SCHEMA} expects, in words ("a duration like \"30s\""); undefined for nodes without a phrase. */
export function expectedPhrase(schema: unknown): string | undefined {
  return typeof schema === "object" && schema !== null ? expectedPhrases.get(schema) : undefined;
}

const duration = (description: string, defaultValue: string): Schema =>
  expecting('a duration like "30s"', {
    description: `${description} (a Go duration like "500ms", "10s", "2m2s")`,
    type: "string",
    pattern: POLICY_DURATION_PATTERN,
    default: defaultValue,
  });

const absolutePath = (description: string, defaultValue?: string): Schema =>
  expecting("an absolute path", {
    description,
    type: "string",
    pattern: ABSOLUTE_PATH_PATTERN,
    ...(defaultValue === undefined ? {} : { default: defaultValue }),
  });

const nullableAbsolutePath = (description: string, defaultValue: string): Schema =>
  expecting("an absolute path or null", {
    description,
    type: ["string", "null"],
    pattern: ABSOLUTE_PATH_PATTERN,
    default: defaultValue,
  });

const positiveInteger = (description: string, defaultValue: number): Schema => expecting("an integer of at least 1", { description, type: "integer", minimum: 1, default: defaultValue });

/**
 * A mapping of settings. An optional section defaults to `{}`, so that ajv
 * goes on to fill in the defaults of its keys when the section is left out.
 */
const section = (description: string, properties: Record<string, Schema>, required: string[] = []): Schema =>
  expecting(`a mapping with the keys ${Object.keys(properties).join(", ")}`, {
    description,
    type: "object",
    additionalProperties: false,
    ...(required.length > 0 ? { required } : { default: {} }),
    properties,
  });

const stringList = (phrase: string, schema: Schema): Schema => expecting(phrase, { ...schema, type: "array" });

const nonEmptyString: Schema = expecting("a non-empty string", { type: "string", minLength: 1 });
const anyString: Schema = expecting("a string", { type: "string" });

const handlerFields: Record<string, Schema> = {
  versions: stringList("a non-empty list of version strings", {
    description: "Accepted plugin versions; a plugin is accepted when any of its versions is listed. Built-ins: narrows the kubelet's own list; generic: omitted accepts any",
    minItems: 1,
    items: nonEmptyString,
  }),
  allow: stringList("a list of plugin-name globs", {
    description: "Plugin-name globs accepted (`*` matches any run of characters, `/` included)",
    items: anyString,
    default: ["*"],
  }),
  deny: stringList("a list of plugin-name globs", {
    description: "Plugin-name globs refused; deny wins over allow",
    items: anyString,
    default: [],
  }),
};

const builtinHandler = (type: string): Schema =>
  expecting("a mapping with the keys versions, allow, deny (or nothing)", {
    description: `The built-in ${type} handler with the kubelet's behaviour; an empty mapping (or nothing) keeps its defaults`,
    type: ["object", "null"],
    additionalProperties: false,
    properties: handlerFields,
  });

/** The schema of a handler whose type is not built in (exported so load.ts can recognise its errors). */
export const GENERIC_HANDLER_SCHEMA: Schema = expecting("a mapping with kind: generic and optionally versions, allow, deny", {
  description: "Any other plugin type string: a generic handler that checks versions and names only",
  type: "object",
  additionalProperties: false,
  required: ["kind"],
  properties: {
    kind: expecting('"generic"', { description: 'Must be "generic" for a type that is not built in', const: "generic" }),
    ...handlerFields,
  },
});

/** The policy's JSON Schema (draft-07), `default` keywords included. */
export const POLICY_SCHEMA: Schema = expecting("a mapping (the policy) with at least version and watch", {
  $schema: "http://json-schema.org/draft-07/schema#",
  title: "edgeplug policy",
  description: "What edgeplug watches, which plugin types it accepts and where it keeps state (docs/policy.md)",
  type: "object",
  additionalProperties: false,
  required: ["version", "watch"],
  properties: {
    version: expecting("1", { description: "Policy format version; must be 1", const: 1 }),
    nodeName: expecting("a non-empty node name", {
      description: "Name of this node; default: the host name",
      type: "string",
      minLength: 1,
    }),
    watch: expecting("a non-empty list of watch directories (each with a path)", {
      description: "Registration directories to watch for plugin sockets; at least one",
      type: "array",
      minItems: 1,
      items: section(
        "One registration directory",
        {
          path: absolutePath("Absolute path of the directory; created when missing; unique among watch entries"),
          recursive: expecting("true or false", { description: "Watch sub-directories too", type: "boolean", default: true }),
          types: stringList("a non-empty list of declared handler types", {
            description: "Plugin types accepted from this directory, each a declared handler; default: every declared handler",
            minItems: 1,
            uniqueItems: true,
            items: nonEmptyString,
          }),
        },
        ["path"],
      ),
    }),
    handlers: expecting("a mapping of plugin type to handler, with at least one handler", {
      description: "Plugin type (PluginInfo.type) -> how it is handled. Built-ins: DevicePlugin, CSIPlugin, DRAPlugin; any other type needs kind: generic. Omitted: the three built-ins",
      type: "object",
      minProperties: 1,
      propertyNames: expecting("a non-empty plugin type", { type: "string", minLength: 1 }),
      properties: Object.fromEntries(BUILTIN_PLUGIN_TYPES.map((type) => [type, builtinHandler(type)])),
      additionalProperties: GENERIC_HANDLER_SCHEMA,
      default: Object.fromEntries(BUILTIN_PLUGIN_TYPES.map((type) => [type, {}])),
    }),
    devicePlugins: section("Device plugin settings", {
      registrationSocket: nullableAbsolutePath(
        "Socket of the v1beta1 Registration server device plugins call Register on; null disables it",
        "/var/lib/kubelet/device-plugins/kubelet.sock",
      ),
      gracePeriod: duration("How long a disconnected resource is kept before it disappears", "5m"),
      topologyPolicy: expecting(`one of ${TOPOLOGY_POLICIES.join(", ")}`, {
        description:
          "How allocation treats NUMA nodes, as the kubelet's topology manager policy: none (its default) offers every free device to GetPreferredAllocation; single-numa-node takes the devices of one NUMA node first when one can hold the request",
        type: "string",
        enum: [...TOPOLOGY_POLICIES],
        default: "none",
      }),
      removeSocketsAtStart: expecting("true or false", {
        description:
          "At start, remove every socket in the registration socket's directory, live ones included, as the kubelet does, so that device plugins see the restart and register again; false removes only sockets that refuse connections. Never the checkpoint, other files or directories; nothing in a watched directory",
        type: "boolean",
        default: true,
      }),
    }),
    podResources: section("The kubelet's pod-resources API (v1.PodResourcesLister) where monitoring agents look for it", {
      socket: nullableAbsolutePath(
        "Unix socket serving the pod-resources API with the kubelet's limits, besides the API socket; null disables it",
        "/var/lib/kubelet/pod-resources/kubelet.sock",
      ),
    }),
    checkpoint: section("Device state that survives restarts", {
      path: absolutePath(
        "File of the checkpoint, in the kubelet's kubelet_internal_checkpoint format",
        "/var/lib/edgeplug/kubelet_internal_checkpoint",
      ),
    }),
    reconcile: section("Registration timing", {
      resync: duration("Period of the full resync that catches missed events; above 0", "10s"),
      backoff: section("Per-socket exponential backoff between registration attempts", {
        initial: duration("First retry delay; above 0 and at most max", "500ms"),
        max: duration("Longest retry delay; above 0", "2m2s"),
      }),
      timeouts: section("Deadlines of the registration calls; each above 0", {
        dial: duration("Connecting to a plugin socket, HTTP/2 handshake included", "10s"),
        getInfo: duration("The GetInfo call", "1s"),
        notify: duration("The NotifyRegistrationStatus call", "5s"),
      }),
      liveness: section("Checks that registered plugins still listen (device plugins and DRA drivers are watched through their connection anyway)", {
        interval: duration("Period of a connect-only dial of each registered plugin's socket; one that refuses becomes stale; 0 turns the checks off", "0s"),
      }),
    }),
    security: section("Limits on what plugins may do", {
      socketOwners: expecting("a non-empty list of uids", {
        description: "uids allowed to own a registration socket; the list is exact; default: 0 and the agent's own uid",
        type: "array",
        minItems: 1,
        items: expecting("a uid (an integer from 0 to 4294967295)", { type: "integer", minimum: 0, maximum: 4294967295 }),
      }),
      maxPlugins: positiveInteger("Most plugins registered at once, from the watched directories and kubelet.sock together", 1024),
      maxDevicesPerResource: positiveInteger("Most devices one resource may advertise", 100_000),
    }),
    api: section("The local API and metrics", {
      socket: nullableAbsolutePath("Unix socket of the local API; null disables it", "/run/edgeplug/api.sock"),
      socketGroup: expecting("a group name or null", {
        description: "Group owning the API socket (mode 0660) so non-root operators can use status; null leaves the group unchanged",
        type: ["string", "null"],
        minLength: 1,
        default: null,
      }),
      metrics: expecting('a host:port like "127.0.0.1:9478" or null', {
        description: "host:port serving Prometheus /metrics, /healthz and /readyz; null disables it",
        type: ["string", "null"],
        pattern: LISTEN_ADDRESS_PATTERN,
        default: null,
      }),
    }),
    log: section("Logging to stderr", {
      level: expecting(`one of ${LOG_LEVELS.join(", ")}`, {
        description: "Least severe level written",
        type: "string",
        enum: [...LOG_LEVELS],
        default: "info",
      }),
      format: expecting(`one of ${LOG_FORMATS.join(", ")}`, {
        description: "json lines or key=value text",
        type: "string",
        enum: [...LOG_FORMATS],
        default: "json",
      }),
    }),
    fleet: fleetSchema({ expecting, duration, section, stringList, absolutePathPattern: ABSOLUTE_PATH_PATTERN }),
  },
});

/**
 * ajv options of the precompiled validator: every error collected, defaults
 * filled in. `unicode: false` counts string lengths with `.length` (only
 * `minLength: 1` is used, where that is the same) so the generated code needs
 * no ajv runtime module.
 */
export const POLICY_AJV_OPTIONS = {
  allErrors: true,
  strict: true,
  allowUnionTypes: true,
  useDefaults: true,
  unicode: false,
} as const;

/**
 * The schema node an ajv `schemaPath` names (`#/properties/log/properties/level/enum`
 * names the `enum` keyword's value; drop the last segment for the node that holds it).
 */
export function schemaNodeAt(schemaPath: string): unknown {
  let node: unknown = POLICY_SCHEMA;
  for (const raw of schemaPath.replace(/^#\/?/, "").split("/")) {
    if (raw === "") continue;
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<string, unknown>)[raw.replaceAll("~1", "/").replaceAll("~0", "~")];
  }
  return node;
}

/** The default of a handler's `allow` and `deny`, for a built-in handler given as null (ajv fills mappings only). */
export const HANDLER_LIST_DEFAULTS = {
  allow: handlerFields.allow!.default as string[],
  deny: handlerFields.deny!.default as string[],
};

/**
 * Environment variables that configure the executable's embedded Node
 * runtime, or a library inside its bundle, rather than edgeplug. A root agent
 * must not take them from whoever starts it: the executable runs without them
 * (src/platform/clean-start.ts), the systemd unit never passes them
 * (UnsetEnvironment=, packaging/edgeplug.service), and docs/install.md
 * ("The environment configures edgeplug, not Node") says what each did, as measured on
 * the executable. `node src/main.ts` and Deno do not go through this.
 */

export interface IgnoredVariable {
  name: string;
  /** What it does in the executable when honoured. */
  effect: string;
}

/**
 * Read by Node, libuv or OpenSSL while the runtime starts, before the first
 * line of edgeplug runs: deleting them then changes nothing, only a new
 * runtime started without them is free of them.
 */
export const RUNTIME_VARIABLES: readonly IgnoredVariable[] = [
  { name: "NODE_V8_COVERAGE", effect: "V8 coverage JSON files written at exit, as root, into any directory named (created if missing)" },
  { name: "NODE_COMPILE_CACHE", effect: "a module compile cache enabled at that path (its directory is created as root before any JavaScript runs)" },
  { name: "NODE_COMPILE_CACHE_PORTABLE", effect: "the compile cache's key made independent of its directory" },
  { name: "NODE_DEBUG", effect: "Node's debug lines for the named modules (net, http, http2, timer, ...) on stderr" },
  { name: "NODE_DEBUG_NATIVE", effect: "Node's C++ debug lines on stderr" },
  { name: "NODE_REDIRECT_WARNINGS", effect: "Node's warnings appended, as root, to any file named (created if missing)" },
  { name: "NODE_NO_WARNINGS", effect: "Node's warnings hidden" },
  { name: "NODE_PENDING_DEPRECATION", effect: "Node's pending deprecation warnings emitted" },
  { name: "NODE_CHANNEL_FD", effect: "an IPC channel opened on that descriptor (a descriptor that is not open aborts the process before any JavaScript)" },
  { name: "NODE_CHANNEL_SERIALIZATION_MODE", effect: "how that IPC channel encodes its messages" },
  {
    name: "NODE_UNIQUE_ID",
    effect: "the agent runs as a cluster worker: it asks the other end of an IPC channel for every socket it listens on, and without a channel it never listens and exits 0",
  },
  { name: "NODE_ICU_DATA", effect: "ICU data files looked up and loaded from that directory" },
  { name: "OPENSSL_CONF", effect: "an OpenSSL configuration loaded at start, whose providers and engines are shared libraries: native code run as root before any JavaScript" },
  { name: "UV_THREADPOOL_SIZE", effect: "libuv's thread pool size (200 makes the agent run 206 threads; the unit allows 64 tasks)" },
];

/** Read by libraries of the bundle when it runs: removed from the environment before it runs. */
export const LIBRARY_VARIABLES: readonly IgnoredVariable[] = [
  { name: "LOG_TOKENS", effect: "the yaml library prints every token of a parsed policy on stdout" },
  { name: "LOG_STREAM", effect: "the yaml library prints every parsed policy node on stdout" },
  { name: "BUF_BIGINT_DISABLE", effect: "@bufbuild/protobuf represents 64-bit integers (device topology IDs) as strings instead of bigints" },
  { name: "MQTTJS_SOCKS_PROXY", effect: "mqtt.js sends the fleet link through that SOCKS proxy (the fleet link refuses to start under it)" },
  { name: "DEBUG", effect: "the debug library (used by mqtt.js) prints the fleet link's packets and state on stderr" },
  { name: "READABLE_STREAM", effect: 'readable-stream (used by mqtt.js) swaps in Node\'s own stream module when it is "disable"' },
  { name: "WS_NO_BUFFER_UTIL", effect: "ws (bundled with mqtt.js, never used for mqtt:// and mqtts://) skips its optional native module" },
  { name: "WS_NO_UTF_8_VALIDATE", effect: "ws (bundled with mqtt.js, never used for mqtt:// and mqtts://) skips its optional native module" },
];

/**
 * Only the unit removes these: the executable cannot act on them (they act
 * before any JavaScript, or Node already ignores them in the executable), or
 * they change nothing in it today.
 */
export const UNIT_ONLY_VARIABLES: readonly IgnoredVariable[] = [
  { name: "NODE_OPTIONS", effect: "none: the executable's SEA configuration ignores it" },
  { name: "NODE_REPL_EXTERNAL_MODULE", effect: "the executable refuses to start (exit 9) before any JavaScript" },
  { name: "OPENSSL_CONF_INCLUDE", effect: "where OPENSSL_CONF's includes are looked up" },
  { name: "OPENSSL_MODULES", effect: "where OpenSSL looks for provider libraries named in its configuration" },
  { name: "OPENSSL_ENGINES", effect: "where OpenSSL looks for engine libraries named in its configuration" },
  { name: "UV_USE_IO_URING", effect: "libuv's use of io_uring for file operations (no difference observed)" },
  { name: "NODE_EXTRA_CA_CERTS", effect: "CAs the fleet link's mqtts:// connections trust besides Node's (its only TLS)" },
  { name: "NODE_TLS_REJECT_UNAUTHORIZED", effect: "none: the fleet link's mqtts:// connections set rejectUnauthorized themselves" },
  { name: "NODE_USE_SYSTEM_CA", effect: "the fleet link's mqtts:// connections trust the system's CAs when fleet.tls.ca is null" },
  { name: "SSL_CERT_FILE", effect: "CAs OpenSSL loads for the fleet link's mqtts:// connections when fleet.tls.ca is null" },
  { name: "SSL_CERT_DIR", effect: "CAs OpenSSL loads for the fleet link's mqtts:// connections when fleet.tls.ca is null" },
  { name: "NODE_USE_ENV_PROXY", effect: "none: every request edgeplug makes goes to a unix socket, which Node never proxies" },
];

/**
 * Set by the executable on the runtime it restarts without the variables
 * above: should one of them still be there, the executable refuses to start
 * instead of restarting again.
 */
export const CLEAN_RESTART_MARKER = "EDGEPLUG_CLEAN_RESTART";

/** What the executable does about its environment before anything else. */
export type EnvironmentPlan =
  | { action: "run" }
  | { action: "strip"; ignored: string[] }
  | { action: "restart"; ignored: string[]; env: Record<string, string> }
  | { action: "refuse"; ignored: string[] };

/**
 * What Node already did at start with variables it then removed from the
 * environment: NODE_CHANNEL_FD (an IPC channel is open) and NODE_UNIQUE_ID
 * (the process became a cluster worker).
 */
export interface RuntimeSetup {
  ipcChannel: boolean;
  clusterWorker: boolean;
}

/** The plan for an executable started with `env`, whose runtime did `setup` at start. */
export function planEnvironment(env: NodeJS.ProcessEnv, setup: RuntimeSetup): EnvironmentPlan {
  const runtime = RUNTIME_VARIABLES.filter(({ name }) => name in env).map(({ name }) => name);
  if (setup.ipcChannel && !runtime.includes("NODE_CHANNEL_FD")) runtime.push("NODE_CHANNEL_FD");
  if (setup.clusterWorker && !runtime.includes("NODE_UNIQUE_ID")) runtime.push("NODE_UNIQUE_ID");
  const library = LIBRARY_VARIABLES.filter(({ name }) => name in env).map(({ name }) => name);
  if (runtime.length === 0) return library.length === 0 ? { action: "run" } : { action: "strip", ignored: library };
  const ignored = [...runtime, ...library];
  if (CLEAN_RESTART_MARKER in env) return { action: "refuse", ignored: runtime };
  const dropped = new Set(ignored);
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!dropped.has(name) && value !== undefined) kept[name] = value;
  }
  kept[CLEAN_RESTART_MARKER] = "1";
  return { action: "restart", ignored, env: kept };
}

/** The one warning line naming what was ignored (names come from the lists above, never from the environment). */
export function ignoredWarning(ignored: readonly string[]): string {
  return (
    `edgeplug: warning: ignoring ${ignored.join(", ")} from the environment: ` +
    "they configure the embedded Node runtime or its libraries, not edgeplug (docs/install.md)\n"
  );
}

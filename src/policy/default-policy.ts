/**
 * The policy edgeplug runs with when neither `--config` nor
 * /etc/edgeplug/policy.yaml exists (SPEC.md section 1): the kubelet's standard
 * paths, every built-in handler, the checkpoint in /var/lib/edgeplug/, the API
 * at /run/edgeplug/api.sock, metrics off. config/default.yaml holds the same
 * text so it can be read, copied and edited.
 *
 * @example
 * ```ts
 * loadDefaultPolicy().watch[0].path; // "/var/lib/kubelet/plugins_registry"
 * ```
 */
import { parsePolicy } from "./load.ts";
import type { Policy } from "./types.ts";

/** The `source` of a policy that came from {@link DEFAULT_POLICY_YAML}. */
export const EMBEDDED_DEFAULT_SOURCE = "<embedded default>";

/** The embedded default policy, as YAML. */
export const DEFAULT_POLICY_YAML = `# edgeplug default policy: the kubelet's standard paths, every built-in
# handler, state in /var/lib/edgeplug/, the local API on /run/edgeplug/api.sock,
# metrics off. The node name is the host name.
version: 1

watch:
  - path: /var/lib/kubelet/plugins_registry
    recursive: true

handlers:
  DevicePlugin: {}
  CSIPlugin: {}
  DRAPlugin: {}

devicePlugins:
  registrationSocket: /var/lib/kubelet/device-plugins/kubelet.sock
  gracePeriod: 5m

checkpoint:
  path: /var/lib/edgeplug/kubelet_internal_checkpoint

reconcile:
  resync: 10s
  backoff: { initial: 500ms, max: 2m2s }
  timeouts: { dial: 10s, getInfo: 1s, notify: 5s }

security:
  maxPlugins: 1024
  maxDevicesPerResource: 100000

api:
  socket: /run/edgeplug/api.sock
  metrics: null

log: { level: info, format: json }
`;

/** Parses {@link DEFAULT_POLICY_YAML}; its `source` is "<embedded default>". */
export function loadDefaultPolicy(): Policy {
  return parsePolicy(DEFAULT_POLICY_YAML, EMBEDDED_DEFAULT_SOURCE);
}

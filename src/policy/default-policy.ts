/**
 * The policy edgeplug runs with when neither `--config` nor
 * /etc/edgeplug/policy.yaml exists (docs/policy.md, "Which policy is used"): the kubelet's
 * registration directory, and every other setting at its schema default
 * (every built-in handler, the checkpoint in /var/lib/edgeplug/, the API at
 * /run/edgeplug/api.sock, metrics off). It is data, not YAML: starting with it
 * costs no YAML parse. config/default.yaml is generated from it
 * (scripts/generate-policy.ts) so it can be read, copied and edited.
 *
 * @example
 * ```ts
 * defaultPolicyData().watch[0].path; // "/var/lib/kubelet/plugins_registry"
 * ```
 */

/** The `source` of a policy that came from {@link defaultPolicyData}. */
export const EMBEDDED_DEFAULT_SOURCE = "<embedded default>";

/** The kubelet's plugin registration directory. */
export const KUBELET_PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry";

/** What the default policy states, fresh on each call (validation fills the schema's defaults in place). */
export function defaultPolicyData(): { version: 1; watch: { path: string }[] } {
  return { version: 1, watch: [{ path: KUBELET_PLUGINS_REGISTRY }] };
}

/** What the device manager takes from a policy, at start and on every reload. */
import type { Policy } from "../policy/types.ts";
import { endpointRules } from "../endpoints/endpoint-rules.ts";
import type { DeviceSettings } from "./types.ts";

export function deviceSettings(policy: Policy): DeviceSettings {
  return {
    gracePeriodMs: policy.devicePlugins.gracePeriodMs,
    maxDevicesPerResource: policy.security.maxDevicesPerResource,
    dialTimeoutMs: policy.reconcile.timeouts.dialMs,
    topologyPolicy: policy.devicePlugins.topologyPolicy,
    endpointRules: endpointRules(policy),
  };
}

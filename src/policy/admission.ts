/**
 * What the policy admits of a plugin (docs/policy.md, "Rules"): the uid owning its
 * registration socket (`security.socketOwners`), and its name and versions
 * against its handler's `allow`, `deny` and `versions`. The plugin manager
 * asks at every registration and again after a reload, `probe` when it
 * reports; each answer is null or the text the refused plugin is told.
 */
import { globMatch, nameAllowed } from "./glob.ts";
import type { HandlerPolicy, Policy } from "./types.ts";

/** Why a socket owned by `uid` may not be dialled, or null. */
export function ownerRefusal(policy: Policy, uid: number): string | null {
  const owners = policy.security.socketOwners;
  return owners.includes(uid) ? null : `socket owned by uid ${uid}, not in security.socketOwners ${JSON.stringify(owners)}`;
}

/** Why `allow`/`deny` refuse a plugin name (deny wins), or null. */
export function nameRefusal(policy: HandlerPolicy, name: string): string | null {
  if (nameAllowed(name, policy.allow, policy.deny)) return null;
  const denied = policy.deny.find((pattern) => globMatch(pattern, name));
  if (denied !== undefined) return `plugin name ${name} is denied by handler ${policy.type} (deny ${JSON.stringify(denied)})`;
  return `plugin name ${name} is not allowed by handler ${policy.type} (allow ${JSON.stringify(policy.allow)})`;
}

/** Why none of the advertised versions is accepted, or null; `versions: null` accepts any. */
export function versionRefusal(policy: HandlerPolicy, versions: readonly string[]): string | null {
  if (policy.versions === null || versions.some((version) => policy.versions!.includes(version))) return null;
  return `none of the plugin's versions ${JSON.stringify(versions)} is accepted by handler ${policy.type} (versions ${JSON.stringify(policy.versions)})`;
}

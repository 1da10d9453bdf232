/**
 * What the kubelet accepts from a device plugin, and its error texts
 * (its devicemanager's Register checks): the API version, extended resource
 * names, and the limits edgeplug adds on device ids, which the kubelet
 * documents (63 characters) but does not enforce.
 */
import { hasControlCharacter } from "../log/printable.ts";

export const DEVICE_PLUGIN_VERSION = "v1beta1";
export const SUPPORTED_VERSIONS = [DEVICE_PLUGIN_VERSION];
export const HEALTHY = "Healthy";

/** The proto's comment on Device.ID; ids over it are refused. */
export const MAX_DEVICE_ID_LENGTH = 63;
/**
 * The largest ListAndWatch message read from a plugin: 100,000 devices with
 * 63-character ids and a NUMA node take about 9 MiB. A larger message is
 * refused and the stream opened again (endpoint.ts).
 */
export const MAX_LIST_MESSAGE_BYTES = 16 * 1024 * 1024;

const DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS_SUBDOMAIN = new RegExp(`^${DNS_LABEL}(\\.${DNS_LABEL})*$`);
const QUALIFIED_NAME_PART = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const REQUESTS_PREFIX = "requests.";

/**
 * The kubelet's IsExtendedResourceName: a `/`-qualified name outside the
 * `kubernetes.io/` domain whose `requests.`-prefixed form is a valid
 * qualified name (prefix a DNS subdomain of at most 253 characters, name
 * part at most 63 characters).
 */
export function isExtendedResourceName(name: string): boolean {
  if (!name.includes("/") || name.includes("kubernetes.io/")) return false;
  if (name.startsWith(REQUESTS_PREFIX)) return false;
  const parts = (REQUESTS_PREFIX + name).split("/");
  if (parts.length !== 2) return false;
  const [prefix, local] = parts as [string, string];
  if (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix)) return false;
  return local.length <= 63 && QUALIFIED_NAME_PART.test(local);
}

/** Register's refusal of an unsupported version, worded as the kubelet's (Go `%q` of the list). */
export function unsupportedVersionError(version: string): string {
  return `requested API version ${JSON.stringify(version)} is not supported by kubelet. Supported version is ${JSON.stringify(SUPPORTED_VERSIONS)}`;
}

/** Register's refusal of a resource name. */
export function invalidResourceNameError(name: string): string {
  return `the ResourceName ${JSON.stringify(name)} is invalid`;
}

/** ValidatePlugin's refusals (watched-directory path). */
export function validationRefusal(name: string, versions: readonly string[]): string | null {
  if (!versions.some((version) => SUPPORTED_VERSIONS.includes(version))) {
    return `manager version, ${DEVICE_PLUGIN_VERSION}, is not among plugin supported versions [${versions.join(" ")}]`;
  }
  if (!isExtendedResourceName(name)) return `invalid name of device plugin socket: ${invalidResourceNameError(name)}`;
  return null;
}

/** Why a device id is refused, or null when it is acceptable. */
export function deviceIdRefusal(id: string): string | null {
  if (id === "") return "a device has an empty ID";
  if (id.length > MAX_DEVICE_ID_LENGTH) {
    return `device ID ${JSON.stringify(id.slice(0, MAX_DEVICE_ID_LENGTH))}... is longer than ${MAX_DEVICE_ID_LENGTH} characters`;
  }
  if (hasControlCharacter(id)) return `device ID ${JSON.stringify(id)} contains a control character`;
  return null;
}

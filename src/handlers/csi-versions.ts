/**
 * CSI versions as the kubelet reads them from a driver's registration: each
 * advertised string is parsed as a "generic" version (at least two
 * dot-separated numbers, an optional leading "v", anything after the numbers
 * ignored), majors above 1 are skipped, and the highest remaining one must be
 * a 1.x. Error texts are the kubelet's, so that a driver's logs read the same
 * under edgeplug.
 */

/** A parsed version: its numeric components, in order. */
export interface GenericVersion {
  readonly components: readonly number[];
  /** As the driver wrote it. */
  readonly text: string;
}

/** Leading "v" and dot-separated digits, then anything (which the generic form ignores). */
const GENERIC_VERSION = /^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)$/s;

/** Parses `text` as the kubelet's version.ParseGeneric; throws with its message otherwise. */
export function parseGenericVersion(text: string): GenericVersion {
  const match = GENERIC_VERSION.exec(text);
  if (match === null) throw new Error(`could not parse "${text}" as version`);
  const parts = match[1]!.split(".");
  if (parts.length < 2) throw new Error(`illegal version string "${text}"`);
  const components = parts.map((part, index) => {
    if (index === 0 && part.length > 1 && part.startsWith("0")) {
      throw new Error(`illegal zero-prefixed version component "${part}" in "${text}"`);
    }
    const value = Number(part);
    if (!Number.isSafeInteger(value)) throw new Error(`illegal version component "${part}" in "${text}"`);
    return value;
  });
  return { components, text };
}

/** Negative when a < b, zero when equal (missing components count as 0), positive when a > b. */
export function compareVersions(a: GenericVersion, b: GenericVersion): number {
  const length = Math.max(a.components.length, b.components.length);
  for (let i = 0; i < length; i++) {
    const difference = (a.components[i] ?? 0) - (b.components[i] ?? 0);
    if (difference !== 0) return difference;
  }
  return 0;
}

/** The version in dotted form, as the kubelet prints one ("1.2.0"). */
export function formatVersion(version: GenericVersion): string {
  return version.components.join(".");
}

/**
 * The highest advertised version with major 1, as the kubelet's
 * HighestSupportedVersion: unparsable entries are skipped (the last parse
 * error is reported when nothing parses), majors above 1 are skipped, and a
 * highest version below 1 (CSI 0.x) is refused.
 */
export function highestSupportedVersion(versions: readonly string[]): GenericVersion {
  if (versions.length === 0) throw new Error("empty array for supported versions");
  let highest: GenericVersion | undefined;
  let lastError: Error | undefined;
  for (let i = versions.length - 1; i >= 0; i--) {
    let version: GenericVersion;
    try {
      version = parseGenericVersion(versions[i]!);
    } catch (error) {
      lastError = error as Error;
      continue;
    }
    if (version.components[0]! > 1) continue;
    if (highest === undefined || compareVersions(highest, version) < 0) highest = version;
  }
  if (highest === undefined) {
    throw new Error(`could not find a highest supported version from versions (${goList(versions)}) reported by this plugin: ${lastError?.message ?? "<nil>"}`);
  }
  if (highest.components[0] !== 1) {
    throw new Error(`highest supported version reported by plugin is ${formatVersion(highest)}, must be v1.x`);
  }
  return highest;
}

/** A string list as Go's %v prints it: [a b c]. */
export function goList(values: readonly string[]): string {
  return `[${values.join(" ")}]`;
}

/** A string list as Go's %q prints it: ["a" "b"]. */
export function goQuotedList(values: readonly string[]): string {
  return `[${values.map((value) => JSON.stringify(value)).join(" ")}]`;
}

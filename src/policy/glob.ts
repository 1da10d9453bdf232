/**
 * Plugin-name globs of the policy's `allow` / `deny` lists (docs/policy.md, "Rules"):
 * `*` matches any run of characters, `/` included; every other character
 * matches itself. There is no `?`, no character class and no escaping, so a
 * name can never be mistaken for a pattern.
 *
 * @example
 * ```ts
 * globMatch("acme.io/*", "acme.io/sensor/v2"); // true
 * nameAllowed("acme.io/beta", ["acme.io/*"], ["*beta"]); // false: deny wins
 * ```
 */

/** Whether `text` matches `pattern` as a whole. */
export function globMatch(pattern: string, text: string): boolean {
  const parts = pattern.split("*");
  if (parts.length === 1) return pattern === text;
  const head = parts[0]!;
  const tail = parts[parts.length - 1]!;
  if (text.length < head.length + tail.length || !text.startsWith(head) || !text.endsWith(tail)) return false;
  // Greedy left-to-right placement of the middle parts is exact for `*`-only globs:
  // taking the earliest match of each part leaves the most room for the rest.
  let position = head.length;
  const end = text.length - tail.length;
  for (const part of parts.slice(1, -1)) {
    const found = text.indexOf(part, position);
    if (found === -1 || found + part.length > end) return false;
    position = found + part.length;
  }
  return true;
}

/** Whether a plugin name passes a handler's lists: it matches an `allow` glob and no `deny` glob. */
export function nameAllowed(name: string, allow: readonly string[], deny: readonly string[]): boolean {
  if (deny.some((pattern) => globMatch(pattern, name))) return false;
  return allow.some((pattern) => globMatch(pattern, name));
}

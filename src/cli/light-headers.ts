/**
 * A WHATWG `Headers` for the commands that call the agent (status, allocate,
 * release) or a plugin (probe), and for the agent itself (run), installed in
 * their process before Connect runs.
 *
 * Why: Connect builds every request's and response's metadata with the global
 * `Headers`. Node defines that global lazily, and its first touch loads the
 * bundled undici, which itself loads http2, tls, crypto and zlib: half of a
 * command that should answer in 100 ms (docs/performance.md, "Command
 * start-up"), and megabytes of the agent's resident memory
 * (docs/performance.md, "Memory"). None of these
 * processes calls fetch, so nothing else needs undici (probe and the agent
 * still load http2 for gRPC, but no longer undici itself).
 *
 * The class follows the Fetch standard's Headers for everything Connect and
 * this code do with it: case-insensitive names, `append` combining values
 * with ", ", iteration sorted by name with `set-cookie` kept apart, name and
 * value checks (a TypeError, as the real one throws), values with leading and
 * trailing whitespace stripped. It has no guard (immutable headers are a
 * fetch Response's, which these commands never make). test/light-headers.test.ts
 * runs every operation against Node's own Headers.
 *
 * Installed by plain assignment: Node's global is a lazy data property that
 * any other way of looking at or redefining it (a property descriptor,
 * defineProperty) materialises, loading undici. Only under Node: Deno's own
 * Headers costs nothing at start.
 */

import process from "node:process";

/** RFC 9110 token characters, the Fetch standard's header name. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A header value may not contain NUL, CR or LF. */
const FORBIDDEN_IN_VALUE = /[\0\r\n]/;
/** HTTP whitespace, stripped from both ends of a value. */
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

type HeadersInit = ConstructorParameters<typeof Headers>[0];
type HeadersIterator<T> = ReturnType<Headers["entries"]> extends Iterator<unknown, infer R, infer N> ? Generator<T, R, N> : never;

function checkedName(name: string): string {
  const text = String(name);
  if (!HEADER_NAME.test(text)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(text)}`);
  return text.toLowerCase();
}

function checkedValue(value: string): string {
  const text = String(value).replace(EDGE_WHITESPACE, "");
  if (FORBIDDEN_IN_VALUE.test(text)) throw new TypeError(`Headers: invalid header value ${JSON.stringify(text)}`);
  return text;
}

export class LightHeaders implements Headers {
  /** Values by lowercase name, in the order appended. */
  readonly #values = new Map<string, string[]>();

  constructor(init?: HeadersInit) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object") throw new TypeError("Headers: init must be an object, an iterable of pairs or a Headers");
    if (Symbol.iterator in init) {
      for (const pair of init as Iterable<Iterable<string>>) {
        const items = [...pair];
        if (items.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair");
        this.append(items[0]!, items[1]!);
      }
      return;
    }
    for (const [name, value] of Object.entries(init as Record<string, string>)) this.append(name, value);
  }

  append(name: string, value: string): void {
    const key = checkedName(name);
    const text = checkedValue(value);
    const list = this.#values.get(key);
    if (list) list.push(text);
    else this.#values.set(key, [text]);
  }

  set(name: string, value: string): void {
    this.#values.set(checkedName(name), [checkedValue(value)]);
  }

  delete(name: string): void {
    this.#values.delete(checkedName(name));
  }

  get(name: string): string | null {
    return this.#values.get(checkedName(name))?.join(", ") ?? null;
  }

  has(name: string): boolean {
    return this.#values.has(checkedName(name));
  }

  getSetCookie(): string[] {
    return [...(this.#values.get("set-cookie") ?? [])];
  }

  forEach(callback: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [key, value] of this.entries()) callback.call(thisArg, value, key, this);
  }

  *entries(): HeadersIterator<[string, string]> {
    for (const key of [...this.#values.keys()].sort()) {
      const list = this.#values.get(key);
      if (list === undefined) continue; // deleted by a callback during iteration
      if (key === "set-cookie") { for (const value of list) yield [key, value]; }
      else yield [key, list.join(", ")];
    }
  }

  *keys(): HeadersIterator<string> {
    for (const [key] of this.entries()) yield key;
  }

  *values(): HeadersIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): HeadersIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}

/** Makes LightHeaders the global Headers under Node; returns whether it did. */
export function installLightHeaders(): boolean {
  if ("Deno" in globalThis || typeof process.versions?.node !== "string") return false;
  globalThis.Headers = LightHeaders;
  return true;
}

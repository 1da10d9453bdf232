/**
 * The CLI's Headers (src/cli/light-headers.ts) does what Node's own Headers
 * does, operation by operation, for what Connect and the CLI use: each case
 * runs the same steps on both and compares everything observable.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { LightHeaders } from "../src/cli/light-headers.ts";

type Step = (headers: Headers) => unknown;

/** Runs `steps` on a fresh pair built from `init` and compares results, errors and contents after each. */
function sameAsNode(init: ConstructorParameters<typeof Headers>[0], ...steps: Step[]): void {
  const outcome = (make: () => Headers) => {
    const seen: unknown[] = [];
    let headers: Headers;
    try {
      headers = make();
    } catch (error) {
      return [(error as Error).constructor.name];
    }
    for (const step of steps) {
      try {
        seen.push(step(headers));
      } catch (error) {
        seen.push((error as Error).constructor.name);
      }
      seen.push([...headers], [...headers.keys()], [...headers.values()], headers.getSetCookie());
    }
    const forEachSeen: [string, string][] = [];
    headers.forEach((value, key, parent) => {
      assert.equal(parent, headers);
      forEachSeen.push([key, value]);
    });
    seen.push(forEachSeen, Object.prototype.toString.call(headers));
    return seen;
  };
  assert.deepEqual(
    outcome(() => new LightHeaders(init)),
    outcome(() => new Headers(init)),
  );
}

test("names are case-insensitive and iteration is sorted by lowercase name", () => {
  sameAsNode(
    { "Content-Type": "application/proto", "connect-protocol-version": "1", Accept: "x" },
    (h) => h.get("content-type"),
    (h) => h.get("CONTENT-TYPE"),
    (h) => h.has("Accept"),
    (h) => h.get("missing"),
    (h) => h.set("B-Header", "2"),
    (h) => h.delete("ACCEPT"),
    (h) => h.has("accept"),
  );
});

test("append combines values with a comma, set replaces them, set-cookie stays apart", () => {
  sameAsNode(
    [
      ["x-a", "1"],
      ["X-A", "2"],
      ["set-cookie", "a=1"],
      ["Set-Cookie", "b=2"],
    ],
    (h) => h.get("x-a"),
    (h) => h.append("x-a", "3"),
    (h) => h.get("set-cookie"),
    (h) => h.set("x-a", "only"),
    (h) => h.get("x-a"),
  );
});

test("values lose their surrounding whitespace; bad names and values throw TypeError", () => {
  sameAsNode(
    undefined,
    (h) => h.set("x-space", "  padded\t"),
    (h) => h.get("x-space"),
    (h) => h.set("bad name", "v"),
    (h) => h.set("x-newline", "a\nb"),
    (h) => h.append("x-nul", "a\0b"),
    (h) => h.get("bad name"),
    (h) => h.set("", "v"),
    (h) => h.set("x-empty", ""),
  );
});

test("built from another Headers, from pairs, and refused from a broken pair", () => {
  const source = new Headers({ "grpc-status": "0", "trailer-x": "1" });
  sameAsNode(source, (h) => h.get("grpc-status"));
  sameAsNode(new LightHeaders({ "grpc-status": "0" }), (h) => h.get("grpc-status"));
  sameAsNode([["a", "1"]], (h) => h.get("a"));
  sameAsNode([["only-a-name"]] as unknown as [string, string][]);
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { globMatch, nameAllowed } from "./glob.ts";

test("a pattern without * matches only the same text", () => {
  assert.equal(globMatch("acme.io/sensor", "acme.io/sensor"), true);
  assert.equal(globMatch("acme.io/sensor", "acme.io/sensors"), false);
  assert.equal(globMatch("", ""), true);
  assert.equal(globMatch("", "x"), false);
});

test("* matches any run of characters, / included, and the empty run", () => {
  assert.equal(globMatch("*", ""), true);
  assert.equal(globMatch("*", "a/b/c"), true);
  assert.equal(globMatch("acme.io/*", "acme.io/"), true);
  assert.equal(globMatch("acme.io/*", "acme.io/sensor/v2"), true);
  assert.equal(globMatch("acme.io/*", "acme.iox/sensor"), false);
  assert.equal(globMatch("*-beta", "gpu.vendor.com/x-beta"), true);
  assert.equal(globMatch("*-beta", "x-beta2"), false);
  assert.equal(globMatch("a*b*c", "a/x/b/y/c"), true);
  assert.equal(globMatch("a*b*c", "acb"), false);
  assert.equal(globMatch("**", "anything"), true);
});

test("prefix and suffix may not overlap", () => {
  assert.equal(globMatch("a*a", "a"), false);
  assert.equal(globMatch("a*a", "aa"), true);
  assert.equal(globMatch("ab*ab", "aba"), false);
  assert.equal(globMatch("a*ab", "aab"), true);
  assert.equal(globMatch("*ab*ab", "abab"), true);
  assert.equal(globMatch("*ab*ab", "abxb"), false);
  assert.equal(globMatch("*b*ab", "ab"), false, "a middle part may not reach into the suffix");
});

test("every character other than * is literal: no ?, classes, escapes or regex", () => {
  assert.equal(globMatch("a.b", "axb"), false);
  assert.equal(globMatch("a?b", "axb"), false);
  assert.equal(globMatch("a?b", "a?b"), true);
  assert.equal(globMatch("[ab]", "a"), false);
  assert.equal(globMatch("[ab]", "[ab]"), true);
  assert.equal(globMatch("a\\*", "a\\xyz"), true);
  assert.equal(globMatch("(x|y)+", "x"), false);
});

test("agrees with a regular-expression reference on many generated cases", () => {
  // A small deterministic generator (the high bits of an LCG; its low bits repeat
  // quickly); a 3-letter alphabet makes overlaps frequent.
  let seed = 42;
  const next = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed >>> 16;
  };
  const word = (alphabet: string, max: number) => Array.from({ length: next() % (max + 1) }, () => alphabet[next() % alphabet.length]).join("");
  for (let i = 0; i < 5000; i++) {
    const pattern = word("ab/*", 6);
    const text = word("ab/", 8);
    const reference = new RegExp(`^${pattern.split("*").map((part) => part.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")).join(".*")}$`, "s");
    assert.equal(globMatch(pattern, text), reference.test(text), `${JSON.stringify(pattern)} vs ${JSON.stringify(text)}`);
  }
});

test("nameAllowed: allowed by an allow glob, and deny wins", () => {
  assert.equal(nameAllowed("acme.io/sensor", ["*"], []), true);
  assert.equal(nameAllowed("acme.io/sensor", ["acme.io/*"], []), true);
  assert.equal(nameAllowed("other.io/sensor", ["acme.io/*"], []), false);
  assert.equal(nameAllowed("acme.io/sensor-beta", ["acme.io/*"], ["*-beta"]), false);
  assert.equal(nameAllowed("acme.io/sensor", ["acme.io/sensor"], ["acme.io/*"]), false);
  assert.equal(nameAllowed("acme.io/sensor", [], []), false, "an empty allow list accepts nothing");
  assert.equal(nameAllowed("x", ["x", "y"], ["z"]), true);
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { createLogger } from "./logger.ts";
import { hasUnsafeCharacters, printable } from "./printable.ts";

/** Every character a terminal may act on or that reorders a line on display. */
const UNSAFE_RANGES: [number, number][] = [
  [0x00, 0x1f],
  [0x7f, 0x9f],
  [0x200e, 0x200f],
  [0x2028, 0x202e],
  [0x2066, 0x2069],
];

test("printable shows each control character as a visible escape", () => {
  assert.equal(printable("gpu\u001b[2J\r\nregistered\u0007"), "gpu\\e[2J\\r\\nregistered\\x07");
  assert.equal(printable("a\u0000b\tc\u007fd\u009be"), "a\\x00b\\tc\\x7fd\\x9be");
  assert.equal(printable("name\u202egpj.exe\u2028next"), "name\\u202egpj.exe\\u2028next");
  assert.equal(printable("acme.io/gpu — ünïcode ok"), "acme.io/gpu — ünïcode ok");
});

test("printable leaves no unsafe character in any input", () => {
  for (const [from, to] of UNSAFE_RANGES) {
    for (let code = from; code <= to; code++) {
      const char = String.fromCharCode(code);
      const shown = printable(`x${char}y`);
      assert.ok(hasUnsafeCharacters(`x${char}y`), `U+${code.toString(16)} is unsafe`);
      assert.equal(hasUnsafeCharacters(shown), false, `U+${code.toString(16)} left as ${JSON.stringify(shown)}`);
      assert.match(shown, /^x\\.+y$/);
    }
  }
  assert.equal(hasUnsafeCharacters("plain text / with spaces"), false);
});

test("the text log format escapes control characters in the message, keys and values", () => {
  const lines: string[] = [];
  const log = createLogger({ format: "text", write: (line) => lines.push(line), now: () => new Date(0) });
  log.warn("plugin\r\nFORGED", { name: "evil\u001b]0;title\u0007", "k\u001b": "v", plain: "ok", spaced: "a b", bell: "\u0007", del: "x\u007f" });
  assert.equal(lines.length, 1);
  const [line] = lines;
  assert.equal(line!.split("\n").length, 2, "one line, ended by its own newline");
  assert.equal(hasUnsafeCharacters(line!.slice(0, -1)), false, JSON.stringify(line));
  assert.equal(
    line,
    '1970-01-01T00:00:00.000Z WARN  plugin\\r\\nFORGED name="evil\\u001b]0;title\\u0007" k\\e=v plain=ok spaced="a b" bell="\\u0007" del="x\\x7f"\n',
  );
});

test("the JSON log format stays JSON: control characters escaped as JSON escapes them", () => {
  const lines: string[] = [];
  const log = createLogger({ format: "json", write: (line) => lines.push(line), now: () => new Date(0) });
  log.info("m\n", { name: "a\u001bb" });
  assert.deepEqual(JSON.parse(lines[0]!), { time: "1970-01-01T00:00:00.000Z", level: "info", msg: "m\n", name: "a\u001bb" });
  assert.equal(lines[0]!.split("\n").length, 2);
});

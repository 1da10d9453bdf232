/**
 * The log reference (docs/logs.md) names only messages the agent still
 * writes: every message in its table is a string literal passed to the
 * logger somewhere in src/. (A message is a fixed string; values go in
 * fields, which is what makes it worth grepping for.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SRC = fileURLToPath(new URL("../src/", import.meta.url));
const REFERENCE = fs.readFileSync(new URL("../docs/logs.md", import.meta.url), "utf8");

/** The hand-written sources (generated code logs nothing). */
function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "gen" ? [] : sources(file);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") ? [file] : [];
  });
}

/** The messages of the table under "Messages to grep for": the backticked strings of each row's first cell. */
function documentedMessages(): string[] {
  const table = REFERENCE.slice(REFERENCE.indexOf("## Messages to grep for"));
  return table
    .split("\n")
    .filter((line) => line.startsWith("| `"))
    .flatMap((line) => [...line.split("|")[1]!.matchAll(/`([^`]+)`/g)].map((match) => match[1]!));
}

test("every message docs/logs.md lists is logged by src/", () => {
  const code = sources(SRC).map((file) => fs.readFileSync(file, "utf8")).join("\n");
  const messages = documentedMessages();
  assert.ok(messages.length > 30, `the table was found (${messages.length} messages)`);
  // `edgeplug COMMAND failed` is a template in src/cli/cli.ts.
  const literal = (message: string) => (message === "edgeplug COMMAND failed" ? "`edgeplug ${commandName" : message);
  const missing = messages.filter((message) => !code.includes(`"${literal(message)}"`) && !code.includes(literal(message)));
  assert.deepEqual(missing, [], `docs/logs.md lists messages no code in src/ logs:\n${missing.join("\n")}`);
});

/**
 * The command reference (docs/commands.md) keeps up with the code: every
 * command in the command table (src/cli/cli.ts) has a section, and every
 * option its usage text offers is named in that section; every exit code a
 * usage text promises is in the table of exit codes. The usage texts are the
 * source: a new command or flag that is not documented fails here.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { COMMANDS } from "../src/cli/cli.ts";
import type { Command } from "../src/cli/command.ts";

const REFERENCE = fs.readFileSync(new URL("../docs/commands.md", import.meta.url), "utf8");

/** The text of the `## ` section whose heading names `edgeplug NAME`, up to the next `## `. */
function sectionOf(name: string): string | undefined {
  const sections = REFERENCE.split(/^## /m).slice(1);
  const heading = new RegExp(`^[^\\n]*\`edgeplug (\\[${name}\\]|${name})(?![\\w-])`);
  return sections.find((section) => heading.test(section));
}

/** Every `--option` a usage text mentions (global ones included: they must be documented too). */
function optionsIn(usage: string): string[] {
  return [...new Set(usage.match(/(?<![\w-])--[a-z][a-z-]*/g) ?? [])];
}

async function everyCommand(): Promise<Command[]> {
  return Promise.all(Object.values(COMMANDS).map((load) => load()));
}

test("docs/commands.md has a section for every command, naming each of its options", async () => {
  const missing: string[] = [];
  for (const command of await everyCommand()) {
    const section = sectionOf(command.name);
    if (section === undefined) {
      missing.push(`no "## \`edgeplug ${command.name}\`" section`);
      continue;
    }
    for (const option of optionsIn(command.usage)) {
      const global = option === "--log-level" || option === "--help";
      const where = global ? REFERENCE : section;
      if (!new RegExp(`(?<![\\w-])${option}(?![\\w-])`).test(where)) {
        missing.push(`${command.name}: ${option} is in its usage but not in ${global ? "the page" : "its section"}`);
      }
    }
  }
  assert.deepEqual(missing, [], `docs/commands.md is behind src/cli:\n${missing.join("\n")}`);
});

test("the exit-code table of docs/commands.md has a row for every command and every code a usage text names", async () => {
  const table = REFERENCE.slice(REFERENCE.indexOf("## Exit codes at a glance"));
  const rows = table.split("\n").filter((line) => line.startsWith("| `"));
  const problems: string[] = [];
  for (const command of await everyCommand()) {
    if (command.name === "help") continue; // prints usage only
    // A command may have several rows (run, run --reconcile-once): a code counts when any row has it.
    const commandRows = rows.filter((line) => new RegExp(`^\\| \`${command.name}(?![\\w-])`).test(line));
    if (commandRows.length === 0) {
      problems.push(`${command.name}: no row`);
      continue;
    }
    const codes = [...command.usage.matchAll(/(?:^|[\s;:,(])([0-3]) (?=[a-z-]{2,})/gm)].map((match) => Number(match[1]));
    for (const code of new Set(codes)) {
      const documented = commandRows.some((row) => {
        const cell = row.split("|")[2 + code]?.trim();
        return cell !== undefined && cell !== "" && cell !== "—";
      });
      if (!documented) problems.push(`${command.name}: exit ${code} in its usage, none in the table`);
    }
  }
  // run --reconcile-once's codes are in the usage of run.
  const once = rows.find((line) => line.startsWith("| `run --reconcile-once`"));
  assert.ok(once, "a row for run --reconcile-once");
  assert.notEqual(once.split("|")[5]!.trim(), "—", "exit 3 of --reconcile-once");
  assert.deepEqual(problems, [], problems.join("\n"));
});

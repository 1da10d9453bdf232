/**
 * The single executable carries a bundle per group of short commands
 * (src/platform/sea-bundle.ts), so that `validate`, `status` and `probe`
 * decode and deserialize only what they run. A static import of a command
 * in src/cli/cli.ts would quietly put every command back into every bundle:
 * these tests read the bundles scripts/build.ts made for this machine's
 * executable, and run each group's commands on the executable itself.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { hostTarget } from "../scripts/targets.ts";
import { COMMANDS } from "../src/cli/cli.ts";
import { bundleAsset, CODE_CACHE_COMMANDS, CODE_CACHE_NAMES, groupBundleCommands } from "../src/platform/sea-bundle.ts";
import { requireBinary, runEdgeplug } from "./support/agent-process.ts";

/** The command modules (src/cli/NAME.ts) a bundle holds, from the module comments esbuild writes. */
function commandModulesIn(bundleFile: URL): string[] {
  const bundle = fs.readFileSync(bundleFile, "latin1");
  const modules = [...bundle.matchAll(/^\/\/ src\/cli\/([a-z-]+)\.ts$/gm)].map((match) => match[1]!);
  return modules.filter((name) => name in COMMANDS && name !== "help").sort();
}

test("each group's bundle holds its own commands and version, and the whole bundle every command", () => {
  const dir = new URL(`../dist/build-${hostTarget().name}/`, import.meta.url);
  const every = Object.keys(COMMANDS).filter((name) => name !== "help").sort();
  assert.deepEqual(commandModulesIn(new URL(bundleAsset("base"), dir)), every);
  for (const group of CODE_CACHE_NAMES) {
    if (group === "base") continue;
    const expected = [...groupBundleCommands(group)].sort();
    assert.deepEqual(commandModulesIn(new URL(bundleAsset(group), dir)), expected, `the ${group} bundle`);
    const size = (name: string) => fs.statSync(new URL(name, dir)).size;
    assert.ok(size(bundleAsset(group)) < 0.7 * size(bundleAsset("base")), `the ${group} bundle leaves most of the whole bundle out`);
  }
});

test("every command of a group's bundle answers --help from the executable, and version says the code cache was taken", async () => {
  requireBinary();
  for (const group of CODE_CACHE_NAMES) {
    for (const command of CODE_CACHE_COMMANDS[group]) {
      const result = await runEdgeplug([command, "--help"]);
      assert.equal(result.code, 0, `${command} --help: ${result.stderr}`);
      assert.match(result.stdout, new RegExp(`^Usage: edgeplug ${command}\\b`), command);
      assert.equal(result.stderr, "", command);
    }
  }
  const verbose = await runEdgeplug(["version", "--verbose"]);
  assert.ok(verbose.stdout.split("\n").includes("code cache: on"), verbose.stdout);
});

/**
 * Issue 12: the executable says what it was built for and with. The runtime
 * it embeds is the one pinned in scripts/node-runtimes.json, which is also
 * the Node that npm scripts and tests run on (the node devDependency).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import packageJson from "../package.json" with { type: "json" };
import { requireBinary } from "./support/agent-process.ts";
import { tempDir } from "./support/temp-dir.ts";

const pins = JSON.parse(fs.readFileSync(fileURLToPath(new URL("../scripts/node-runtimes.json", import.meta.url)), "utf8")) as {
  version: string;
  targets: Record<string, { package: string }>;
};

test("the pinned runtime is the node devDependency's version, for every target", () => {
  assert.equal(packageJson.devDependencies.node, pins.version);
  assert.deepEqual(Object.keys(pins.targets).sort(), ["linux-arm64", "linux-x64"]);
});

test("env -i dist/edgeplug version --verbose names its target, the npm package of its Node and its code cache", async (t) => {
  const host = `${process.platform}-${process.arch}`;
  const { stdout } = await promisify(execFile)(requireBinary(), ["version", "--verbose"], { env: {}, cwd: tempDir(t) });
  const lines = stdout.trimEnd().split("\n");
  assert.match(lines[0]!, new RegExp(`^edgeplug ${packageJson.version.replaceAll(".", "\\.")} node v${pins.version.replaceAll(".", "\\.")} ${host} [0-9a-f]{4,40}$`));
  assert.ok(lines.includes(`target: ${host}`), stdout);
  assert.ok(lines.includes(`runtime package: ${pins.targets[host]!.package}@${pins.version}`), stdout);
  assert.ok(lines.includes("code cache: on"), stdout);
});

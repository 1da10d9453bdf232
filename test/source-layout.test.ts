/**
 * The repo stands alone: what users and contributors read, and what the tests
 * read, is in it. (Files are as long as their one role needs: the line caps
 * this file once held are gone, their job left to review.)
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** The design notes edgeplug was built from live outside the repo; users and contributors have only the repo. */
const OUTSIDE_DOCUMENTS = /\b(SPEC|ARCHITECTURE\.md|HELPERS\.md|kubelet-facts|fact sheet|runtime-notes|proto-facts|upstream-tests-and-issues|wire-vectors\.md)\b/;

test("no source, test or doc refers to a document outside the repo", () => {
  const texts = ["src", "test", "bench", "scripts", "docs", "examples", "config", "packaging", "proto"]
    .flatMap((dir) => textFiles(path.join(ROOT, dir)))
    .concat(path.join(ROOT, "README.md"))
    .filter((file) => file !== fileURLToPath(import.meta.url));
  assert.ok(texts.length > 100, `found only ${texts.length} files`);
  const found = texts.flatMap((file) => fs.readFileSync(file, "utf8").split("\n").flatMap((line, i) => (OUTSIDE_DOCUMENTS.test(line) ? [`${path.relative(ROOT, file)}:${i + 1}`] : [])));
  assert.deepEqual(found, [], "point at docs/, proto/ or test/fixtures, or say the fact");
});

function textFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : textFiles(full);
    return /\.(ts|md|ya?ml|proto|json|service|sh)$/.test(entry.name) ? [full] : [];
  });
}

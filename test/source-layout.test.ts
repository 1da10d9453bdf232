/**
 * The source stays readable by its file names: no hand-written file past
 * 300 lines (issue 8). Two files grew past it unnoticed before this test.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MAX_LINES = 300;

/** TypeScript files under `dir`, skipping generated code (any `gen` directory) and fixtures. */
function handWritten(dir: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== "gen" && entry.name !== "fixtures" && entry.name !== "node_modules") files.push(...handWritten(full));
    } else if (entry.name.endsWith(".ts")) files.push(full);
  }
  return files;
}

test(`no hand-written TypeScript file is longer than ${MAX_LINES} lines`, () => {
  const files = ["src", "test", "bench", "scripts"].flatMap((dir) => handWritten(path.join(ROOT, dir)));
  assert.ok(files.length > 100, `found only ${files.length} files: wrong root ${ROOT}?`);
  const tooLong = files
    .map((file) => ({ file: path.relative(ROOT, file), lines: fs.readFileSync(file, "utf8").split("\n").length - 1 }))
    .filter(({ lines }) => lines > MAX_LINES)
    .map(({ file, lines }) => `${file}: ${lines} lines`);
  assert.deepEqual(tooLong, [], "split these by role");
});

/**
 * Temp dirs for tests. Names stay short because the sockets tests put in
 * them must have paths under 108 bytes.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** What tempDir needs of a test: node:test's TestContext has it. */
export interface CleansUpAfter {
  after(fn: () => void): void;
}

/** A fresh directory under the system temp dir, named `prefix` + six random characters; the caller removes it. */
export function makeShortTempDir(prefix = "ep-"): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Removes `dir` and everything in it; no error when it is already gone. */
export function removeDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

/** A fresh short-named directory, removed with its contents after the test `t`. */
export function tempDir(t: CleansUpAfter, prefix?: string): string {
  const dir = makeShortTempDir(prefix);
  t.after(() => removeDir(dir));
  return dir;
}

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
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3, retryDelay: 20 });
}

/** Dirs whose removal after their test failed: a process was still writing in them. */
const leftOver = new Set<string>();
let removesLeftOverAtExit = false;

/**
 * Removes `dir` after its test without ever throwing. node:test runs a test's
 * after hooks first to last and skips the rest once one throws, and the dir is
 * usually registered before the processes that write in it: a throw here would
 * leave those processes running and the test file would never exit. A dir that
 * cannot be removed yet is removed again when the test process exits, by which
 * time every hook has stopped what it started.
 */
function removeAfterTest(dir: string): void {
  try {
    removeDir(dir);
  } catch {
    leftOver.add(dir);
    if (removesLeftOverAtExit) return;
    removesLeftOverAtExit = true;
    process.once("exit", () => {
      for (const dir of leftOver) {
        try {
          removeDir(dir);
        } catch (error) {
          process.stderr.write(`test cleanup: could not remove ${dir}: ${(error as Error).message}\n`);
        }
      }
    });
  }
}

/** A fresh short-named directory, removed with its contents after the test `t`. */
export function tempDir(t: CleansUpAfter, prefix?: string): string {
  const dir = makeShortTempDir(prefix);
  t.after(() => removeAfterTest(dir));
  return dir;
}

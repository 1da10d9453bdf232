/**
 * Entry of the single executable's CommonJS bundle (scripts/build.ts). A
 * CommonJS bundle rejects top-level await and sees an empty `import.meta`,
 * so this file uses neither: a `import.meta.main` guard would make the
 * executable silently do nothing. Inside the SEA, process.argv[1] repeats
 * the executable's path, so the arguments start at index 2 as in dev.
 */
import process from "node:process";
import { runAsProcess } from "./cli/entry.ts";

void runAsProcess(process.argv.slice(2));

/**
 * edgeplug's entry when run from source: `node src/main.ts ...` (Node 24
 * strips the types) or `deno run -A src/main.ts ...`. The single executable
 * starts from src/sea-main.ts instead.
 */
import process from "node:process";
import { runAsProcess } from "./cli/entry.ts";

await runAsProcess(process.argv.slice(2));

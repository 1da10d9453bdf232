/**
 * Checks src/'s imports against the layers of scripts/layers.ts and prints
 * what it found; exits 1 on a refused import or a folder-level cycle.
 * test/layers.test.ts runs the same check in `npm test`.
 *
 *   node scripts/check-layers.ts
 */
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { checkLayers, LAYERS, readImportGraph } from "./layers.ts";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const report = checkLayers(readImportGraph(root));
for (const line of report.violations) console.log(`refused: ${line}`);
for (const line of report.cycles) console.log(`folder cycle: ${line}`);
console.log(
  `layers: ${report.modules} modules, ${report.crossFolderImports} imports across ${report.folders} folders, ${LAYERS.length} layers; ` +
    `${report.violations.length} refused, ${report.cycles.length} folder-level cycles`,
);
process.exitCode = report.violations.length + report.cycles.length === 0 ? 0 : 1;

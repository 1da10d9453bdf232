/**
 * Generates what derives from the policy schema (src/policy/schema.ts):
 *   - src/policy/gen/policy-validator.ts: ajv's standalone code for the
 *     schema, so no command loads ajv or compiles the schema at start;
 *   - config/default.yaml: the embedded default policy with every default
 *     spelled out, each key commented with its schema description.
 * Both are committed (as src/gen is); `--check` writes nothing and fails
 * when either differs from what it would write (CI runs it). Called by
 * `npm run build`.
 */
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { defaultPolicyFile, defaultPolicySource, root, validatorFile, validatorSource } from "./policy-artifacts.ts";

const check = process.argv.includes("--check");
const stale: string[] = [];
/** Writes `text` to `file` (only when it differs), or in --check mode notes that it differs. */
function emit(file: string, text: string): void {
  const current = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined;
  if (current === text) return;
  if (check) {
    stale.push(file);
    return;
  }
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

emit(validatorFile, validatorSource());
emit(defaultPolicyFile, await defaultPolicySource());
for (const file of stale) {
  process.stderr.write(`${path.relative(root, file)} is not what scripts/generate-policy.ts generates: run it and commit\n`);
}
process.exitCode = stale.length > 0 ? 1 : 0;

/**
 * The layers of src/ (scripts/layers.ts): every import across folders is one
 * the rule table allows, and no folder-level cycle remains, on the import
 * graph Deno reads from the sources. `node scripts/check-layers.ts` prints
 * the same check.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { checkLayers, layerOf, LAYERS, readImportGraph } from "../scripts/layers.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

test("src/ keeps its layers: no import the rule table refuses, no folder-level cycle", () => {
  const graph = readImportGraph(ROOT);
  assert.ok(graph.modules.length > 100, `deno info found only ${graph.modules.length} modules`);
  const report = checkLayers(graph);
  assert.deepEqual(report.violations, [], "move the code to the layer it belongs to, or change the table with a reason");
  assert.deepEqual(report.cycles, []);
});

test("a wrong import is refused with its file, line, target and rule", () => {
  const graph = {
    modules: ["src/platform/fd-limit.ts", "src/api/limits.ts"],
    imports: [{ from: "src/platform/fd-limit.ts", to: "src/api/limits.ts", line: 17 }],
  };
  const [refusal, ...others] = checkLayers(graph).violations;
  assert.deepEqual(others, []);
  assert.match(refusal ?? "", /^src\/platform\/fd-limit\.ts:17 imports src\/api\/limits\.ts: rule "platform -> log" refuses api/);
});

test("a folder-level cycle is found even where the table would allow each import", () => {
  const permissive = [
    { name: "a", paths: ["src/a/"], mayImport: ["b"], why: "" },
    { name: "b", paths: ["src/b/"], mayImport: ["a"], why: "" },
  ];
  const graph = {
    modules: ["src/a/x.ts", "src/b/y.ts"],
    imports: [
      { from: "src/a/x.ts", to: "src/b/y.ts", line: 1 },
      { from: "src/b/y.ts", to: "src/a/x.ts", line: 1 },
    ],
  };
  const report = checkLayers(graph, permissive);
  assert.deepEqual(report.violations, []);
  assert.deepEqual(report.cycles, ["src/a -> src/b -> src/a"]);
});

test("a module outside every layer, and production code importing a test, are refused", () => {
  const graph = {
    modules: ["src/newfolder/thing.ts", "src/log/logger.ts"],
    imports: [{ from: "src/log/logger.ts", to: "src/log/logger.test.ts", line: 3 }],
  };
  assert.deepEqual(checkLayers(graph).violations, [
    "src/newfolder/thing.ts is in no layer (add its folder to the table in scripts/layers.ts)",
    "src/log/logger.ts:3 imports src/log/logger.test.ts: production code may not import a test",
  ]);
});

test("the table only looks down: a layer imports only layers listed before it", () => {
  const seen = new Set<string>();
  for (const layer of LAYERS) {
    for (const name of layer.mayImport) assert.ok(seen.has(name), `${layer.name} may import ${name}, which is not below it`);
    seen.add(layer.name);
  }
  assert.equal(layerOf(path.posix.join("src", "policy", "gen", "policy-validator.ts"))?.name, "gen");
  assert.equal(layerOf("src/devicemanager/checkpoint/checkpoint-store.ts")?.name, "checkpoint");
});

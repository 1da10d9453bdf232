/**
 * The layers of src/, as a rule table: which folder may import which. The
 * import graph is Deno's own (`deno info --json`, type-only imports
 * included), so what is checked is what the runtimes resolve, not a guess
 * from the text. Two checks: every import across folders is one the table
 * allows, and no folder imports, through any chain, a folder that imports
 * it (no folder-level cycle), whatever the table says.
 *
 * Tests (*.test.ts) are not in the layers: a unit test may wire its layer to
 * what sits above it (the reconciler's test reads records through the
 * status cache). Production code importing a test is refused.
 *
 * @example
 * ```ts
 * const graph = readImportGraph(root);
 * const { violations, cycles } = checkLayers(graph);
 * ```
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export interface Layer {
  /** The name rules use. */
  name: string;
  /** Paths from the repo root: a folder ends in "/" (its sub-folders included unless they are a layer of their own), else a file. */
  paths: readonly string[];
  /** The layers it may import, besides itself. */
  mayImport: readonly string[];
  /** Why it sits where it does: printed with a refused import. */
  why: string;
}

/** Bottom to top. A layer's `mayImport` names only layers listed before it. */
export const LAYERS: readonly Layer[] = [
  { name: "gen", paths: ["src/gen/", "src/policy/gen/"], mayImport: [], why: "generated code imports only its packages" },
  { name: "log", paths: ["src/log/"], mayImport: [], why: "everything logs, so the logger imports nothing of the project" },
  { name: "platform", paths: ["src/platform/", "package.json"], mayImport: ["log"], why: "where the runtimes differ: clock, paths, sockets, build info" },
  { name: "policy", paths: ["src/policy/"], mayImport: ["gen", "log", "platform"], why: "the policy's schema and types, read by every layer above" },
  { name: "rpc", paths: ["src/rpc/"], mayImport: ["gen", "log", "platform"], why: "Connect over unix sockets, client and server" },
  { name: "util", paths: ["src/util/"], mayImport: ["log", "platform"], why: "generic mechanisms: the keyed operation executor, the one backoff" },
  { name: "endpoints", paths: ["src/endpoints/"], mayImport: ["log", "platform", "policy"], why: "the endpoint rules every handler and the device manager share" },
  { name: "server", paths: ["src/server/"], mayImport: ["gen", "log", "platform", "policy", "rpc", "util"], why: "the listener layer below the API services and the device manager" },
  {
    name: "pluginmanager",
    paths: ["src/pluginmanager/"],
    mayImport: ["gen", "log", "platform", "policy", "rpc", "util"],
    why: "the kubelet's pluginmanager: it knows handlers only by their interface",
  },
  { name: "checkpoint", paths: ["src/devicemanager/checkpoint/"], mayImport: ["gen", "log", "platform", "util"], why: "the checkpoint file, below the device manager that drives it" },
  {
    name: "devicemanager",
    paths: ["src/devicemanager/"],
    mayImport: ["checkpoint", "endpoints", "gen", "log", "platform", "policy", "rpc", "server", "util"],
    why: "the kubelet's cm/devicemanager: it knows neither the plugin manager nor its handlers",
  },
  {
    name: "handlers",
    paths: ["src/handlers/"],
    mayImport: ["devicemanager", "endpoints", "gen", "log", "platform", "pluginmanager", "policy", "rpc", "util"],
    why: "one adapter per plugin type between the plugin manager and what serves that type",
  },
  { name: "liveness", paths: ["src/liveness/"], mayImport: ["log", "platform", "pluginmanager", "policy", "rpc", "util"], why: "dials registered plugins through the plugin manager's public surface" },
  {
    name: "api",
    paths: ["src/api/"],
    mayImport: ["checkpoint", "devicemanager", "gen", "handlers", "log", "platform", "pluginmanager", "policy", "rpc", "server", "util"],
    why: "the services the agent serves, over the listener layer",
  },
  { name: "fleet", paths: ["src/fleet/"], mayImport: ["api", "gen", "log", "platform", "policy", "util"], why: "publishes what the API says" },
  {
    name: "agent",
    paths: ["src/agent/"],
    mayImport: ["api", "checkpoint", "devicemanager", "endpoints", "fleet", "gen", "handlers", "liveness", "log", "platform", "pluginmanager", "policy", "rpc", "server", "util"],
    why: "the composition root",
  },
  {
    name: "cli",
    paths: ["src/cli/"],
    mayImport: ["agent", "api", "checkpoint", "devicemanager", "endpoints", "fleet", "gen", "handlers", "liveness", "log", "platform", "pluginmanager", "policy", "rpc", "server", "util"],
    why: "one file per command",
  },
  { name: "entry", paths: ["src/main.ts", "src/sea-main.ts", "src/sea-loader.ts"], mayImport: ["cli", "log", "platform"], why: "the process's entry points" },
];

/** One import: `from` imports `to` (both relative to the repo root) at `line` (1-based). */
export interface Import {
  from: string;
  to: string;
  line: number;
}

export interface LayerReport {
  /** One line per import the table refuses: file:line, the import, the rule. */
  violations: string[];
  /** One line per folder-level cycle: the folders, in order. */
  cycles: string[];
  /** Modules checked, and imports between different folders. */
  modules: number;
  crossFolderImports: number;
  folders: number;
}

/** The layer a repo-relative path belongs to: the most specific path that holds it. */
export function layerOf(file: string, layers: readonly Layer[] = LAYERS): Layer | undefined {
  let best: { layer: Layer; length: number } | undefined;
  for (const layer of layers) {
    for (const p of layer.paths) {
      const holds = p.endsWith("/") ? file.startsWith(p) : file === p;
      if (holds && (!best || p.length > best.length)) best = { layer, length: p.length };
    }
  }
  return best?.layer;
}

const isTest = (file: string) => file.endsWith(".test.ts");

/** Checks the modules under src/ and their imports against `layers`. */
export function checkLayers({ modules, imports }: ImportGraph, layers: readonly Layer[] = LAYERS): LayerReport {
  const violations: string[] = [];
  const folderEdges = new Map<string, Set<string>>();
  let crossFolderImports = 0;
  for (const module of modules) {
    if (!isTest(module) && !layerOf(module, layers)) violations.push(`${module} is in no layer (add its folder to the table in scripts/layers.ts)`);
  }
  for (const { from, to, line } of imports) {
    if (isTest(from)) continue;
    const fromLayer = layerOf(from, layers);
    const toLayer = layerOf(to, layers);
    const where = `${from}:${line} imports ${to}`;
    if (!fromLayer) continue;
    if (isTest(to)) violations.push(`${where}: production code may not import a test`);
    else if (!toLayer) violations.push(`${where}: ${to} is in no layer (${fromLayer.name} may import ${describe(fromLayer)})`);
    else if (toLayer !== fromLayer && !fromLayer.mayImport.includes(toLayer.name)) {
      violations.push(
        `${where}: rule "${fromLayer.name} -> ${fromLayer.mayImport.join(", ") || "nothing"}" refuses ${toLayer.name} (${fromLayer.name}: ${fromLayer.why}; ${toLayer.name}: ${toLayer.why})`,
      );
    }
    const a = path.posix.dirname(from);
    const b = path.posix.dirname(to);
    if (a === b) continue;
    crossFolderImports++;
    let edges = folderEdges.get(a);
    if (!edges) folderEdges.set(a, edges = new Set());
    edges.add(b);
  }
  const folders = new Set([...folderEdges.keys(), ...[...folderEdges.values()].flatMap((s) => [...s])]);
  return { violations, cycles: folderCycles(folderEdges), modules: modules.filter((m) => !isTest(m)).length, crossFolderImports, folders: folders.size };
}

function describe(layer: Layer): string {
  return layer.mayImport.length === 0 ? "nothing of the project" : layer.mayImport.join(", ");
}

/** The strongly connected groups of more than one folder (Tarjan), each as "a -> b -> ... -> a" along real edges. */
function folderCycles(edges: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  let index = 0;
  const indexOf = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const groups: string[][] = [];
  const visit = (v: string): void => {
    indexOf.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!indexOf.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indexOf.get(w)!));
    }
    if (low.get(v) === indexOf.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) groups.push(group);
    }
  };
  for (const v of [...edges.keys()].sort()) if (!indexOf.has(v)) visit(v);
  return groups.map((group) => {
    const members = new Set(group);
    const start = group.sort()[0]!;
    // A shortest way back to start, through members only.
    const previous = new Map<string, string>();
    const queue = [start];
    for (let i = 0; i < queue.length; i++) {
      const v = queue[i]!;
      for (const w of edges.get(v) ?? []) {
        if (!members.has(w)) continue;
        if (w === start) {
          const loop = [v];
          while (loop[0] !== start) loop.unshift(previous.get(loop[0]!)!);
          return [...loop, start].join(" -> ");
        }
        if (!previous.has(w)) {
          previous.set(w, v);
          queue.push(w);
        }
      }
    }
    return group.join(", ");
  });
}

/** Every import of the non-generated modules under src/, read by `deno info --json` from the repo at `root`. */
export function readImportGraph(root: string): ImportGraph {
  const files = fs
    .readdirSync(path.join(root, "src"), { recursive: true, encoding: "utf8" })
    .map((f) => path.posix.join("src", f.split(path.sep).join("/")))
    .filter((f) => f.endsWith(".ts") && !f.startsWith("src/gen/"))
    .sort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "edgeplug-layers-"));
  try {
    const entry = path.join(dir, "all.ts");
    fs.writeFileSync(entry, files.map((f) => `import ${JSON.stringify(pathToFileURL(path.join(root, f)).href)};\n`).join(""));
    const deno = path.join(root, "node_modules", ".bin", "deno");
    // Run from the repo so that deno.json (node_modules for npm packages) applies.
    const json = execFileSync(deno, ["info", "--json", entry], { cwd: root, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, timeout: 60_000 });
    return graphOf(JSON.parse(json) as DenoInfo, root, pathToFileURL(entry).href);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** What `deno info --json` says of the modules under src/: each module, and its imports of project files. */
export interface ImportGraph {
  modules: string[];
  imports: Import[];
}

interface DenoResolved {
  specifier?: string;
  span?: { start: { line: number } };
}
interface DenoInfo {
  modules: { specifier: string; dependencies?: { specifier: string; code?: DenoResolved; type?: DenoResolved }[] }[];
}

function graphOf(info: DenoInfo, root: string, entry: string): ImportGraph {
  const modules: string[] = [];
  const imports: Import[] = [];
  const relative = (url: string) => path.relative(root, fileURLToPath(url)).split(path.sep).join("/");
  for (const module of info.modules) {
    if (module.specifier === entry || !module.specifier.startsWith("file:")) continue;
    const from = relative(module.specifier);
    if (!from.startsWith("src/") || from.startsWith("src/gen/")) continue;
    modules.push(from);
    for (const dependency of module.dependencies ?? []) {
      // Packages (npm, node:) are no layer's: only the project's own files are.
      if (!/^\.{1,2}\//.test(dependency.specifier)) continue;
      // An import of values and types appears under both keys: counted once.
      const resolved = dependency.code?.specifier ? dependency.code : dependency.type;
      if (!resolved?.specifier?.startsWith("file:")) continue;
      imports.push({ from, to: relative(resolved.specifier), line: (resolved.span?.start.line ?? 0) + 1 });
    }
  }
  return { modules, imports };
}

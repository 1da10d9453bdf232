/**
 * The policy fuzzer's inputs, from a fixed seed so that a failure names an
 * input that reproduces: policies of config/ and of the bad fixtures
 * mutated (fragments that stress YAML and the loader inserted, ranges
 * deleted or duplicated, characters replaced, lines of other policies
 * spliced, values aliased), and random policy-shaped documents.
 * src/policy/fuzz.test.ts checks the loader's verdict on each; bench/policy.ts
 * times them.
 *
 * @example
 * ```ts
 * const fuzzer = policyFuzzer();
 * for (const input of fuzzer.mutatedInputs(100)) parsePolicy(input.text, "fuzz.yaml");
 * ```
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";

/** The seed of the fuzz test's inputs. */
export const POLICY_FUZZ_SEED = 0x5eed_7007;

export interface FuzzInput {
  label: string;
  text: string;
}

export interface PolicyFuzzer {
  /** `count` mutated policies, half from the valid policies in config/, half from every policy (the bad fixtures too). */
  mutatedInputs(count: number): Generator<FuzzInput>;
  /** `count` generated policy-shaped documents: mostly plausible values, sometimes the wrong type, a fifth mutated. */
  generatedInputs(count: number): Generator<FuzzInput>;
  /** `text` with one to three random mutations. */
  mutate(text: string): string;
}

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const validCorpus = yamlFiles(path.join(repoRoot, "config"));
const corpus = [...validCorpus, ...yamlFiles(path.join(repoRoot, "test", "fixtures", "policies", "bad"))];

function yamlFiles(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith(".yaml"))
    .sort()
    .map((name) => fs.readFileSync(path.join(dir, name), "utf8"));
}

/** mulberry32: small, fast and deterministic. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fragments that stress YAML and the loader: aliases, anchors, tags, indicators, odd characters. */
const FRAGMENTS = [
  "&a ",
  "*a",
  "&b [1, 2]",
  "*b",
  "*missing",
  "<<: *a",
  "!!binary aGk=",
  "!!str ",
  "!custom ",
  "!!map {}",
  "? [x]\n: y",
  "[",
  "]",
  "{",
  "}",
  ": ",
  "- ",
  "\t",
  "\n",
  "\r\n",
  "#",
  "'",
  '"',
  "|\n  text",
  ">-\n  text",
  "---\n",
  "...\n",
  "%YAML 1.2\n",
  "\u0000",
  "\u001b[31m",
  "\ufeff",
  "é",
  "🙂",
  "~",
  "null",
  "true",
  "0x1F",
  "1e999",
  "-1",
  "1.5",
  "596h31m23.648s",
  "0s",
  "1ns",
  "999999999999h",
  "__proto__: {}",
  "constructor: 1",
  "/",
  "//x",
  "*",
  "0o17",
  ".inf",
];

/** A fuzzer whose inputs follow from `seed` alone: the same seed, the same inputs in the same order. */
export function policyFuzzer(seed = POLICY_FUZZ_SEED): PolicyFuzzer {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const int = (below: number) => Math.floor(next() * below);

  function mutate(text: string): string {
    let out = text;
    const steps = 1 + int(3);
    for (let step = 0; step < steps; step++) {
      const at = int(out.length + 1);
      switch (int(6)) {
        case 0: // insert a fragment
          out = out.slice(0, at) + pick(FRAGMENTS) + out.slice(at);
          break;
        case 1: // delete a range
          out = out.slice(0, at) + out.slice(at + int(20));
          break;
        case 2: // duplicate a range
          out = out.slice(0, at) + out.slice(at, at + int(60)) + out.slice(at);
          break;
        case 3: // replace one character
          out = out.slice(0, at) + String.fromCharCode(int(128)) + out.slice(at + 1);
          break;
        case 4: {
          // splice a line of another policy
          const lines = pick(corpus).split("\n");
          out = out.slice(0, at) + pick(lines) + "\n" + out.slice(at);
          break;
        }
        default: // anchor a value and alias it further down
          out = out.replace(/: (\S+)/, ": &x $1") + "\nextra: *x\n";
      }
    }
    return out;
  }

  /** A random policy-shaped document: mostly plausible values, sometimes the wrong type. */
  function generated(): string {
    const value = (good: () => unknown): unknown => next() < 0.95 ? good() : pick([null, 7, -1, "text", [], {}, true, ["a"], { k: 1 }, 1.5, ""]);
    const duration = () => pick(["1s", "500ms", "2m2s", "0", "0s", "1h", "1.5s", "250µs", "596h31m23.647s", "600h"]);
    const maybe = (entries: [string, () => unknown][]) => Object.fromEntries(entries.filter(() => next() < 0.4).map(([key, make]) => [key, value(make)]));
    const policy: Record<string, unknown> = {
      version: next() < 0.95 ? 1 : pick([2, "1", null]),
      watch: next() < 0.95 ? [{ path: pick(["/a", "/b/"]) }] : value(() => []),
    };
    Object.assign(
      policy,
      maybe([
        ["nodeName", () => pick(["edge-01", "", "Node"])],
        [
          "watch",
          () =>
            Array.from(
              { length: int(3) },
              () => maybe([["path", () => pick(["/a", "/b/", "rel", "/a//"])], ["recursive", () => next() < 0.5], ["types", () => [pick(["CSIPlugin", "x.io/T", "DevicePlugin", ""])]]]),
            ),
        ],
        [
          "handlers",
          () =>
            maybe([["DevicePlugin", () => maybe([["allow", () => ["*"]], ["kind", () => "generic"]])], [
              "x.io/T",
              () => maybe([["kind", () => pick(["generic", "builtin"])], ["versions", () => [pick(["v1", ""])]]]),
            ]]),
        ],
        [
          "reconcile",
          () =>
            maybe([["resync", duration], ["backoff", () => maybe([["initial", duration], ["max", duration]])], [
              "timeouts",
              () => maybe([["dial", duration], ["getInfo", duration], ["notify", duration]]),
            ]]),
        ],
        ["security", () => maybe([["socketOwners", () => [int(3), pick([0, -1, 4294967296])]], ["maxPlugins", () => int(3)]])],
        ["api", () => maybe([["socket", () => pick(["/run/x.sock", null, "x"])], ["metrics", () => pick(["127.0.0.1:9478", ":0", "[::1]:70000", null])]])],
        ["log", () => maybe([["level", () => pick(["info", "debug", "loud"])], ["format", () => pick(["json", "text", "xml"])]])],
      ]),
    );
    if (next() < 0.1) policy[pick(["unknown", "wacth", "Version"])] = 1;
    const text = stringify(policy, { aliasDuplicateObjects: next() < 0.5 });
    return next() < 0.2 ? mutate(text) : text;
  }

  return {
    *mutatedInputs(count) {
      for (let index = 0; index < count; index++) {
        const original = index % 2 === 0 ? validCorpus[(index / 2) % validCorpus.length]! : corpus[index % corpus.length]!;
        yield { label: `mutated input ${index}`, text: mutate(original) };
      }
    },
    *generatedInputs(count) {
      for (let index = 0; index < count; index++) yield { label: `generated input ${index}`, text: generated() };
    },
    mutate,
  };
}

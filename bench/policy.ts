/**
 * The policy loader on hostile input under the size cap (issue 7, defect
 * 7). For each large or deep policy of test/support/large-policies.ts:
 *   - cpuMs: CPU time of a whole load (`parsePolicy`, as `validate` does);
 *   - scanCpuMs: CPU time of the YAML scan, the part a SIGHUP reload runs in
 *     slices of a few ms (`parsePolicyInSlices`);
 *   - unslicedCpuMs: the rest, which runs in one piece: the longest the
 *     loader itself holds the event loop;
 *   - longestStallMs: the longest gap of a 1 ms timer during a sliced load,
 *     wall clock, so it also counts the time the machine ran other work.
 * Each input runs BENCH_POLICY_RUNS times (default 5); medians are reported.
 * Then `fuzzed`: the CPU time of a whole load of each input of the fuzz test
 * (src/policy/fuzz.test.ts: the same seed, the same inputs: mutated and
 * generated policies, and the inputs at the bounds mutated), once each, with
 * the slowest named. Target: every input, large or fuzzed, decided within
 * TARGET_INPUT_CPU_MS of CPU (`meetsTarget`).
 */
import process from "node:process";
import { LineCounter } from "yaml";
import { inputsAtTheBounds, type LargeInput, largeInputs } from "../test/support/large-policies.ts";
import { type FuzzInput, policyFuzzer } from "../test/support/policy-fuzz.ts";
import { MAX_POLICY_BYTES, parsePolicy, parsePolicyInSlices } from "../src/policy/load.ts";
import { inSlicesSync, scanYaml } from "../src/policy/yaml-scan.ts";

const RUNS = Math.max(1, Number(process.env.BENCH_POLICY_RUNS) || 5);
/** The most CPU one policy may take to be decided, valid or not (the largest, at the size cap, take about 200 ms). */
const TARGET_INPUT_CPU_MS = 500;
/** As many as the fuzz test decides. */
const FUZZ_MUTATED = 2000;
const FUZZ_GENERATED = 600;

function cpuMsOf(work: () => void): number {
  const started = process.cpuUsage();
  work();
  const used = process.cpuUsage(started);
  return (used.user + used.system) / 1000;
}

function attempt(work: () => void): unknown {
  try {
    work();
    return undefined;
  } catch (error) {
    return error;
  }
}

async function longestStallOf(load: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let longest = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  await load().catch(() => undefined);
  longest = Math.max(longest, performance.now() - last);
  clearInterval(ticker);
  return longest;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.floor(sorted.length / 2)]! * 10) / 10;
};

async function measure(input: LargeInput) {
  const cpu: number[] = [];
  const scan: number[] = [];
  const stalls: number[] = [];
  let outcome: unknown;
  for (let run = 0; run < RUNS; run++) {
    cpu.push(cpuMsOf(() => (outcome = attempt(() => parsePolicy(input.text, "bench.yaml")))));
    scan.push(cpuMsOf(() => inSlicesSync(scanYaml(input.text, new LineCounter()))));
    stalls.push(await longestStallOf(() => parsePolicyInSlices(input.text, "bench.yaml")));
  }
  const first = outcome === undefined ? "valid" : String((outcome as Error).message).split("\n")[0]!;
  return {
    input: input.name,
    kib: Math.round(input.text.length / 1024),
    outcome: (outcome as Error | undefined)?.name === "PolicyError" || outcome === undefined ? first.replace(/^bench\.yaml:(\d+:\d+: )?/, "") : `THROW ${first}`,
    cpuMs: median(cpu),
    scanCpuMs: median(scan),
    unslicedCpuMs: Math.max(0, Math.round((median(cpu) - median(scan)) * 10) / 10),
    longestStallMs: median(stalls),
  };
}

/** Every input of the fuzz test, in its order, each loaded once: the CPU time of each, the slowest named. */
function measureFuzzed() {
  const fuzzer = policyFuzzer();
  const inputs: Iterable<FuzzInput>[] = [
    fuzzer.mutatedInputs(FUZZ_MUTATED),
    fuzzer.generatedInputs(FUZZ_GENERATED),
    inputsAtTheBounds().map((input, index) => ({ label: `mutated ${input.name} (${index})`, text: fuzzer.mutate(input.text) })),
  ];
  const times: number[] = [];
  let slowest = { input: "", cpuMs: -1 };
  for (const source of inputs) {
    for (const input of source) {
      const cpuMs = cpuMsOf(() => attempt(() => parsePolicy(input.text, "fuzz.yaml")));
      times.push(cpuMs);
      if (cpuMs > slowest.cpuMs) slowest = { input: input.label, cpuMs: Math.round(cpuMs * 10) / 10 };
    }
  }
  const sorted = times.sort((a, b) => a - b);
  const at = (fraction: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]! * 100) / 100;
  return { inputs: sorted.length, p50CpuMs: at(0.5), p99CpuMs: at(0.99), slowest };
}

/** Runs every input; `worst` names the input with the highest value of each measure. */
export async function run(): Promise<object> {
  const inputs = [...largeInputs({ bytes: MAX_POLICY_BYTES - 64 }), ...inputsAtTheBounds()];
  const results: Awaited<ReturnType<typeof measure>>[] = [];
  for (const input of inputs) {
    process.stderr.write(`bench policy: ${input.name}\n`);
    results.push(await measure(input));
  }
  const worst = Object.fromEntries(
    (["cpuMs", "unslicedCpuMs", "longestStallMs"] as const).map((key) => {
      const top = results.reduce((a, b) => (b[key] > a[key] ? b : a));
      return [key, { input: top.input, ms: top[key] }];
    }),
  );
  process.stderr.write("bench policy: the fuzz test's inputs\n");
  const fuzzed = measureFuzzed();
  const meetsTarget = worst.cpuMs!.ms <= TARGET_INPUT_CPU_MS && fuzzed.slowest.cpuMs <= TARGET_INPUT_CPU_MS;
  return { runsPerInput: RUNS, targetInputCpuMs: TARGET_INPUT_CPU_MS, meetsTarget, worst, results, fuzzed };
}

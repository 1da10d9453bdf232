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
 */
import process from "node:process";
import { LineCounter } from "yaml";
import { inputsAtTheBounds, type LargeInput, largeInputs } from "../test/support/large-policies.ts";
import { MAX_POLICY_BYTES, parsePolicy, parsePolicyInSlices } from "../src/policy/load.ts";
import { inSlicesSync, scanYaml } from "../src/policy/yaml-scan.ts";

const RUNS = Math.max(1, Number(process.env.BENCH_POLICY_RUNS) || 5);

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
  return { runsPerInput: RUNS, worst, results };
}

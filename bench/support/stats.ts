/** Summaries of latency samples for benchmark reports. */

export interface LatencySummary {
  samples: number;
  minMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
}

/** The nearest-rank percentile of an ascending list (`fraction` in 0..1). */
export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) throw new Error("percentile of no samples");
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1))]!;
}

/** Rounds milliseconds to 0.01 ms: finer digits are noise across processes. */
export function roundMs(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** Min, p50, p90, p99, max and mean of `samples` (milliseconds), rounded to 0.01 ms. */
export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    samples: sorted.length,
    minMs: roundMs(sorted[0]!),
    p50Ms: roundMs(percentile(sorted, 0.5)),
    p90Ms: roundMs(percentile(sorted, 0.9)),
    p99Ms: roundMs(percentile(sorted, 0.99)),
    maxMs: roundMs(sorted[sorted.length - 1]!),
    meanMs: roundMs(sorted.reduce((sum, ms) => sum + ms, 0) / sorted.length),
  };
}

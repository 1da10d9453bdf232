/**
 * The plugin watcher's cost per filesystem event, against how much it knows
 * (src/pluginmanager/watcher.ts: "an event costs what it touched, not what
 * is known"). For each number of known sockets (0 and BENCH_WATCHER_KNOWN,
 * default 4,000, spread over 40 sub-directories of one recursive root),
 * BENCH_WATCHER_ARRIVALS sockets (default 500) appear in one more directory
 * and then go; reported per event: this process's CPU, and the wall time
 * until the desired state holds them all (and none).
 *
 * The watcher runs in this process, with its real fs.watch. The sockets are
 * hard links to one listening socket: a link is a socket file to lstat, made
 * without a descriptor or a listen() each, so that the CPU measured is the
 * watcher's (the links' own system calls are timed apart and subtracted).
 *
 * Env: BENCH_WATCHER_BASELINE (the root of another checkout of edgeplug,
 * e.g. a `git worktree` of an older commit): its watcher and desired state
 * run the same trials, alternating with this tree's, and the ratios
 * current / baseline are reported. BENCH_WATCHER_TRIALS (default 5).
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import process from "node:process";
import { shortTempDir } from "../test/support/agent-process.ts";
import { createLogger } from "../src/log/logger.ts";
import { roundMs } from "./support/stats.ts";

const KNOWN = Math.max(100, Number(process.env.BENCH_WATCHER_KNOWN) || 4000);
const ARRIVALS = Math.max(50, Number(process.env.BENCH_WATCHER_ARRIVALS) || 500);
const TRIALS = Math.max(3, Number(process.env.BENCH_WATCHER_TRIALS) || 5);
const KNOWN_DIRECTORIES = 40;
const SETTLE_TIMEOUT_MS = 30_000;
const BASELINE = process.env.BENCH_WATCHER_BASELINE;

/** The parts of a watcher and a desired state the bench drives; both trees have them. */
interface DesiredState {
  readonly size?: number;
  paths(): string[];
  subscribe(listener: () => void): () => void;
}
interface Watcher {
  start(): void;
  stop(): void;
}
interface Subject {
  label: "current" | "baseline";
  makeDesiredState(): DesiredState;
  makeWatcher(options: object): Watcher;
}

async function subjectFrom(label: Subject["label"], root: string): Promise<Subject> {
  const watcherModule = await import(path.join(root, "src/pluginmanager/watcher.ts"));
  const stateModule = await import(path.join(root, "src/pluginmanager/state-of-world.ts"));
  return {
    label,
    makeDesiredState: () => new stateModule.DesiredStateOfWorld(),
    makeWatcher: (options) => new watcherModule.PluginWatcher(options),
  };
}

function cpuMs(): number {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
}

function desiredCount(dsw: DesiredState): number {
  return dsw.size ?? dsw.paths().length;
}

/** Resolves once `dsw` holds `count` sockets, checked after each of its changes. */
function untilCount(dsw: DesiredState, count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (desiredCount(dsw) !== count) return;
      done();
      resolve();
    };
    const unsubscribe = dsw.subscribe(check);
    const timer = setTimeout(() => {
      done();
      reject(new Error(`the desired state held ${desiredCount(dsw)} sockets, not ${count}, after ${SETTLE_TIMEOUT_MS} ms`));
    }, SETTLE_TIMEOUT_MS);
    const done = () => {
      unsubscribe();
      clearTimeout(timer);
    };
    check();
  });
}

/** One arrival and departure of ARRIVALS sockets under a watcher that knows `known` sockets. */
async function trial(subject: Subject, workDir: string, listening: string, known: number) {
  const root = fs.mkdtempSync(path.join(workDir, "root-"));
  for (let dir = 0; dir < KNOWN_DIRECTORIES; dir++) fs.mkdirSync(path.join(root, `known-${dir}`));
  for (let i = 0; i < known; i++) fs.linkSync(listening, path.join(root, `known-${i % KNOWN_DIRECTORIES}`, `plugin-${i}.sock`));
  const arrivals = path.join(root, "arrivals");
  fs.mkdirSync(arrivals);
  const dsw = subject.makeDesiredState();
  const watcher = subject.makeWatcher({
    dirs: [{ path: root, recursive: true, types: null }],
    dsw,
    log: createLogger({ level: "error", write: () => {} }),
    limits: { sockets: () => Infinity },
  });
  try {
    watcher.start();
    await untilCount(dsw, known);
    const names = Array.from({ length: ARRIVALS }, (_, i) => path.join(arrivals, `new-${i}.sock`));
    const phase = async (change: (name: string) => void, expected: number) => {
      const wallStart = performance.now();
      const cpuStart = cpuMs();
      // Synchronous: no event is handled until every change is made, so this is the changes' own cost.
      for (const name of names) change(name);
      const changesCpu = cpuMs() - cpuStart;
      await untilCount(dsw, expected);
      return { cpuPerEventMs: (cpuMs() - cpuStart - changesCpu) / ARRIVALS, wallMs: performance.now() - wallStart };
    };
    const arrived = await phase((name) => fs.linkSync(listening, name), known + ARRIVALS);
    const departed = await phase((name) => fs.unlinkSync(name), known);
    return { arrived, departed };
  } finally {
    watcher.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const round3 = (ms: number) => Math.round(ms * 1000) / 1000;

export async function run(): Promise<object> {
  const subjects = [await subjectFrom("current", path.resolve(import.meta.dirname, ".."))];
  if (BASELINE) subjects.push(await subjectFrom("baseline", path.resolve(BASELINE)));
  const { dir: workDir, cleanup } = shortTempDir("bench-watcher-");
  const listening = path.join(workDir, "listening.sock");
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(listening, resolve));
  type Samples = { arrivedCpu: number[]; departedCpu: number[]; arrivedWall: number[]; departedWall: number[] };
  const samples = new Map<string, Samples>();
  try {
    for (const known of [0, KNOWN]) {
      for (let round = 0; round < TRIALS; round++) {
        // Alternating, the order swapped each round, so that both meet the same load.
        const order = round % 2 === 0 ? subjects : [...subjects].reverse();
        for (const subject of order) {
          process.stderr.write(`bench watcher: ${subject.label}, ${known} known, trial ${round + 1}/${TRIALS}\n`);
          const { arrived, departed } = await trial(subject, workDir, listening, known);
          const key = `${subject.label}:${known}`;
          const entry = samples.get(key) ?? { arrivedCpu: [], departedCpu: [], arrivedWall: [], departedWall: [] };
          entry.arrivedCpu.push(arrived.cpuPerEventMs);
          entry.departedCpu.push(departed.cpuPerEventMs);
          entry.arrivedWall.push(arrived.wallMs);
          entry.departedWall.push(departed.wallMs);
          samples.set(key, entry);
        }
      }
    }
  } finally {
    server.close();
    cleanup();
  }
  const summary = (entry: Samples) => ({
    cpuPerArrivalMs: round3(median(entry.arrivedCpu)),
    cpuPerDepartureMs: round3(median(entry.departedCpu)),
    allArrivedWallMs: roundMs(median(entry.arrivedWall)),
    allDepartedWallMs: roundMs(median(entry.departedWall)),
  });
  const results: Record<string, object> = {};
  for (const subject of subjects) {
    const quiet = summary(samples.get(`${subject.label}:0`)!);
    const loaded = summary(samples.get(`${subject.label}:${KNOWN}`)!);
    results[subject.label] = {
      withNoKnownSockets: quiet,
      [`with${KNOWN}KnownSockets`]: loaded,
      cpuPerArrivalRatioKnownToNone: Math.round((loaded.cpuPerArrivalMs / quiet.cpuPerArrivalMs) * 100) / 100,
    };
  }
  if (BASELINE) {
    const current = summary(samples.get(`current:${KNOWN}`)!);
    const baseline = summary(samples.get(`baseline:${KNOWN}`)!);
    results[`ratiosCurrentToBaselineWith${KNOWN}Known`] = {
      cpuPerArrival: Math.round((current.cpuPerArrivalMs / baseline.cpuPerArrivalMs) * 100) / 100,
      cpuPerDeparture: Math.round((current.cpuPerDepartureMs / baseline.cpuPerDepartureMs) * 100) / 100,
      allArrivedWall: Math.round((current.allArrivedWallMs / baseline.allArrivedWallMs) * 100) / 100,
    };
  }
  return { knownSockets: KNOWN, arrivals: ARRIVALS, trials: TRIALS, ...(BASELINE ? { baseline: BASELINE } : {}), results };
}

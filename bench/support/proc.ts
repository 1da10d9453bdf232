/** What Linux's /proc says about another process's CPU time and memory. */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 on every Linux seen). */
export function clockTicksPerSecond(): number {
  const answer = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim());
  return Number.isInteger(answer) && answer > 0 ? answer : 100;
}

/** utime + stime of every thread of `pid` so far, in clock ticks (/proc/PID/stat fields 14 and 15). */
export function cpuTicks(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name (field 2) may hold spaces and parentheses: count fields after its last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state), so field N is fields[N - 3].
  return Number(fields[14 - 3]) + Number(fields[15 - 3]);
}

/**
 * On-CPU time of every thread of `pid` so far, in nanoseconds (the first
 * field of /proc/PID/task/TID/schedstat): an idle agent runs for a few
 * milliseconds a minute, under the 10 ms resolution of {@link cpuTicks}.
 * A thread that has exited no longer counts; neither agent's threads come and go when idle.
 */
export function cpuNanoseconds(pid: number): number {
  return eachTask(pid, (task) => Number(fs.readFileSync(`${task}/schedstat`, "utf8").split(" ")[0]));
}

/** Context switches of every thread of `pid` so far (voluntary and not): each is a wakeup or a preemption. */
export function contextSwitches(pid: number): number {
  return eachTask(pid, (task) => {
    const status = fs.readFileSync(`${task}/status`, "utf8");
    return Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? 0) + Number(/^nonvoluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? 0);
  });
}

function eachTask(pid: number, read: (task: string) => number): number {
  let sum = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      sum += read(`/proc/${pid}/task/${tid}`);
    } catch {
      // The thread exited between the listing and the read.
    }
  }
  return sum;
}

/** Resident set size of `pid` in KiB (VmRSS of /proc/PID/status). */
export function residentKiB(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]);
}

/** Resident memory of `pid` in KiB, split as /proc/PID/status splits it. */
export interface ResidentMemory {
  rssKiB: number;
  /** Private memory: the JS heap, malloc, stacks. */
  anonKiB: number;
  /** Pages of the executable and libraries: clean, shared, reclaimable under pressure. */
  fileKiB: number;
}

export function residentMemory(pid: number): ResidentMemory {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => {
    const match = new RegExp(`^${name}:\\s+(\\d+) kB$`, "m").exec(status);
    if (!match) throw new Error(`no ${name} in /proc/${pid}/status`);
    return Number(match[1]);
  };
  return { rssKiB: field("VmRSS"), anonKiB: field("RssAnon"), fileKiB: field("RssFile") };
}

/** How the kernel has mapped an executable's pages into a process, in 64 KiB blocks. */
export interface ExecutablePageBlocks {
  residentKiB: number;
  /** 64 KiB-aligned blocks of the executable's mappings with at least one page resident. */
  blocksTouched: number;
  /** Of those, blocks with all 16 pages resident: the kernel maps file pages around a fault (fault-around, 64 KiB by default), so one touched page brings its neighbours into RSS. */
  blocksFullyResident: number;
}

const PAGE = 4096;
const BLOCK = 64 * 1024;

/**
 * Reads /proc/PID/pagemap (the "present" bit, which needs no privilege) over
 * the mappings of `executable` in `pid`; null where /proc has no pagemap.
 */
export function executablePageBlocks(pid: number, executable: string): ExecutablePageBlocks | null {
  const realExecutable = fs.realpathSync(executable);
  const ranges = fs
    .readFileSync(`/proc/${pid}/maps`, "utf8")
    .split("\n")
    .map((line) => line.split(/\s+/))
    .filter((fields) => fields[5] === realExecutable)
    .map((fields) => fields[0]!.split("-").map((hex) => Number.parseInt(hex, 16)) as [number, number]);
  let pagemap: number;
  try {
    pagemap = fs.openSync(`/proc/${pid}/pagemap`, "r");
  } catch {
    return null;
  }
  try {
    const pagesPerBlock = new Map<number, number>();
    let residentPages = 0;
    for (const [start, end] of ranges) {
      const pages = (end - start) / PAGE;
      const entries = Buffer.alloc(pages * 8);
      fs.readSync(pagemap, entries, 0, entries.length, (start / PAGE) * 8);
      for (let page = 0; page < pages; page++) {
        if ((entries.readBigUInt64LE(page * 8) >> 63n) === 0n) continue;
        residentPages++;
        const block = Math.floor((start + page * PAGE) / BLOCK);
        pagesPerBlock.set(block, (pagesPerBlock.get(block) ?? 0) + 1);
      }
    }
    let fullBlocks = 0;
    for (const count of pagesPerBlock.values()) if (count === BLOCK / PAGE) fullBlocks++;
    return { residentKiB: (residentPages * PAGE) / 1024, blocksTouched: pagesPerBlock.size, blocksFullyResident: fullBlocks };
  } finally {
    fs.closeSync(pagemap);
  }
}

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

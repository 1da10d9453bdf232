/**
 * Issue 12: release tarballs (scripts/tar.ts) come out byte-identical for the
 * same inputs, and GNU tar, as a node's administrator runs it, lists and
 * unpacks them with owner 0:0, the given modes and the one fixed mtime.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { readTar, type TarInput, writeTarGz } from "../scripts/tar.ts";
import { tempDir } from "./support/temp-dir.ts";

const MTIME = 1_796_000_000;

function entries(executable: Buffer): TarInput[] {
  return [
    { name: "edgeplug-1.2.3-linux-arm64", type: "directory", mode: 0o755 },
    { name: "edgeplug-1.2.3-linux-arm64/INSTALL", type: "file", mode: 0o644, data: Buffer.from("install me\n") },
    { name: "edgeplug-1.2.3-linux-arm64/edgeplug", type: "file", mode: 0o755, data: executable },
    { name: "edgeplug-1.2.3-linux-arm64/empty", type: "file", mode: 0o600, data: Buffer.alloc(0) },
  ];
}

test("the same entries give the same bytes, whatever the clock or the process", () => {
  const executable = Buffer.alloc(70_000, 7);
  const first = writeTarGz(entries(executable), MTIME);
  const second = writeTarGz(entries(Buffer.from(executable)), MTIME);
  assert.ok(first.equals(second));
  assert.ok(!first.equals(writeTarGz(entries(executable), MTIME + 1)), "the mtime is in the archive");
  assert.equal(first.readUInt32LE(4), 0, "gzip header time is 0");
});

test("GNU tar lists owner 0/0, the modes and the mtime, and unpacks the same bytes", (t) => {
  const dir = tempDir(t);
  const executable = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));
  const archive = path.join(dir, "release.tar.gz");
  fs.writeFileSync(archive, writeTarGz(entries(executable), MTIME));
  const listing = execFileSync("tar", ["--numeric-owner", "--full-time", "-tvzf", archive], { encoding: "utf8", env: { TZ: "UTC" } });
  const rows = listing.trimEnd().split("\n").map((row) => row.split(/\s+/));
  assert.deepEqual(
    rows.map(([mode, owner, size, , , name]) => [mode, owner, size, name]),
    [
      ["drwxr-xr-x", "0/0", "0", "edgeplug-1.2.3-linux-arm64/"],
      ["-rw-r--r--", "0/0", "11", "edgeplug-1.2.3-linux-arm64/INSTALL"],
      ["-rwxr-xr-x", "0/0", "5000", "edgeplug-1.2.3-linux-arm64/edgeplug"],
      ["-rw-------", "0/0", "0", "edgeplug-1.2.3-linux-arm64/empty"],
    ],
  );
  const expectedTime = new Date(MTIME * 1000).toISOString().replace("T", " ").slice(0, 19);
  for (const row of rows) assert.equal(`${row[3]} ${row[4]}`, expectedTime);
  const out = path.join(dir, "out");
  fs.mkdirSync(out);
  execFileSync("tar", ["-xzf", archive, "-C", out]);
  assert.ok(fs.readFileSync(path.join(out, "edgeplug-1.2.3-linux-arm64", "edgeplug")).equals(executable));
  assert.equal(fs.statSync(path.join(out, "edgeplug-1.2.3-linux-arm64", "edgeplug")).mode & 0o777, 0o755);
});

test("readTar reads what writeTarGz wrote, and what GNU tar writes with long names", (t) => {
  const executable = Buffer.alloc(1234, 1);
  const read = readTar(writeTarGz(entries(executable), MTIME));
  assert.deepEqual(
    read.map((entry) => [entry.name, entry.type, entry.mode, entry.data.length]),
    [
      ["edgeplug-1.2.3-linux-arm64", "directory", 0o755, 0],
      ["edgeplug-1.2.3-linux-arm64/INSTALL", "file", 0o644, 11],
      ["edgeplug-1.2.3-linux-arm64/edgeplug", "file", 0o755, 1234],
      ["edgeplug-1.2.3-linux-arm64/empty", "file", 0o600, 0],
    ],
  );
  const dir = tempDir(t);
  const longName = `${"d".repeat(60)}/${"f".repeat(80)}.txt`;
  fs.mkdirSync(path.join(dir, "src", "d".repeat(60)), { recursive: true });
  fs.writeFileSync(path.join(dir, "src", longName), "long\n");
  for (const format of ["pax", "gnu"]) {
    const archive = path.join(dir, `${format}.tar.gz`);
    execFileSync("tar", [`--format=${format}`, "-czf", archive, "-C", path.join(dir, "src"), longName]);
    const found = readTar(fs.readFileSync(archive)).find((entry) => entry.name === longName);
    assert.equal(found?.data.toString(), "long\n", `${format}: the long name is read`);
  }
});

test("a truncated archive is an error, not a short file", () => {
  const tar = readTarInput();
  assert.throws(() => readTar(tar.subarray(0, 4 * 512 + 100)), /archive ends inside an entry/);
  assert.throws(() => readTar(tar.subarray(0, 512 + 100)), /archive ends inside a header/);
});

function readTarInput(): Buffer {
  return execFileSync("gzip", ["-dc"], { input: writeTarGz(entries(Buffer.alloc(4096, 3)), MTIME) });
}

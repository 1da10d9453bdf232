/**
 * `edgeplug version` / `edgeplug --version`: docs/commands.md's one line,
 * and with `--verbose` the facts that tell how this copy runs (whether it is
 * the single executable, what it was built for and from, where it lives,
 * which policy file it would read).
 */
import fs from "node:fs";
import { buildCommit, EDGEPLUG_VERSION, executableBuild } from "../platform/build-info.ts";
import { executablePath, isSingleExecutable, platformTag, runtimeName, runtimeVersion } from "../platform/runtime.ts";
import { parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_OK } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug version [--verbose]
       edgeplug --version

Prints one line: edgeplug VERSION RUNTIME vRUNTIME_VERSION OS-ARCH COMMIT
(OS-ARCH is the executable's build target, e.g. linux-arm64).

Options:
  --verbose            add whether this is the single executable (sea), its build target, the npm package
                       of its embedded Node, whether it has a code cache, its path and the default policy path
${COMMON_OPTIONS_HELP}
`;

/**
 * `edgeplug 0.1.0 node v24.21.0 linux-arm64 3f2a9c1`, without a newline. The
 * platform is the executable's build target; from source, the running platform.
 */
export function versionLine(): string {
  const platform = executableBuild()?.target ?? platformTag();
  return `edgeplug ${EDGEPLUG_VERSION} ${runtimeName()} ${runtimeVersion()} ${platform} ${buildCommit()}`;
}

/** `on` is the line scripts/build.ts and the tests look for. */
const CODE_CACHE_TEXT = { accepted: "on", absent: "off", rejected: "rejected by V8 (other V8 flags than the build's)" } as const;

/** The --verbose lines about the build: target, embedded runtime package, code cache. */
function buildLines(): string[] {
  const build = executableBuild();
  if (build === null) return [`target: none (from source, running on ${platformTag()})`];
  return [`target: ${build.target}`, `runtime package: ${build.runtimePackage}`, `code cache: ${CODE_CACHE_TEXT[build.codeCache]}`];
}

export const versionCommand: Command = {
  name: "version",
  summary: "print edgeplug's version, runtime, platform and commit",
  usage,
  async run(args, io) {
    const parsed = parseCommandArgs("version", args, { verbose: { type: "boolean" } });
    const lines = [versionLine()];
    if (parsed.values.verbose) {
      // Loaded here, not at the top: load.ts brings ajv and yaml, which plain `version` does not need.
      const { DEFAULT_POLICY_PATH } = await import("../policy/load.ts");
      const policyState = fs.existsSync(DEFAULT_POLICY_PATH) ? "present" : "absent: the embedded default applies";
      lines.push(
        `sea: ${isSingleExecutable()}`,
        ...buildLines(),
        `executable: ${executablePath()}`,
        `default policy: ${DEFAULT_POLICY_PATH} (${policyState})`,
      );
    }
    io.stdout(lines.join("\n") + "\n");
    return EXIT_OK;
  },
};

/**
 * `edgeplug version` / `edgeplug --version`: SPEC.md section 1's one line,
 * and with `--verbose` the facts that tell how this copy runs (whether it is
 * the single executable, where it lives, which policy file it would read).
 */
import fs from "node:fs";
import { buildCommit, EDGEPLUG_VERSION } from "../platform/build-info.ts";
import { executablePath, isSingleExecutable, platformTag, runtimeName, runtimeVersion } from "../platform/runtime.ts";
import { parseCommandArgs } from "./args.ts";
import type { Command } from "./command.ts";
import { EXIT_OK } from "./command.ts";
import { COMMON_OPTIONS_HELP } from "./help.ts";

const usage = `Usage: edgeplug version [--verbose]
       edgeplug --version

Prints one line: edgeplug VERSION RUNTIME vRUNTIME_VERSION OS-ARCH COMMIT.

Options:
  --verbose            add whether this is the single executable (sea), its path and the default policy path
${COMMON_OPTIONS_HELP}
`;

/** `edgeplug 0.1.0 node v24.21.0 linux-x64 3f2a9c1`, without a newline. */
export function versionLine(): string {
  return `edgeplug ${EDGEPLUG_VERSION} ${runtimeName()} ${runtimeVersion()} ${platformTag()} ${buildCommit()}`;
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
        `executable: ${executablePath()}`,
        `default policy: ${DEFAULT_POLICY_PATH} (${policyState})`,
      );
    }
    io.stdout(lines.join("\n") + "\n");
    return EXIT_OK;
  },
};

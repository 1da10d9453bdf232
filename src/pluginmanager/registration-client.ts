/** The kubelet's side of GetInfo and NotifyRegistrationStatus over one short-lived connection (an attempt, `probe`). */
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { Registration } from "../gen/pluginregistration/v1/api_pb.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { dialUnix, type UnixChannel } from "../rpc/unix-channel.ts";

/**
 * What no handler could accept of what a plugin says of itself (the kubelet
 * bounds nothing): name and type 317 bytes (a 253-byte DNS prefix, "/", 63),
 * endpoint 107 (sun_path with its NUL), 64 versions of 128 bytes (plugins
 * send up to three of ~45), the answer 64 KiB (a 15 MiB name is never read).
 */
export const PLUGIN_INFO_LIMITS = { nameBytes: 317, typeBytes: 317, endpointBytes: 107, versions: 64, versionBytes: 128, answerBytes: 64 * 1024 } as const;

/** What GetInfo answered, with the endpoint defaulted to the registration socket. */
export interface PluginInfoSummary {
  type: string;
  name: string;
  endpoint: string;
  versions: string[];
}

/** Dialled on first use, and again if the connection dropped before a notification. */
export class RegistrationConnection {
  readonly #socket: string;
  readonly #channel: UnixChannel;
  readonly #client: Client<typeof Registration>;

  /** `connectPath`: where to connect when not `socket` itself (its pinned descriptor's path). */
  constructor(socket: string, dialMs: number, connectPath?: string) {
    this.#socket = socket;
    this.#channel = dialUnix(socket, { connectTimeoutMs: dialMs, readMaxBytes: PLUGIN_INFO_LIMITS.answerBytes, connectPath });
    this.#client = createClient(Registration, this.#channel.transport);
  }

  async getInfo(timeoutMs: number, signal?: AbortSignal): Promise<PluginInfoSummary> {
    const info = await this.#client.getInfo({}, { timeoutMs, signal });
    return {
      type: info.type,
      name: info.name,
      endpoint: info.endpoint === "" ? this.#socket : info.endpoint,
      versions: [...info.supportedVersions],
    };
  }

  async notify(registered: boolean, error: string, timeoutMs: number, signal: AbortSignal): Promise<void> {
    const status = { pluginRegistered: registered, error };
    try {
      await this.#client.notifyRegistrationStatus(status, { timeoutMs, signal });
    } catch (failure) {
      if (signal.aborted || !connectionDropped(failure)) throw failure;
      // The plugin may still be there on a new connection (kubernetes PR #138170), which the channel dials.
      await this.#client.notifyRegistrationStatus(status, { timeoutMs, signal });
    }
  }

  close(): void {
    this.#channel.close();
  }
}

/** Which bound GetInfo's answer breaks, said so that its author can fix it, or null when it is within them. */
export function pluginInfoProblem(info: PluginInfoSummary): string | null {
  const limits = PLUGIN_INFO_LIMITS;
  const tooLong = (field: string, value: string, bytes: number) => {
    const length = Buffer.byteLength(value);
    return length > bytes ? `PluginInfo.${field} is ${length} bytes, more than ${bytes} (${JSON.stringify(value.slice(0, 40))}...)` : null;
  };
  const problem = tooLong("name", info.name, limits.nameBytes) ??
    tooLong("type", info.type, limits.typeBytes) ??
    tooLong("endpoint", info.endpoint, limits.endpointBytes) ??
    (info.versions.length > limits.versions ? `PluginInfo.supported_versions has ${info.versions.length} entries, more than ${limits.versions}` : null) ??
    info.versions.map((version, i) => tooLong(`supported_versions[${i}]`, version, limits.versionBytes)).find((found) => found !== null) ??
    null;
  return problem === null ? null : `RegisterPlugin error -- invalid plugin info: ${problem}`;
}

/** A failure of the connection rather than an answer from the plugin (or its silence). */
function connectionDropped(error: unknown): boolean {
  const failure = classifyRpcError(error);
  if (failure === "disconnected" || failure === "not-grpc" || failure === "canceled") return true;
  return failure === "status" && ConnectError.from(error).code === Code.Unavailable;
}

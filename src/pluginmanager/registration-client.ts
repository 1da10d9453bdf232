/**
 * The kubelet's side of the plugin registration service (GetInfo,
 * NotifyRegistrationStatus) over one short-lived connection, as a
 * registration attempt or `probe` uses it.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { Client } from "@connectrpc/connect";
import { Registration } from "../gen/pluginregistration/v1/api_pb.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { dialUnix } from "../rpc/unix-channel.ts";
import type { UnixChannel } from "../rpc/unix-channel.ts";

/** What GetInfo answered, with the endpoint defaulted to the registration socket. */
export interface PluginInfoSummary {
  type: string;
  name: string;
  endpoint: string;
  versions: string[];
}

/**
 * The registration connection of one attempt: dialled on first use, closed
 * by {@link close}, dialled again once if it dropped before a notification.
 */
export class RegistrationConnection {
  readonly #socket: string;
  readonly #dialMs: number;
  #channel: UnixChannel | null = null;
  #client: Client<typeof Registration> | null = null;

  constructor(socket: string, dialMs: number) {
    this.#socket = socket;
    this.#dialMs = dialMs;
  }

  async getInfo(timeoutMs: number, signal?: AbortSignal): Promise<PluginInfoSummary> {
    const info = await this.#dial().getInfo({}, { timeoutMs, signal });
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
      await this.#dial().notifyRegistrationStatus(status, { timeoutMs, signal });
    } catch (failure) {
      if (signal.aborted || !connectionDropped(failure)) throw failure;
      // The plugin may still be there on a new connection (kubernetes PR #138170).
      this.close();
      await this.#dial().notifyRegistrationStatus(status, { timeoutMs, signal });
    }
  }

  close(): void {
    this.#channel?.close();
    this.#channel = null;
    this.#client = null;
  }

  #dial(): Client<typeof Registration> {
    if (!this.#client) {
      this.#channel = dialUnix(this.#socket, { connectTimeoutMs: this.#dialMs });
      this.#client = createClient(Registration, this.#channel.transport);
    }
    return this.#client;
  }
}

/** A failure of the connection rather than an answer from the plugin (or its silence). */
function connectionDropped(error: unknown): boolean {
  const failure = classifyRpcError(error);
  if (failure === "disconnected" || failure === "not-grpc" || failure === "canceled") return true;
  return failure === "status" && ConnectError.from(error).code === Code.Unavailable;
}

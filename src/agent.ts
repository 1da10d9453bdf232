/**
 * The daemon: the plugin manager, the local API socket and the event stream,
 * started in the order that keeps a failed start harmless (the API socket is
 * claimed before any plugin is dialled) and stopped together within SPEC's
 * 2 s.
 */
import type { Logger } from "./log/logger.ts";
import type { Policy } from "./policy/types.ts";
import { create } from "@bufbuild/protobuf";
import type { StatusResponse } from "./gen/edgeplug/v1/agent_pb.ts";
import { PluginEventSchema } from "./gen/edgeplug/v1/agent_pb.ts";
import { agentRoutes } from "./api/agent-service.ts";
import { serveApiSocket, type ApiSocketServer } from "./api/agent-socket.ts";
import { EventStream } from "./api/event-stream.ts";
import { buildStatus, pluginStatusFromRecord } from "./api/status.ts";
import { PluginManager } from "./pluginmanager/manager.ts";

export interface AgentOptions {
  policy: Policy;
  log: Logger;
}

export class EdgeplugAgent {
  readonly manager: PluginManager;
  readonly events: EventStream;
  readonly #policy: Policy;
  readonly #log: Logger;
  #api: ApiSocketServer | null = null;
  #stopped: Promise<void> | null = null;

  constructor(options: AgentOptions) {
    this.#policy = options.policy;
    this.#log = options.log;
    this.manager = new PluginManager({ policy: options.policy, log: options.log });
    this.events = new EventStream(() => this.status());
    this.manager.subscribe(({ plugin, removed }) =>
      this.events.publish({
        case: "plugin",
        value: create(PluginEventSchema, { plugin: pluginStatusFromRecord(plugin), removed }),
      }),
    );
  }

  /**
   * Serves the API, then starts discovery. Rejects (having released whatever
   * it had taken) when the API socket is held by a live process or a watch
   * directory cannot be created.
   */
  async start(): Promise<void> {
    const { api } = this.#policy;
    if (api.socket !== null) {
      this.#api = await serveApiSocket({
        socketPath: api.socket,
        group: api.socketGroup,
        routes: agentRoutes({ status: () => this.status(), events: this.events }),
        log: this.#log,
      });
    }
    try {
      await this.manager.start();
    } catch (error) {
      await this.stop();
      throw error;
    }
    this.#log.info("edgeplug running", {
      node: this.#policy.nodeName,
      policy: this.#policy.source,
      api: api.socket,
      watch: this.#policy.watch.map((dir) => dir.path),
    });
  }

  status(): StatusResponse {
    return buildStatus({ node: this.#policy.nodeName, plugins: this.manager.plugins() });
  }

  /** Ends event streams, closes the API socket (removing it) and stops the plugin manager. */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.events.close();
      await Promise.all([this.#api?.close(), this.manager.stop()]);
    })();
    return this.#stopped;
  }
}

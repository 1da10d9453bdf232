/**
 * The edgeplug.v1.Agent service: status and events from the agent's state.
 * Allocate and Release go to the device manager (allocation-service.ts);
 * without one they answer Unimplemented with a reason a person understands.
 * With a device manager the socket also serves the kubelet's
 * v1.PodResourcesLister (pod-resources-service.ts).
 */
import type { ConnectRouter, ConnectRouterOptions } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import { API_PROTOCOLS } from "./agent-socket.ts";
import { allocateDevices, releaseDevices } from "./allocation-service.ts";
import { AgentBinaryView, eventView, statusResponseView } from "./binary-answers.ts";
import type { EventStream } from "./event-stream.ts";
import { ALLOCATION_REQUEST_MAX_BYTES } from "../server/limits.ts";
import { podResourcesRoutes } from "./pod-resources-service.ts";
import { streamCutOffKey } from "../server/stream-cutoff.ts";

export interface AgentServiceDeps {
  status: () => StatusResponse;
  events: EventStream;
  /** Answers Allocate and Release; without it they are Unimplemented. */
  devices?: DeviceManager;
}

const NO_DEVICE_MANAGER = "allocation needs the device manager, which is not in this build";

/**
 * Allocate and Release read at most ALLOCATION_REQUEST_MAX_BYTES, not the
 * socket's 4 MiB: a waiting Allocate request holds its memory in the queue.
 */
const ALLOCATION_ROUTE: ConnectRouterOptions = { ...API_PROTOCOLS, readMaxBytes: ALLOCATION_REQUEST_MAX_BYTES };

/** The routes for JSON calls (and any call when `binaryAgentRoutes` is not served beside them). */
export function agentRoutes(deps: AgentServiceDeps): (router: ConnectRouter) => void {
  return (router) => {
    if (deps.devices) podResourcesRoutes(deps.devices)(router);
    // One route per method, not router.service: Allocate and Release take options of their own.
    router.rpc(Agent.method.status, () => deps.status());
    router.rpc(Agent.method.watchEvents, (_request, context) => deps.events.subscribe(context.signal, context.values.get(streamCutOffKey)));
    allocationRoutes(router, deps);
  };
}

/** The same for binary protobuf calls: Status and WatchEvents answer the views of binary-answers.ts, the same bytes. */
export function binaryAgentRoutes(deps: AgentServiceDeps): (router: ConnectRouter) => void {
  return (router) => {
    if (deps.devices) podResourcesRoutes(deps.devices)(router);
    router.rpc(AgentBinaryView.method.status, () => statusResponseView(deps.status()));
    router.rpc(AgentBinaryView.method.watchEvents, async function* (_request, context) {
      for await (const event of deps.events.subscribe(context.signal, context.values.get(streamCutOffKey))) yield eventView(event);
    });
    allocationRoutes(router, deps);
  };
}

function allocationRoutes(router: ConnectRouter, deps: AgentServiceDeps): void {
  router.rpc(
    Agent.method.allocate,
    (request, context) => {
      if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
      return allocateDevices(deps.devices, request, context.signal);
    },
    ALLOCATION_ROUTE,
  );
  router.rpc(
    Agent.method.release,
    (request) => {
      if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
      return releaseDevices(deps.devices, request);
    },
    ALLOCATION_ROUTE,
  );
}

/**
 * The edgeplug.v1.Agent service: status and events from the agent's state.
 * Allocate and Release go to the device manager (allocation-service.ts);
 * without one they answer Unimplemented with a reason a person understands.
 * With a device manager the socket also serves the kubelet's
 * v1.PodResourcesLister (pod-resources-service.ts).
 */
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { AllocateRequest, ReleaseRequest, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import type { DeviceManager } from "../handlers/deviceplugin/manager.ts";
import { allocateDevices, releaseDevices } from "./allocation-service.ts";
import { AgentBinaryView, eventView, statusResponseView } from "./binary-answers.ts";
import type { EventStream } from "./event-stream.ts";
import { podResourcesRoutes } from "./pod-resources-service.ts";

export interface AgentServiceDeps {
  status: () => StatusResponse;
  events: EventStream;
  /** Answers Allocate and Release; without it they are Unimplemented. */
  devices?: DeviceManager;
}

const NO_DEVICE_MANAGER = "allocation needs the device manager, which is not in this build";

/** The routes for JSON calls (and any call when `binaryAgentRoutes` is not served beside them). */
export function agentRoutes(deps: AgentServiceDeps): (router: ConnectRouter) => void {
  return (router) => {
    if (deps.devices) podResourcesRoutes(deps.devices)(router);
    router.service(Agent, {
      status: () => deps.status(),
      watchEvents: (_request, context) => deps.events.subscribe(context.signal),
      ...allocation(deps),
    });
  };
}

/** The same for binary protobuf calls: Status and WatchEvents answer the views of binary-answers.ts, the same bytes. */
export function binaryAgentRoutes(deps: AgentServiceDeps): (router: ConnectRouter) => void {
  return (router) => {
    if (deps.devices) podResourcesRoutes(deps.devices)(router);
    router.service(AgentBinaryView, {
      status: () => statusResponseView(deps.status()),
      async *watchEvents(_request, context) {
        for await (const event of deps.events.subscribe(context.signal)) yield eventView(event);
      },
      ...allocation(deps),
    });
  };
}

function allocation(deps: AgentServiceDeps) {
  return {
    allocate: (request: AllocateRequest, context: HandlerContext) => {
      if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
      return allocateDevices(deps.devices, request, context.signal);
    },
    release: (request: ReleaseRequest) => {
      if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
      return releaseDevices(deps.devices, request);
    },
  };
}

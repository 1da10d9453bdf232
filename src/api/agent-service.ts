/**
 * The edgeplug.v1.Agent service: status and events from the agent's state.
 * Allocate and Release go to the device manager (allocation-service.ts);
 * without one they answer Unimplemented with a reason a person understands.
 * With a device manager the socket also serves the kubelet's
 * v1.PodResourcesLister (pod-resources-service.ts).
 */
import type { ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import type { DeviceManager } from "../handlers/deviceplugin/manager.ts";
import { allocateDevices, releaseDevices } from "./allocation-service.ts";
import type { EventStream } from "./event-stream.ts";
import { podResourcesRoutes } from "./pod-resources-service.ts";

export interface AgentServiceDeps {
  status: () => StatusResponse;
  events: EventStream;
  /** Answers Allocate and Release; without it they are Unimplemented. */
  devices?: DeviceManager;
}

const NO_DEVICE_MANAGER = "allocation needs the device manager, which is not in this build";

export function agentRoutes(deps: AgentServiceDeps): (router: ConnectRouter) => void {
  return (router) => {
    if (deps.devices) podResourcesRoutes(deps.devices)(router);
    router.service(Agent, {
      status: () => deps.status(),
      watchEvents: (_request, context) => deps.events.subscribe(context.signal),
      allocate: (request) => {
        if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
        return allocateDevices(deps.devices, request);
      },
      release: (request) => {
        if (!deps.devices) throw new ConnectError(NO_DEVICE_MANAGER, Code.Unimplemented);
        return releaseDevices(deps.devices, request);
      },
    });
  };
}

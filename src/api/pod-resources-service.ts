/**
 * The kubelet's pod-resources API (v1.PodResourcesLister) on the API socket
 * and on the kubelet's own path (pod-resources-socket.ts), so that monitoring
 * agents written for the kubelet read edgeplug's devices unchanged. Each owner of an allocation is a pod named after the owner in
 * namespace `edgeplug`, with one container per `--container` it was given.
 *
 * Devices are listed the way the kubelet's server lists them: one
 * ContainerDevices per device and NUMA node (a device on nodes 0 and 1
 * appears twice, once with each node), a device without topology once with
 * no topology. edgeplug has no CPU or memory manager, so every `cpu_ids` and
 * `memory` field, the container-level ones and the pod-level ones upstream
 * added after its last release (PodResources fields 4 and 5), stays empty,
 * as the kubelet leaves them with its CPU and memory managers off.
 */
import { create } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ContainerDevices, PodResources } from "../gen/podresources/v1/api_pb.ts";
import {
  AllocatableResourcesResponseSchema,
  ContainerDevicesSchema,
  ContainerResourcesSchema,
  GetPodResourcesResponseSchema,
  ListPodResourcesResponseSchema,
  PodResourcesLister,
  PodResourcesSchema,
} from "../gen/podresources/v1/api_pb.ts";
import { NO_NUMA_NODE } from "../devicemanager/node-index.ts";

/** The namespace every owner appears in (docs/devices.md, "The pod-resources API"). */
export const POD_NAMESPACE = "edgeplug";

/** A resource's devices as the device manager keeps them (DeviceList): by index in the plugin's list. */
interface DeviceColumns {
  readonly ids: readonly string[];
  isHealthy(index: number): boolean;
  nodesAt(index: number): readonly number[];
}

/** What the service reads of the device manager (DeviceManager satisfies it). */
export interface PodResourcesSource {
  readonly pods: {
    owners(): string[];
    ownerEntries(owner: string): ReadonlyArray<{ container: string; resource: string; byNode: ReadonlyMap<number, readonly string[]> }>;
  };
  resourceStates(): ReadonlyArray<{ name: string; devices: DeviceColumns }>;
}

/**
 * Registers v1.PodResourcesLister answered from `devices`. `admit` runs first
 * in every call and throws to refuse it (the kubelet's socket has a rate limit).
 */
export function podResourcesRoutes(devices: PodResourcesSource, admit: () => void = () => {}): (router: ConnectRouter) => void {
  return (router) =>
    router.service(PodResourcesLister, {
      list: () => {
        admit();
        return create(ListPodResourcesResponseSchema, {
          podResources: devices.pods.owners().map((owner) => podOf(devices, owner)),
        });
      },
      getAllocatableResources: () => {
        admit();
        return create(AllocatableResourcesResponseSchema, {
          // The kubelet's GetAllocatableDevices: every healthy device (a resource without its plugin has none).
          devices: [...devices.resourceStates()]
            .sort((a, b) => compare(a.name, b.name))
            .flatMap(({ name, devices: list }) =>
              list.ids
                .map((_, index) => index)
                .filter((index) => list.isHealthy(index))
                .sort((a, b) => compare(list.ids[a]!, list.ids[b]!))
                .flatMap((index) => deviceEntries(name, list.ids[index]!, list.nodesAt(index)))
            ),
        });
      },
      get: (request) => {
        admit();
        const known = request.podNamespace === POD_NAMESPACE && devices.pods.ownerEntries(request.podName).length > 0;
        // The kubelet's words, returned as a plain error (gRPC code Unknown), so clients that match on it work unchanged.
        if (!known) throw new ConnectError(`pod ${request.podName} in namespace ${request.podNamespace} not found`, Code.Unknown);
        return create(GetPodResourcesResponseSchema, { podResources: podOf(devices, request.podName) });
      },
    });
}

/** One owner as a pod: its containers in the order they were first allocated, each with its devices per resource. */
function podOf(devices: PodResourcesSource, owner: string): PodResources {
  const containers = new Map<string, ContainerDevices[]>();
  for (const entry of devices.pods.ownerEntries(owner)) {
    let list = containers.get(entry.container);
    if (!list) containers.set(entry.container, list = []);
    for (const [id, nodes] of nodesByDevice(entry.byNode)) list.push(...deviceEntries(entry.resource, id, nodes));
  }
  return create(PodResourcesSchema, {
    name: owner,
    namespace: POD_NAMESPACE,
    containers: [...containers].map(([name, list]) => create(ContainerResourcesSchema, { name, devices: list })),
  });
}

/** The allocation's devices with every NUMA node each was recorded under (the checkpoint keeps a device under each of its nodes). */
function nodesByDevice(byNode: ReadonlyMap<number, readonly string[]>): Map<string, number[]> {
  const devices = new Map<string, number[]>();
  for (const [node, ids] of byNode) {
    for (const id of ids) {
      let nodes = devices.get(id);
      if (!nodes) devices.set(id, nodes = []);
      if (node !== NO_NUMA_NODE && !nodes.includes(node)) nodes.push(node);
    }
  }
  return devices;
}

/** The kubelet's containerDevicesFromResourceDeviceInstances for one device: an entry per NUMA node, or one without topology. */
function deviceEntries(resource: string, id: string, numaNodes: readonly number[]): ContainerDevices[] {
  if (numaNodes.length === 0) return [create(ContainerDevicesSchema, { resourceName: resource, deviceIds: [id] })];
  return [...numaNodes]
    .sort((a, b) => a - b)
    .map((node) => create(ContainerDevicesSchema, { resourceName: resource, deviceIds: [id], topology: { nodes: [{ ID: BigInt(node) }] } }));
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

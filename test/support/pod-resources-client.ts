/**
 * A client of the kubelet's pod-resources API (v1.PodResourcesLister) built
 * with @grpc/grpc-js and the repository's .proto, as monitoring agents
 * written for the kubelet are, with its answers reduced to plain rows.
 */
import * as grpc from "@grpc/grpc-js";
import { podResourcesV1, serviceOf } from "./kubelet-protos.ts";
import type { CleansUpAfter } from "./temp-dir.ts";

/** A ContainerDevices as [resource, device ids, NUMA node ids or null when it has no topology]. */
export type DeviceRow = [string, string[], string[] | null];
/** A pod as [name, namespace, [container name, devices][]]. */
export type PodRow = [string, string, [string, DeviceRow[]][]];

export interface WireDevices {
  resource_name: string;
  device_ids?: string[];
  topology?: { nodes?: { ID?: string }[] };
}

export interface WirePod {
  name: string;
  namespace: string;
  containers?: { name: string; devices?: WireDevices[]; cpu_ids?: string[]; memory?: unknown[] }[];
  cpu_ids?: string[];
  memory?: unknown[];
}

// proto3 does not send a NUMA node ID of 0, and grpc-js (with defaults: false) leaves it out.
export const deviceRows = (devices: WireDevices[] | undefined): DeviceRow[] =>
  (devices ?? []).map((d) => [d.resource_name, d.device_ids ?? [], d.topology ? (d.topology.nodes ?? []).map((n) => n.ID ?? "0") : null]);

export const podRows = (pods: WirePod[] | undefined): PodRow[] =>
  (pods ?? []).map((pod) => [pod.name, pod.namespace, (pod.containers ?? []).map((c): [string, DeviceRow[]] => [c.name, deviceRows(c.devices)])]);

export interface PodResourcesClient {
  list(): Promise<{ pod_resources?: WirePod[] }>;
  get(podName: string, podNamespace: string): Promise<{ pod_resources?: WirePod }>;
  allocatable(): Promise<{ devices?: WireDevices[]; cpu_ids?: string[] }>;
}

type UnaryMethod = (request: object, callback: (error: grpc.ServiceError | null, answer: unknown) => void) => void;

/** Dials `socket` (a unix socket path); closed after the test `t`. */
export function podResourcesClient(t: CleansUpAfter, socket: string): PodResourcesClient {
  const Lister = serviceOf(podResourcesV1(), "PodResourcesLister");
  const client = new Lister(`unix:${socket}`, grpc.credentials.createInsecure());
  t.after(() => client.close());
  const call = <T>(method: string, request: object) =>
    new Promise<T>((resolve, reject) => (client[method] as UnaryMethod).call(client, request, (error, answer) => (error ? reject(error) : resolve(answer as T))));
  return {
    list: () => call("List", {}),
    get: (pod_name, pod_namespace) => call("Get", { pod_name, pod_namespace }),
    allocatable: () => call("GetAllocatableResources", {}),
  };
}

/**
 * CSI node drivers and DRA plugin services for tests: @grpc/grpc-js servers
 * on real unix sockets (messages encoded by @grpc/proto-loader), with the
 * misbehaviours the CSI and DRA tests need.
 */
import * as grpc from "@grpc/grpc-js";
import { csiV1, draPackage, serviceOf } from "./kubelet-protos.ts";
import { type GrpcPeer, startGrpcServer } from "./grpc-peers.ts";

export interface CsiDriverOptions {
  /** GetPluginInfo's name. */
  name: string;
  nodeId?: string;
  maxVolumesPerNode?: number;
  topology?: Record<string, string>;
  vendorVersion?: string;
  /** The first N NodeGetInfo calls fail with UNAVAILABLE. */
  failNodeGetInfoTimes?: number;
}

export interface CsiDriverPeer extends GrpcPeer {
  nodeGetInfoCalls(): number;
}

const ok = (answer: object) => (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback(null, answer);

/** A CSI node driver serving Identity and Node on `socketPath`, as a real driver's CSI socket. */
export async function startCsiDriver(socketPath: string, options: CsiDriverOptions): Promise<CsiDriverPeer> {
  const csi = csiV1();
  let nodeGetInfoCalls = 0;
  const peer = await startGrpcServer(socketPath, [
    [
      serviceOf(csi, "Identity").service,
      {
        GetPluginInfo: ok({ name: options.name, vendor_version: options.vendorVersion ?? "0.0.1" }),
        GetPluginCapabilities: ok({ capabilities: [] }),
        Probe: ok({}),
      },
    ],
    [
      serviceOf(csi, "Node").service,
      {
        NodeGetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => {
          nodeGetInfoCalls++;
          if (nodeGetInfoCalls <= (options.failNodeGetInfoTimes ?? 0)) {
            return callback({ code: grpc.status.UNAVAILABLE, details: "node not ready: volume backend starting" });
          }
          callback(null, {
            node_id: options.nodeId ?? "edge-01",
            max_volumes_per_node: String(options.maxVolumesPerNode ?? 0),
            accessible_topology: options.topology ? { segments: options.topology } : undefined,
          });
        },
        NodeGetCapabilities: ok({ capabilities: [{ rpc: { type: "STAGE_UNSTAGE_VOLUME" } }, { rpc: { type: "GET_VOLUME_STATS" } }] }),
      },
    ],
  ]);
  return { ...peer, nodeGetInfoCalls: () => nodeGetInfoCalls };
}

/** A DRA plugin's service on `socketPath` (v1 or v1beta1), preparing every claim with one device. */
export async function startDraService(socketPath: string, version: "v1" | "v1beta1" = "v1"): Promise<GrpcPeer> {
  const answer = (call: grpc.ServerUnaryCall<{ claims: Array<{ uid: string }> }, unknown>, callback: grpc.sendUnaryData<unknown>) =>
    callback(null, {
      claims: Object.fromEntries(call.request.claims.map((claim) => [claim.uid, { devices: [{ pool_name: "pool", device_name: "dev-0" }] }])),
    });
  return startGrpcServer(socketPath, [
    [serviceOf(draPackage(version), "DRAPlugin").service, { NodePrepareResources: answer, NodeUnprepareResources: answer }],
  ]);
}

/**
 * What the CSI handler asks a node driver when it registers, on the
 * driver's CSI socket (PluginInfo.endpoint): NodeGetInfo, which must answer,
 * and NodeGetCapabilities and GetPluginInfo, which only add detail. Every
 * answer is bounded as the CSI spec bounds it before it is kept.
 */
import { createClient } from "@connectrpc/connect";
import { Identity, Node, NodeServiceCapability_RPC_TypeSchema } from "../gen/csi/v1/csi_pb.ts";
import type { Logger } from "../log/logger.ts";
import { grpcStatusText } from "../rpc/rpc-error.ts";
import { dialUnix } from "../rpc/unix-channel.ts";
import { messageOf } from "../log/error-message.ts";
import type { PinnedSocket } from "../platform/pinned-socket.ts";

/** What `status` shows of a registered CSI driver. */
export interface CsiNodeInfo {
  nodeId: string;
  /** 0: the driver leaves the limit to the orchestrator. */
  maxVolumesPerNode: bigint;
  topology: Record<string, string>;
  /** From GetPluginInfo; "" when it did not answer. */
  vendorVersion: string;
  /** NodeGetCapabilities' RPC types by name; [] when it did not answer. */
  nodeCapabilities: string[];
}

export interface CsiQueryOptions {
  /** Bound on connecting plus the HTTP/2 handshake. */
  dialTimeoutMs: number;
  /** Deadline of each call. */
  callTimeoutMs: number;
  signal: AbortSignal;
  log: Logger;
}

/** CSI spec limits: node_id 256 bytes, a map 4 KiB in all, other strings 128 bytes. */
const MAX_NODE_ID_BYTES = 256;
const MAX_TOPOLOGY_BYTES = 4096;
const MAX_STRING_BYTES = 128;
const MAX_CAPABILITIES = 32;
/**
 * NodeGetInfo failed as a call: its message is the gRPC error as grpc-go
 * prints it, which the kubelet passes on to the registrar unchanged.
 */
export class NodeGetInfoFailed extends Error {
  override readonly name = "NodeGetInfoFailed";
}

/** Far above any answer these three calls give; a driver sending more is refused at the transport. */
const READ_MAX_BYTES = 64 * 1024;

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

/**
 * Calls the driver at `endpoint` as named, through `socket`, that endpoint
 * opened and judged by the caller (endpoint-rules.ts), which stays the
 * caller's to close. Throws when it cannot be reached, NodeGetInfo fails,
 * or its answer breaks the spec's limits; the error names the call and the
 * endpoint.
 */
export async function queryCsiNode(driver: string, endpoint: string, socket: Pick<PinnedSocket, "realPath" | "dialPath">, options: CsiQueryOptions): Promise<CsiNodeInfo> {
  const channel = dialUnix(socket.realPath, { connectPath: socket.dialPath, connectTimeoutMs: options.dialTimeoutMs, readMaxBytes: READ_MAX_BYTES });
  const call = { signal: options.signal, timeoutMs: options.callTimeoutMs };
  try {
    const node = createClient(Node, channel.transport);
    let answer;
    try {
      answer = await node.nodeGetInfo({}, call);
    } catch (error) {
      throw new NodeGetInfoFailed(grpcStatusText(error), { cause: error });
    }
    const info: CsiNodeInfo = {
      nodeId: checkedNodeId(answer.nodeId, endpoint),
      maxVolumesPerNode: answer.maxVolumesPerNode,
      topology: checkedTopology(answer.accessibleTopology?.segments ?? {}, endpoint),
      vendorVersion: "",
      nodeCapabilities: [],
    };
    if (info.maxVolumesPerNode < 0n) {
      throw new Error(`NodeGetInfo on ${endpoint} answered max_volumes_per_node ${info.maxVolumesPerNode}, which must not be negative`);
    }
    const log = options.log.with({ driver, endpoint });
    try {
      const capabilities = (await node.nodeGetCapabilities({}, call)).capabilities;
      info.nodeCapabilities = capabilities.slice(0, MAX_CAPABILITIES).map((capability) => capabilityName(capability.type.value?.type));
    } catch (error) {
      log.warn("CSI NodeGetCapabilities failed; capabilities not shown", { error: messageOf(error) });
    }
    try {
      const plugin = await createClient(Identity, channel.transport).getPluginInfo({}, call);
      if (plugin.name !== driver) log.warn("CSI driver answers GetPluginInfo with another name", { pluginInfoName: plugin.name.slice(0, MAX_STRING_BYTES) });
      if (utf8Bytes(plugin.vendorVersion) <= MAX_STRING_BYTES) info.vendorVersion = plugin.vendorVersion;
      else log.warn("CSI vendor_version longer than 128 bytes; not shown", { bytes: utf8Bytes(plugin.vendorVersion) });
    } catch (error) {
      log.warn("CSI GetPluginInfo failed; vendor version not shown", { error: messageOf(error) });
    }
    return info;
  } finally {
    channel.close();
  }
}

function checkedNodeId(nodeId: string, endpoint: string): string {
  if (nodeId === "") throw new Error(`NodeGetInfo on ${endpoint} answered an empty node_id`);
  const bytes = utf8Bytes(nodeId);
  if (bytes > MAX_NODE_ID_BYTES) throw new Error(`NodeGetInfo on ${endpoint} answered a node_id of ${bytes} bytes, more than ${MAX_NODE_ID_BYTES}`);
  return nodeId;
}

function checkedTopology(segments: Record<string, string>, endpoint: string): Record<string, string> {
  let bytes = 0;
  for (const [key, value] of Object.entries(segments)) bytes += utf8Bytes(key) + utf8Bytes(value);
  if (bytes > MAX_TOPOLOGY_BYTES) {
    throw new Error(`NodeGetInfo on ${endpoint} answered accessible_topology of ${bytes} bytes, more than ${MAX_TOPOLOGY_BYTES}`);
  }
  return { ...segments };
}

function capabilityName(type: number | undefined): string {
  if (type === undefined) return "UNKNOWN";
  return NodeServiceCapability_RPC_TypeSchema.values.find((value) => value.number === type)?.name ?? `UNKNOWN(${type})`;
}

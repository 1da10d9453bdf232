/**
 * The CSI and DRA handlers' details of a plugin (PluginStatus fields 20-29):
 * their JSON shape and their tables in the `status` text. src/api/status.ts
 * uses these, so that the handler details stay here.
 */
import type { CsiDriverStatus, DraDriverStatus, PluginStatus } from "../gen/edgeplug/v1/agent_pb.ts";

/** PluginStatus.csi in the CLI's JSON (proto3 JSON: the int64 volume limit is a decimal string). */
export interface CsiJson {
  version: string;
  nodeId: string;
  maxVolumesPerNode: string;
  topology: Record<string, string>;
  vendorVersion: string;
  nodeCapabilities: string[];
}

/** PluginStatus.dra in the CLI's JSON. */
export interface DraJson {
  service: string;
  connected: boolean;
  driverConnected: boolean;
  instances: number;
  preferred: boolean;
}

/** What a registration socket's handler adds to its status message. */
export interface PluginDetails {
  csi?: CsiDriverStatus;
  dra?: DraDriverStatus;
}

/** Table rows (header first) for CSI drivers and DRA instances; none when no plugin has details. */
export function pluginDetailsTables(status: { plugins: PluginStatus[] }): string[][][] {
  const csi = status.plugins.filter((p) => p.csi !== undefined);
  const dra = status.plugins.filter((p) => p.dra !== undefined);
  const tables: string[][][] = [];
  if (csi.length > 0) {
    tables.push([
      ["CSI DRIVER", "VERSION", "NODE ID", "MAX VOLUMES", "TOPOLOGY", "VENDOR VERSION"],
      ...csi.map((p) => [
        p.name ?? "-",
        p.csi!.version,
        p.csi!.nodeId,
        p.csi!.maxVolumesPerNode === 0n ? "-" : String(p.csi!.maxVolumesPerNode),
        Object.entries(p.csi!.topology).map(([key, value]) => `${key}=${value}`).join(",") || "-",
        p.csi!.vendorVersion || "-",
      ]),
    ]);
  }
  if (dra.length > 0) {
    tables.push([
      ["DRA DRIVER", "DRIVER", "SERVICE", "INSTANCE", "PREFERRED", "SOCKET"],
      ...dra.map((p) => [
        p.name ?? "-",
        p.dra!.driverConnected ? "connected" : "DISCONNECTED",
        p.dra!.service || "-",
        p.dra!.connected ? "connected" : "lost",
        p.dra!.preferred ? "yes" : "no",
        p.socket,
      ]),
    ]);
  }
  return tables;
}

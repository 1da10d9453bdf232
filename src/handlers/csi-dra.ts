/**
 * The CSI and DRA handlers' long-lived registries, as the composition root
 * (src/agent/agent.ts) holds them: one of each per agent, outliving policy reloads,
 * and what they add to each plugin's status.
 */
import type { Logger } from "../log/logger.ts";
import { createLogger } from "../log/logger.ts";
import { CsiDrivers } from "./csi.ts";
import type { PluginDetails } from "./csi-dra-status.ts";
import { DraDrivers } from "./dra.ts";
import type { EndpointHolder, LiveEndpointLookup, WatchedEndpointRules } from "../endpoints/endpoint-rules.ts";
import type { SocketIdentity } from "../platform/pinned-socket.ts";

/** The long-lived registries behind the CSIPlugin and DRAPlugin handlers. */
export interface CsiDraDrivers {
  csi: CsiDrivers;
  dra: DraDrivers;
}

export interface CsiDraSettings {
  /** Default: quiet (probe and tests build handlers without an agent). */
  log?: Logger;
  dialTimeoutMs?: number;
  /** The policy's endpoint rules, read at each registration (default: the handlers' own). */
  endpointRules?: () => WatchedEndpointRules;
  /** The live plugins of other kinds (the device plugins'), whose endpoints a driver may not name. */
  liveElsewhere?: LiveEndpointLookup;
}

export function csiDraDrivers(settings: CsiDraSettings = {}): CsiDraDrivers {
  const { log = createLogger({ level: "error" }), dialTimeoutMs, endpointRules, liveElsewhere } = settings;
  return {
    csi: new CsiDrivers({ log, dialTimeoutMs, endpointRules, liveElsewhere }),
    dra: new DraDrivers({ log, dialTimeoutMs, endpointRules, liveElsewhere }),
  };
}

/** The CSI or DRA driver registered with `endpoint` (by path or inode) as its endpoint, for the device plugins' endpoint rule. */
export function csiDraEndpointHolder(drivers: CsiDraDrivers, endpoint: SocketIdentity): EndpointHolder | undefined {
  return drivers.csi.endpointHolder(endpoint) ?? drivers.dra.endpointHolder(endpoint);
}

/** What the CSI and DRA handlers add to a plugin's status. */
export function csiDraDetails(drivers: CsiDraDrivers, record: { socket: string; type: string | null; name: string | null }): PluginDetails {
  if (record.type === "CSIPlugin") return { csi: drivers.csi.details(record.socket, record.name) };
  if (record.type === "DRAPlugin") return { dra: drivers.dra.details(record.socket, record.name) };
  return {};
}

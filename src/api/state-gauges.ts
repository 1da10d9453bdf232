/**
 * The metrics that describe current state (plugins per socket, devices per
 * resource, allocated devices, listening sockets): computed at scrape time
 * from provider functions, so that they never drift from the state they
 * describe.
 */
import { Gauge, type Registry } from "prom-client";
import type { WatchLimitsReached } from "../pluginmanager/watch-limits.ts";
import { PLUGIN_STATES, type PluginRecord } from "./plugin-status.ts";

/** What the plugin gauges need of each known socket. */
export type PluginSample = Pick<PluginRecord, "socket" | "state">;

/** What the device gauge needs of each resource (the shape of a status resource). */
export interface ResourceSample {
  name: string;
  healthy: readonly string[];
  unhealthy: readonly string[];
}

/** What the allocated-devices gauge needs of each allocation. */
export interface AllocationSample {
  resource: string;
  devices: readonly string[];
}

/** One of edgeplug's listening sockets: `api` (api.socket) or `registration` (kubelet.sock). */
export interface SocketSample {
  socket: "api" | "registration" | "pod-resources";
  serving: boolean;
}

export interface StateSources {
  /** Every socket the plugin manager knows (its desired state of the world). */
  plugins: () => Iterable<PluginSample>;
  /** Every device-plugin resource (absent: no device gauges). */
  resources?: () => Iterable<ResourceSample>;
  /** Every allocation (absent: no allocated-devices gauge). */
  allocations?: () => Iterable<AllocationSample>;
  /** edgeplug's listening sockets and whether each is served at its path (absent: no socket gauge). */
  sockets?: () => Iterable<SocketSample>;
  /** What the plugin watcher leaves out past its limits, null while nothing (absent: no watch gauge). */
  watchLimits?: () => Pick<WatchLimitsReached, "skippedDirectories" | "skippedSockets"> | null;
}

/** Adds the state gauges to `registers`. */
export function registerStateGauges(sources: StateSources, registers: Registry[]): void {
  new Gauge({
    // The kubelet's name and labels, so existing dashboards keep working.
    name: "plugin_manager_total_plugins",
    help: "Number of plugins in Plugin Manager",
    labelNames: ["socket_path", "state"],
    registers,
    collect() {
      this.reset();
      for (const plugin of sources.plugins()) {
        this.inc({ socket_path: plugin.socket, state: "desired_state_of_world" });
        if (plugin.state === "registered") this.inc({ socket_path: plugin.socket, state: "actual_state_of_world" });
      }
    },
  });
  new Gauge({
    name: "edgeplug_plugins",
    help: "Known registration sockets by state (pending, registered, failed, stale).",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      for (const state of PLUGIN_STATES) this.set({ state }, 0);
      for (const plugin of sources.plugins()) this.inc({ state: plugin.state });
    },
  });
  new Gauge({
    name: "edgeplug_devices",
    help: "Devices advertised by device plugins, by resource and health.",
    labelNames: ["resource", "health"],
    registers,
    collect() {
      this.reset();
      for (const resource of sources.resources?.() ?? []) {
        this.set({ resource: resource.name, health: "healthy" }, resource.healthy.length);
        this.set({ resource: resource.name, health: "unhealthy" }, resource.unhealthy.length);
      }
    },
  });
  if (sources.allocations) {
    const allocationsOf = sources.allocations;
    new Gauge({
      name: "edgeplug_allocated_devices",
      help: "Devices allocated to owners, by resource.",
      labelNames: ["resource"],
      registers,
      collect() {
        this.reset();
        const perResource = new Map<string, number>();
        for (const { resource, devices } of allocationsOf()) perResource.set(resource, (perResource.get(resource) ?? 0) + devices.length);
        for (const [resource, count] of perResource) this.set({ resource }, count);
      },
    });
  }
  if (sources.sockets) {
    const socketsOf = sources.sockets;
    new Gauge({
      name: "edgeplug_socket_serving",
      help: "1 while a listening socket of edgeplug is served at its path, 0 while it is not (removed and not yet served again, or taken by another file).",
      labelNames: ["socket"],
      registers,
      collect() {
        this.reset();
        for (const { socket, serving } of socketsOf()) this.set({ socket }, serving ? 1 : 0);
      },
    });
  }
  if (sources.watchLimits) {
    const watchLimitsOf = sources.watchLimits;
    new Gauge({
      name: "edgeplug_watch_left_out",
      help: "Directories and sockets the plugin watcher leaves out past its limits (status's watchLimits); 0 while nothing is.",
      labelNames: ["kind"],
      registers,
      collect() {
        const reached = watchLimitsOf();
        this.set({ kind: "directories" }, reached?.skippedDirectories ?? 0);
        this.set({ kind: "sockets" }, reached?.skippedSockets ?? 0);
      },
    });
  }
}

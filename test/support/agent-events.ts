/**
 * Follows a running agent through its WatchEvents stream, so that tests
 * wait for what the agent reports (a resource turning unhealthy, a plugin
 * going stale) the moment it happens, instead of asking `status` again and
 * again. The view is the snapshot with every later event applied.
 */
import { EventEmitter } from "node:events";
import { createClient } from "@connectrpc/connect";
import type { AllocationStatus, Event, PluginStatus, ResourceStatus } from "../../src/gen/edgeplug/v1/agent_pb.ts";
import { Agent } from "../../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../../src/rpc/unix-channel.ts";
import { waitForEvent } from "./fake-plugin.ts";
import type { CleansUpAfter } from "./temp-dir.ts";

export interface AgentView {
  plugins: Map<string, PluginStatus>;
  resources: Map<string, ResourceStatus>;
  /** By owner. */
  allocations: Map<string, AllocationStatus[]>;
  /** Every event after the snapshot, in order. */
  events: Event[];
  /** The stream ended (the agent went away). */
  ended: boolean;
}

export interface AgentWatch {
  readonly view: AgentView;
  /** Resolves once `check(view)` holds; rejects naming `what` after `timeoutMs`. */
  until(what: string, check: (view: AgentView) => boolean, timeoutMs?: number): Promise<void>;
  close(): void;
}

/** Subscribes to the agent on `apiSocket`; resolves once the snapshot arrived. Closed after the test `t`. */
export async function watchAgent(t: CleansUpAfter, apiSocket: string): Promise<AgentWatch> {
  const channel = dialUnix(apiSocket);
  const abort = new AbortController();
  const changes = new EventEmitter();
  const view: AgentView = { plugins: new Map(), resources: new Map(), allocations: new Map(), events: [], ended: false };
  let snapshot = false;
  const close = () => {
    abort.abort();
    channel.close();
  };
  t.after(close);
  void (async () => {
    try {
      for await (const event of createClient(Agent, channel.transport).watchEvents({}, { signal: abort.signal })) {
        apply(view, event);
        if (event.kind.case === "snapshot") snapshot = true;
        changes.emit("change");
      }
    } catch {
      // closed by the test or by the agent going away: both end the view
    }
    view.ended = true;
    changes.emit("change");
  })();
  await waitForEvent(changes, `the WatchEvents snapshot from ${apiSocket}`, () => snapshot || view.ended, 10_000);
  if (!snapshot) throw new Error(`the agent at ${apiSocket} ended WatchEvents before its snapshot`);
  return {
    view,
    until: (what, check, timeoutMs = 10_000) => waitForEvent(changes, () => `${what} (last resources: ${describe(view)})`, () => check(view), timeoutMs),
    close,
  };
}

function apply(view: AgentView, event: Event): void {
  const kind = event.kind;
  if (kind.case !== "snapshot") view.events.push(event);
  switch (kind.case) {
    case "snapshot":
      for (const plugin of kind.value.plugins) view.plugins.set(plugin.socket, plugin);
      for (const resource of kind.value.resources) view.resources.set(resource.name, resource);
      for (const allocation of kind.value.allocations) {
        view.allocations.set(allocation.owner, [...(view.allocations.get(allocation.owner) ?? []), allocation]);
      }
      break;
    case "plugin":
      if (!kind.value.plugin) break;
      if (kind.value.removed) view.plugins.delete(kind.value.plugin.socket);
      else view.plugins.set(kind.value.plugin.socket, kind.value.plugin);
      break;
    case "resource":
      if (!kind.value.resource) break;
      if (kind.value.removed) view.resources.delete(kind.value.resource.name);
      else view.resources.set(kind.value.resource.name, kind.value.resource);
      break;
    case "allocation":
      if (kind.value.released || kind.value.allocations.length === 0) view.allocations.delete(kind.value.owner);
      else view.allocations.set(kind.value.owner, kind.value.allocations);
      break;
  }
}

function describe(view: AgentView): string {
  return JSON.stringify([...view.resources.values()].map((r) => ({ name: r.name, healthy: r.healthy, unhealthy: r.unhealthy, connected: r.connected })));
}

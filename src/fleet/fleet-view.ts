/**
 * What `edgeplug fleet status` makes of the retained topics: one row per
 * node from its online and status payloads (docs/fleet.md). Payloads come
 * from any client the broker lets publish, so each is parsed defensively:
 * a field of the wrong shape counts as absent, never as a crash.
 */
import { printable } from "../log/printable.ts";
import { age } from "../api/status.ts";
import { MAX_FLEET_PAYLOAD_BYTES } from "./topics.ts";

/** Nodes tracked at most; retained topics of more are counted, not kept. */
export const MAX_FLEET_NODES = 100_000;

export type NodeState = "online" | "offline" | "stale";

export interface NodeRow {
  node: string;
  state: NodeState;
  /** The node's own status says ok (null: no status read). */
  ok: boolean | null;
  /** The latest time the node wrote (online refreshes it every keepalive). */
  lastSeen: string | null;
  since: string | null;
  version: string | null;
  plugins: { registered: number; failed: number; stale: number; total: number };
  devices: { healthy: number; total: number };
  allocations: number;
  /** Why a payload of this node could not be read. */
  error: string | null;
}

interface NodeRecord {
  online: Record<string, unknown> | null;
  status: Record<string, unknown> | null;
  error: string | null;
}

export class FleetView {
  readonly #nodes = new Map<string, NodeRecord>();
  /** Nodes left out past {@link MAX_FLEET_NODES}. */
  leftOut = 0;

  /** Takes one retained payload; returns whether anything changed. */
  take(node: string, kind: "online" | "status", payload: Uint8Array): boolean {
    let record = this.#nodes.get(node);
    if (!record) {
      if (payload.length === 0) return false;
      if (this.#nodes.size >= MAX_FLEET_NODES) {
        this.leftOut += 1;
        return false;
      }
      record = { online: null, status: null, error: null };
      this.#nodes.set(node, record);
    }
    if (payload.length === 0) {
      // An empty retained payload clears the topic: a decommissioned node's cleanup.
      record[kind] = null;
      if (record.online === null && record.status === null) this.#nodes.delete(node);
      return true;
    }
    if (payload.length > MAX_FLEET_PAYLOAD_BYTES) {
      record.error = `${kind} payload of ${payload.length} bytes refused (at most ${MAX_FLEET_PAYLOAD_BYTES})`;
      return true;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("utf8"));
    } catch {
      record.error = `${kind} payload is not JSON`;
      return true;
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      record.error = `${kind} payload is not a JSON object`;
      return true;
    }
    record[kind] = parsed as Record<string, unknown>;
    record.error = null;
    return true;
  }

  get size(): number {
    return this.#nodes.size;
  }

  /** Rows sorted by node name; `staleMs` 0 never calls a node stale. */
  rows(now: Date, staleMs: number): NodeRow[] {
    const rows: NodeRow[] = [];
    for (const [node, record] of this.#nodes) rows.push(toRow(node, record, now, staleMs));
    return rows.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  }
}

function toRow(node: string, { online, status, error }: NodeRecord, now: Date, staleMs: number): NodeRow {
  const text = (value: unknown) => (typeof value === "string" && value.length <= 64 ? value : null);
  const lastSeen = text(online?.updatedAt) ?? text(online?.since);
  let state: NodeState = online?.online === true ? "online" : "offline";
  if (state === "online" && staleMs > 0) {
    const seen = lastSeen === null ? Number.NaN : Date.parse(lastSeen);
    if (!(now.getTime() - seen <= staleMs)) state = "stale";
  }
  const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
  const plugins = { registered: 0, failed: 0, stale: 0, total: 0 };
  for (const plugin of list(status?.plugins)) {
    plugins.total += 1;
    const pluginState = (plugin as { state?: unknown } | null)?.state;
    if (pluginState === "registered") plugins.registered += 1;
    else if (pluginState === "failed") plugins.failed += 1;
    else if (pluginState === "stale") plugins.stale += 1;
  }
  const devices = { healthy: 0, total: 0 };
  for (const resource of list(status?.resources)) {
    const { healthy, capacity } = (resource ?? {}) as { healthy?: unknown; capacity?: unknown };
    devices.healthy += Array.isArray(healthy) ? healthy.length : 0;
    devices.total += typeof capacity === "number" && Number.isSafeInteger(capacity) && capacity >= 0 ? capacity : 0;
  }
  return {
    node,
    state,
    ok: typeof status?.ok === "boolean" ? status.ok : null,
    lastSeen,
    since: text(online?.since),
    version: text(online?.version),
    plugins,
    devices,
    allocations: list(status?.allocations).length,
    error,
  };
}

/** A node needs attention: offline, stale, its status not ok (or unread), or a payload unreadable. */
export function rowHealthy(row: NodeRow): boolean {
  return row.state === "online" && row.ok === true && row.error === null;
}

/** The JSON of `fleet status --output json`. */
export function fleetToJson(rows: NodeRow[], leftOut: number): Record<string, unknown> {
  const count = (state: NodeState) => rows.filter((row) => row.state === state).length;
  return {
    ok: rows.every(rowHealthy) && leftOut === 0,
    nodes: rows.length,
    online: count("online"),
    offline: count("offline"),
    stale: count("stale"),
    notOk: rows.filter((row) => row.ok !== true).length,
    leftOut,
    rows,
  };
}

/** A table, one row per node, every value from the broker with control characters escaped. */
export function fleetToText(rows: NodeRow[], leftOut: number, now: Date): string {
  const header = ["NODE", "STATE", "OK", "LAST SEEN", "PLUGINS REG/FAILED/STALE", "DEVICES HEALTHY/TOTAL", "ALLOCATIONS", "ERROR"];
  const cells = rows.map((row) =>
    [
      row.node,
      row.state,
      row.ok === null ? "-" : row.ok ? "yes" : "NO",
      row.lastSeen === null || Number.isNaN(Date.parse(row.lastSeen)) ? "-" : `${age(new Date(row.lastSeen), now)} ago`,
      `${row.plugins.registered}/${row.plugins.failed}/${row.plugins.stale}`,
      `${row.devices.healthy}/${row.devices.total}`,
      String(row.allocations),
      row.error ?? "",
    ].map(printable)
  );
  // A loop, not Math.max(...cells): a spread of 100,000 arguments overflows the stack.
  const widths = header.map((title) => title.length);
  for (const cell of cells) cell.forEach((value, column) => (widths[column] = Math.max(widths[column]!, value.length)));
  const render = (line: string[]) => line.map((cell, column) => (column === line.length - 1 ? cell : cell.padEnd(widths[column]!))).join("  ").trimEnd();
  const json = fleetToJson(rows, leftOut);
  const summary = `${json.nodes} nodes: ${json.online} online, ${json.offline} offline, ${json.stale} stale, ${json.notOk} not ok` +
    (leftOut > 0 ? `, ${leftOut} more left out (at most ${MAX_FLEET_NODES})` : "");
  if (rows.length === 0) return `${summary}\n`;
  return [summary, "", render(header), ...cells.map(render)].join("\n") + "\n";
}

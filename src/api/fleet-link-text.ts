/** The fleet link in `status`'s text: one line while `fleet:` is on. */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { printable } from "../log/printable.ts";

export function fleetLinkLines({ fleet }: StatusResponse, now: Date = new Date()): string[] {
  if (!fleet) return [];
  const last = fleet.lastPublishAt ? `last publish ${Math.max(0, Math.round((now.getTime() - timestampDate(fleet.lastPublishAt).getTime()) / 1000))}s ago` : "nothing published yet";
  const why = fleet.error !== undefined ? `: ${fleet.error}` : "";
  const counts = `${fleet.publishes} publishes, ${fleet.drops} dropped, ${fleet.reconnects} reconnects, ${fleet.queuedEvents} events queued`;
  return [printable(`fleet ${fleet.state} ${fleet.broker}${why} (${last}; ${counts})`)];
}

/**
 * What a listener tells of requests it could not take as they came: those
 * whose `:authority` was no host (served as `localhost`, authority.ts) and
 * those node:http2 reset before any handler saw them. Any client can send as
 * many of either as it likes, so each is counted, and logged the first time
 * and then at most once a minute per listener with the count in between.
 */
import type * as http2 from "node:http2";
import type { Logger } from "../log/logger.ts";

export interface RequestReports {
  /** A request's `:authority` (or `Host`) was no host; it was served as `localhost`. */
  authorityReplaced(authority: string | undefined): void;
  /** `count` requests of one connection were reset by node:http2 before edgeplug saw them. */
  refusedByHttp2(count: number): void;
}

/** Where a listener's reports are counted (a metric each); absent, they are only logged. */
export interface RequestCounters {
  authorityReplaced(): void;
  refusedByHttp2(count: number): void;
}

/** At most one log line a minute per listener and kind. */
const REPORT_INTERVAL_MS = 60_000;

export function requestReporter(log: Logger, listener: string, counters?: RequestCounters): RequestReports {
  const replaced = everyMinute();
  const refused = everyMinute();
  return {
    authorityReplaced(authority) {
      counters?.authorityReplaced();
      const requests = replaced(1);
      if (requests > 0) log.info("request authority is no host; served as localhost", { listener, authority: authority ?? null, requests });
    },
    refusedByHttp2(count) {
      counters?.refusedByHttp2(count);
      const requests = refused(count);
      if (requests > 0) log.info("requests reset by the HTTP/2 layer before edgeplug saw them", { listener, requests });
    },
  };
}

/** Adds `count`; answers the total to log when a line is due, else 0. */
function everyMinute(): (count: number) => number {
  let lastLogged = -Infinity;
  let unlogged = 0;
  return (count) => {
    unlogged += count;
    const now = performance.now();
    if (now - lastLogged < REPORT_INTERVAL_MS) return 0;
    lastLogged = now;
    const total = unlogged;
    unlogged = 0;
    return total;
  };
}

/**
 * Tells `reports` of the requests of `session` that node:http2 reset while
 * decoding their headers (an unknown or misplaced pseudo-header, an
 * upper-case or connection-specific header field...): nghttp2 refuses those
 * before Node emits any event, so they are inferred from the stream numbers.
 * Clients number their requests 1, 3, 5... (every gRPC library does): a
 * stream that arrives past the next number expected, or a connection whose
 * last stream nghttp2 processed is past the last one that arrived when its
 * client hangs up, had the ones in between refused. A client that skips
 * numbers on purpose is counted as if refused; it can only inflate a counter.
 */
export function reportRefusedStreams(session: http2.ServerHttp2Session, reports: RequestReports): void {
  let nextExpected = 1;
  session.on("stream", (stream: http2.ServerHttp2Stream) => {
    const id = stream.id;
    if (id === undefined || id % 2 === 0) return;
    if (id > nextExpected) reports.refusedByHttp2((id - nextExpected) / 2);
    nextExpected = Math.max(nextExpected, id + 2);
  });
  // Read when the client ends the connection, while nghttp2's state is still there (it is gone at "close").
  session.socket.once("end", () => {
    const lastProcessed = session.state?.lastProcStreamID;
    if (lastProcessed !== undefined && lastProcessed >= nextExpected) reports.refusedByHttp2((lastProcessed - nextExpected) / 2 + 1);
  });
}

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { EventEmitter, once } from "node:events";
import { createLogger } from "../log/logger.ts";
import { CLIENT_PREFACE, FLAG, FRAME, http2Frame } from "../../test/support/http2-frames.ts";
import { encodeLiteral, type HeaderField } from "./hpack.ts";
import { reportRefusedStreams, requestReporter } from "./request-reports.ts";

const GOOD: HeaderField[] = [
  { name: ":method", value: "POST" },
  { name: ":scheme", value: "http" },
  { name: ":path", value: "/x" },
  { name: ":authority", value: "localhost" },
];
const ODD: HeaderField[] = [...GOOD, { name: ":bogus", value: "1" }];

/** HEADERS with END_STREAM on `streamId`: a whole request. */
const request = (streamId: number, fields: HeaderField[]) =>
  http2Frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, streamId, Buffer.concat(fields.map((field) => encodeLiteral("none", 0, field))));

test("requests node:http2 resets unseen are counted from the stream numbers: a gap before a served one, and those past the last served when the client hangs up", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rr-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const socketPath = path.join(dir, "h2.sock");
  const refused: number[] = [];
  const reported = new EventEmitter();
  const served: number[] = [];
  const server = http2.createServer();
  server.on("session", (session) =>
    reportRefusedStreams(session, {
      authorityReplaced: () => {},
      refusedByHttp2: (count) => {
        refused.push(count);
        reported.emit("report");
      },
    }));
  server.on("stream", (stream) => {
    served.push(stream.id!);
    stream.respond({ ":status": 200 });
    stream.end();
  });
  server.listen(socketPath);
  await once(server, "listening");
  t.after(() => server.close());

  const client = net.connect(socketPath);
  client.on("data", () => {});
  client.write(Buffer.concat([
    CLIENT_PREFACE,
    http2Frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(0)),
    request(1, ODD),
    request(3, ODD),
    request(5, GOOD),
    request(7, ODD),
  ]));
  // Stream 5 is the only one served: the two before it were reset unseen.
  if (refused.length === 0) await once(reported, "report", { signal: AbortSignal.timeout(10_000) });
  assert.deepEqual([served, refused], [[5], [2]]);
  // The hang-up tells of stream 7.
  client.end();
  if (refused.length === 1) await once(reported, "report", { signal: AbortSignal.timeout(10_000) });
  assert.deepEqual(refused, [2, 1]);
});

test("a listener logs the first reset requests at once, then at most once a minute with the count in between; every one is counted", () => {
  const lines: Record<string, unknown>[] = [];
  const counted: number[] = [];
  const reports = requestReporter(createLogger({ write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>) }), "registration", {
    authorityReplaced: () => {},
    refusedByHttp2: (count) => counted.push(count),
  });
  reports.refusedByHttp2(2);
  reports.refusedByHttp2(3);
  reports.refusedByHttp2(1);
  assert.deepEqual(counted, [2, 3, 1]);
  assert.deepEqual(lines.map((line) => [line.msg, line.listener, line.requests]), [["requests reset by the HTTP/2 layer before edgeplug saw them", "registration", 2]]);
});

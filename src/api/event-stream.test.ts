import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { StatusResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { EventStream } from "./event-stream.ts";

test("past its subscriber cap WatchEvents is refused with resource_exhausted until a stream ends", async () => {
  const stream = new EventStream(() => create(StatusResponseSchema, { node: "n" }), 10, 2);
  const stops = [new AbortController(), new AbortController()];
  const open = stops.map((stop) => stream.subscribe(stop.signal));
  for (const subscription of open) assert.equal((await subscription.next()).value?.kind.case, "snapshot");
  assert.equal(stream.subscriberCount, 2);

  await assert.rejects(stream.subscribe(new AbortController().signal).next(), (error) => {
    assert.equal(ConnectError.from(error).code, Code.ResourceExhausted);
    assert.match(ConnectError.from(error).rawMessage, /too many WatchEvents streams open \(2\)/);
    return true;
  });

  stops[0]!.abort();
  await open[0]!.next();
  assert.equal(stream.subscriberCount, 1);
  const third = stream.subscribe(new AbortController().signal);
  assert.equal((await third.next()).value?.kind.case, "snapshot");
  stream.close();
  await Promise.all([open[1]!.next(), third.next()]);
});

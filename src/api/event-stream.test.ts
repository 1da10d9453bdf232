import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { PluginEventSchema, StatusResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
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

test("a subscriber that falls more than its queue behind is cut off with resource_exhausted; the others get every event", async () => {
  const stream = new EventStream(() => create(StatusResponseSchema, { node: "n" }), 3);
  const slow = stream.subscribe(new AbortController().signal);
  const fast = stream.subscribe(new AbortController().signal);
  assert.equal((await slow.next()).value?.kind.case, "snapshot");
  assert.equal((await fast.next()).value?.kind.case, "snapshot");
  const event = (socket: string) => ({ case: "plugin" as const, value: create(PluginEventSchema, { plugin: { socket } }) });
  const received: string[] = [];
  for (let i = 0; i < 4; i++) {
    stream.publish(event(`/r/${i}.sock`));
    const next = await fast.next();
    if (next.value?.kind.case === "plugin") received.push(next.value.kind.value.plugin!.socket);
  }
  assert.deepEqual(received, ["/r/0.sock", "/r/1.sock", "/r/2.sock", "/r/3.sock"], "the fast subscriber kept up");
  await assert.rejects(slow.next(), (error) => {
    assert.equal(ConnectError.from(error).code, Code.ResourceExhausted);
    assert.match(ConnectError.from(error).rawMessage, /fell more than 3 events behind; subscribe again/);
    return true;
  });
  assert.equal(stream.subscriberCount, 1, "the slow subscriber's queue is gone");
  stream.close();
  assert.equal((await fast.next()).done, true);
});

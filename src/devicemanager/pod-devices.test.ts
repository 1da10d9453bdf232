import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { ContainerAllocateResponseSchema } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { answerBytes, PodDevices } from "./pod-devices.ts";

const entry = (owner: string, container: string, padding: number) => ({
  owner,
  container,
  resource: "acme.io/gpu",
  byNode: new Map([[-1, [`${owner}-${container}`]]]),
  response: create(ContainerAllocateResponseSchema, { envs: { PADDING: "x".repeat(padding) } }),
});

test("the Allocate answers' size that the allocation limit reads follows every add, replacement and release", () => {
  const pods = new PodDevices();
  const [a, b, again] = [entry("a", "main", 1000), entry("b", "main", 5000), entry("a", "main", 200)];
  pods.add(a);
  pods.add(b);
  assert.equal(pods.allAnswersBytes, answerBytes(a.response) + answerBytes(b.response));
  pods.add(again);
  assert.equal(pods.allAnswersBytes, answerBytes(again.response) + answerBytes(b.response), "a container's entry replaced");
  pods.release("b");
  assert.equal(pods.allAnswersBytes, answerBytes(again.response));
  pods.release("a");
  assert.equal(pods.allAnswersBytes, 0);
});

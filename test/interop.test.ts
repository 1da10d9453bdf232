/**
 * Interop on real unix sockets between edgeplug's Connect stack (protobuf-es
 * codec) and @grpc/grpc-js peers whose messages @grpc/proto-loader encodes
 * from the same .proto files (protobuf.js codec):
 *
 * - grpc-js servers (plugins) called by the Connect client (dialUnix):
 *   pluginregistration.Registration, v1beta1.DevicePlugin, csi.v1 Identity and Node,
 *   DRAPlugin v1 and v1beta1;
 * - the Connect server (serveUnix) called by grpc-js clients:
 *   v1beta1.Registration, v1.PodResourcesLister, edgeplug.v1.Agent.
 *
 * Every request and response is generated from the message descriptors with
 * every field set to a distinct non-default value (64-bit integers beyond
 * 2^53, negative int32, uint32 above 2^31, every enum, every oneof case, two
 * entries in each list and map); a coverage test fails if any field of any
 * message reachable from these services was never exercised. Each peer
 * asserts the request it received, and each test asserts what came back.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import type { DescService, Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, createClient } from "@connectrpc/connect";
import { Registration as PluginRegistration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { DevicePlugin, Registration as DevicePluginRegistration } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { PodResourcesLister } from "../src/gen/podresources/v1/api_pb.ts";
import { Identity, Node } from "../src/gen/csi/v1/csi_pb.ts";
import { DRAPlugin as DraV1 } from "../src/gen/dra/v1/api_pb.ts";
import { DRAPlugin as DraV1beta1 } from "../src/gen/dra/v1beta1/api_pb.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";
import { csiV1, devicePluginV1beta1, draPackage, edgeplugV1, pluginRegistration, podResourcesV1, serviceOf, toLoaderObject } from "./support/kubelet-protos.ts";
import { callUnary, grpcClient, type ServiceBinding, startGrpcServer } from "./support/grpc-peers.ts";
import { tempDir } from "./support/temp-dir.ts";
import { describeMismatch, type Exchange, exchangesFor, loaderMismatch, reachableMessages, recordSetFields } from "./support/interop-data.ts";

const PLUGIN_SIDE = { PluginRegistration, DevicePlugin, Identity, Node, DraV1, DraV1beta1 };
const AGENT_SIDE = { DevicePluginRegistration, PodResourcesLister, Agent };
const exchanges = new Map<DescService, Map<string, Exchange>>(
  [...Object.values(PLUGIN_SIDE), ...Object.values(AGENT_SIDE)].map((service) => [service, exchangesFor(service)]),
);

function exchangeOf(service: DescService, method: string): Exchange {
  const found = exchanges.get(service)?.get(method);
  if (found === undefined) throw new Error(`no exchange for ${service.typeName}/${method}`);
  return found;
}

// ---------------------------------------------------------------------------
// grpc-js servers answering the exchanges, asserting each request.

/** grpc-js handlers for every method of `service`, checking requests against the exchanges. */
function grpcJsImplementation(service: DescService, calls: string[]): grpc.UntypedServiceImplementation {
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const method of service.methods) {
    const exchange = exchangeOf(service, method.name);
    const expectedRequest = toLoaderObject(method.input, exchange.request);
    const responses = exchange.responses.map((response) => toLoaderObject(method.output, response));
    const where = `grpc-js ${service.typeName}/${method.name} received an unexpected request`;
    if (method.methodKind === "unary") {
      implementation[method.name] = (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        calls.push(method.name);
        const problem = loaderMismatch(call.request, expectedRequest);
        if (problem !== undefined) callback({ code: grpc.status.INVALID_ARGUMENT, details: `${where}: ${problem}` });
        else callback(null, responses[0]);
      };
    } else if (method.methodKind === "server_streaming") {
      implementation[method.name] = (call: grpc.ServerWritableStream<unknown, unknown>) => {
        calls.push(method.name);
        const problem = loaderMismatch(call.request, expectedRequest);
        if (problem !== undefined) {
          call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: `${where}: ${problem}` });
          return;
        }
        for (const response of responses) call.write(response);
        call.end();
      };
    } else {
      throw new Error(`${service.typeName}/${method.name}: ${method.methodKind} is not used by the kubelet protocols`);
    }
  }
  return implementation;
}

/** Calls every method of `service` through the Connect client and asserts each answer. */
async function callEveryMethodWithConnect(service: DescService, socketPath: string): Promise<void> {
  const channel = dialUnix(socketPath, { connectTimeoutMs: 5_000 });
  try {
    const client = createClient(service, channel.transport) as unknown as Record<string, (request: Message, options: object) => unknown>;
    for (const method of service.methods) {
      const exchange = exchangeOf(service, method.name);
      const call = client[method.localName]!.bind(client);
      const answers: Message[] = [];
      if (method.methodKind === "unary") {
        answers.push((await call(exchange.request, { timeoutMs: 5_000 })) as Message);
      } else {
        for await (const answer of call(exchange.request, { timeoutMs: 5_000 }) as AsyncIterable<Message>) answers.push(answer);
      }
      assert.equal(answers.length, exchange.responses.length, `${service.typeName}/${method.name}: number of messages`);
      answers.forEach((answer, i) => {
        const problem = describeMismatch(method.output, answer, exchange.responses[i]!);
        assert.equal(problem, undefined, `${service.typeName}/${method.name} answer #${i}: ${problem}`);
      });
    }
  } finally {
    channel.close();
    await channel.closed;
  }
}

const pluginSidePeers: Array<[DescService, () => grpc.ServiceClientConstructor]> = [
  [PluginRegistration, () => pluginRegistration()],
  [DevicePlugin, () => serviceOf(devicePluginV1beta1(), "DevicePlugin")],
  [Identity, () => serviceOf(csiV1(), "Identity")],
  [Node, () => serviceOf(csiV1(), "Node")],
  [DraV1, () => serviceOf(draPackage("v1"), "DRAPlugin")],
  [DraV1beta1, () => serviceOf(draPackage("v1beta1"), "DRAPlugin")],
];

for (const [service, loaderService] of pluginSidePeers) {
  test(`Connect client ↔ grpc-js ${service.typeName} server: every RPC, every field`, async (t) => {
    const dir = tempDir(t);
    const calls: string[] = [];
    const binding: ServiceBinding = [loaderService().service, grpcJsImplementation(service, calls)];
    const peer = await startGrpcServer(path.join(dir, "plugin.sock"), [binding]);
    t.after(() => peer.close());
    await callEveryMethodWithConnect(service, peer.socketPath);
    assert.deepEqual(calls, service.methods.map((m) => m.name), "the grpc-js server saw each call once, in order");
  });
}

// ---------------------------------------------------------------------------
// The Connect server (serveUnix) answering the exchanges, called by grpc-js.

/** Connect handlers for every method of `service`, checking requests against the exchanges. */
function connectRoutes(service: DescService, calls: string[]): (router: ConnectRouter) => void {
  const implementation: Record<string, unknown> = {};
  for (const method of service.methods) {
    const exchange = exchangeOf(service, method.name);
    const check = (request: Message) => {
      calls.push(method.name);
      const problem = describeMismatch(method.input, request, exchange.request);
      if (problem !== undefined) {
        throw new ConnectError(`Connect ${service.typeName}/${method.name} received an unexpected request: ${problem}`, Code.InvalidArgument);
      }
    };
    implementation[method.localName] = method.methodKind === "server_streaming"
      ? async function* (request: Message) {
        check(request);
        yield* exchange.responses;
      }
      : (request: Message) => {
        check(request);
        return exchange.responses[0];
      };
  }
  return (router) => router.service(service, implementation as never);
}

/** Calls every method of `service` on `socketPath` with a grpc-js client and asserts each answer. */
async function callEveryMethodWithGrpcJs(service: DescService, loaderService: grpc.ServiceClientConstructor, socketPath: string) {
  const client = grpcClient<grpc.Client>(loaderService, socketPath);
  try {
    for (const method of service.methods) {
      const exchange = exchangeOf(service, method.name);
      const request = toLoaderObject(method.input, exchange.request);
      const expected = exchange.responses.map((response) => toLoaderObject(method.output, response));
      let answers: unknown[];
      if (method.methodKind === "unary") {
        answers = [await callUnary(client, method.name, request)];
      } else {
        answers = await readToEnd(
          (client as unknown as Record<string, (r: object) => grpc.ClientReadableStream<unknown>>)[method.name]!.call(client, request),
        );
      }
      assert.deepStrictEqual(answers, expected, `${service.typeName}/${method.name}: what grpc-js decoded`);
    }
  } finally {
    client.close();
  }
}

function readToEnd<T>(stream: grpc.ClientReadableStream<T>): Promise<T[]> {
  const received: T[] = [];
  return new Promise((resolve, reject) => {
    stream.on("data", (message: T) => received.push(message));
    stream.on("error", reject);
    stream.on("end", () => resolve(received));
  });
}

const agentSideServices: Array<[DescService, () => grpc.ServiceClientConstructor]> = [
  [DevicePluginRegistration, () => serviceOf(devicePluginV1beta1(), "Registration")],
  [PodResourcesLister, () => serviceOf(podResourcesV1(), "PodResourcesLister")],
  [Agent, () => serviceOf(edgeplugV1(), "Agent")],
];

test("grpc-js clients ↔ Connect server (serveUnix): v1beta1.Registration, v1.PodResourcesLister, edgeplug.v1.Agent on one socket", async (t) => {
  const dir = tempDir(t);
  const calls: string[] = [];
  const server = await serveUnix(path.join(dir, "agent.sock"), (router) => {
    for (const [service] of agentSideServices) connectRoutes(service, calls)(router);
  });
  t.after(() => server.close());
  for (const [service, loaderService] of agentSideServices) {
    await t.test(service.typeName, () => callEveryMethodWithGrpcJs(service, loaderService(), server.socketPath));
  }
  const expectedCalls = agentSideServices.flatMap(([service]) => service.methods.map((m) => m.name));
  assert.deepEqual(calls, expectedCalls, "the Connect server saw each call once, in order");
});

test("every field of every message reachable from the tested services is set in some exchanged message", () => {
  const services = [...exchanges.keys()];
  const seen = new Map<string, Set<string>>();
  for (const byMethod of exchanges.values()) {
    for (const { method, request, responses } of byMethod.values()) {
      recordSetFields(method.input, request, seen);
      for (const response of responses) recordSetFields(method.output, response, seen);
    }
  }
  const missing: string[] = [];
  for (const [typeName, desc] of reachableMessages(services)) {
    if (!seen.has(typeName)) missing.push(`${typeName} (never sent)`);
    for (const field of desc.fields) if (!seen.get(typeName)?.has(field.name)) missing.push(`${typeName}.${field.name}`);
  }
  assert.deepEqual(missing, []);
});

/**
 * `edgeplug allocate` and `edgeplug release` on the built executable: what
 * they print (text with control characters escaped, the API's JSON), exit
 * codes (0, 1 refused with the kubelet's text, 1 agent unreachable, 2 bad
 * usage naming the bound), against a @grpc/grpc-js device plugin that
 * registered through the daemon's watched directory.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { startExample } from "./support/example-process.ts";
import { waitUntil } from "./support/wait.ts";
import { startFakeDevicePlugin, type TestDevice } from "./support/fake-device-plugin.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, startAgent } from "./support/device-node.ts";

const GPU = "acme.io/gpu";

test("bad usage exits 2 naming what was wrong, before any agent is dialled", { concurrency: true }, async (t) => {
  const api = ["--api", "/nonexistent/api.sock"];
  const cases: Array<[string, string[], RegExp]> = [
    ["no owner", ["allocate", `${GPU}=1`, ...api], /--owner is required/],
    ["empty owner", ["allocate", "--owner", "", `${GPU}=1`, ...api], /--owner must not be empty/],
    ["long owner", ["allocate", "--owner", "x".repeat(254), `${GPU}=1`, ...api], /--owner is 254 characters long; at most 253 \(the length of a Kubernetes object name\)/],
    ["owner with a newline", ["allocate", "--owner", "a\nb", `${GPU}=1`, ...api], /--owner "a\\nb" contains a control character/],
    ["long container", ["allocate", "--owner", "o", "--container", "c".repeat(64), `${GPU}=1`, ...api], /--container is 64 characters long; at most 63/],
    ["no request", ["allocate", "--owner", "o", ...api], /give at least one RESOURCE=COUNT/],
    ["no count", ["allocate", "--owner", "o", GPU, ...api], /"acme\.io\/gpu": expected RESOURCE=COUNT/],
    ["not a resource name", ["allocate", "--owner", "o", "gpu=1", ...api], /"gpu" is not an extended resource name/],
    ["count 0", ["allocate", "--owner", "o", `${GPU}=0`, ...api], /COUNT must be at least 1/],
    ["count not a number", ["allocate", "--owner", "o", `${GPU}=two`, ...api], /COUNT must be a whole number, got "two"/],
    ["count absurd", ["allocate", "--owner", "o", `${GPU}=99999999999`, ...api], /COUNT must be at most 4294967295/],
    ["twice", ["allocate", "--owner", "o", `${GPU}=1`, `${GPU}=2`, ...api], /acme\.io\/gpu is given twice/],
    ["too many", ["allocate", "--owner", "o", ...Array.from({ length: 65 }, (_, i) => `acme.io/r${i}=1`), ...api], /65 RESOURCE=COUNT given; at most 64/],
    ["bad timeout", ["allocate", "--owner", "o", `${GPU}=1`, "--timeout", "0s", ...api], /--timeout: must be more than 0/],
    ["release without owner", ["release", ...api], /release: --owner is required/],
    ["release with an argument", ["release", "--owner", "o", "extra", ...api], /unexpected argument "extra"/],
  ];
  await Promise.all(
    cases.map(([name, args, expected]) =>
      t.test(name, async () => {
        const result = await runEdgeplug(args);
        assert.equal(result.code, 2, result.stderr);
        assert.match(result.stderr, expected);
        assert.equal(result.stdout, "");
      })
    ),
  );
});

test("an agent that is not there: exit 1 saying so", async () => {
  for (const command of [["allocate", "--owner", "o", `${GPU}=1`], ["release", "--owner", "o"]]) {
    const result = await runEdgeplug([...command, "--api", "/nonexistent/api.sock"]);
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, new RegExp(`edgeplug ${command[0]}: agent at /nonexistent/api.sock unreachable: no socket there`));
  }
});

test("allocate prints the plugin's answer, refusals exit 1 with the kubelet's text, release frees the devices", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  const devices: TestDevice[] = ["gpu0", "gpu1", "gpu2"].map((ID) => ({ ID, health: "Healthy" }));
  const plugin = await startFakeDevicePlugin({
    socketPath: path.join(node.registry, "gpu.sock"),
    devices,
    watchedAs: { name: GPU },
    preStartRequired: true,
    getPreferredAllocationAvailable: true,
    preferred: (available, _must, size) => [...available].reverse().slice(0, size),
    allocateResponse: (ids) => ({
      envs: { GPUS: ids.join(","), EVIL: "a\u001b[2Jb" },
      mounts: [{ container_path: "/usr/lib/gpu", host_path: "/opt/gpu/lib", read_only: true }],
      devices: ids.map((id) => ({ container_path: `/dev/${id}`, host_path: `/dev/${id}`, permissions: "rw" })),
      annotations: { "acme.io/gpus": ids.join(",") },
      cdi_devices: ids.map((id) => ({ name: `acme.io/gpu=${id}` })),
    }),
  });
  node.after(() => plugin.stop());
  const agent = await watchAgent(node, node.apiSocket);
  await agent.until("3 healthy devices", (view) => view.resources.get(GPU)?.healthy.length === 3);
  const api = ["--api", node.apiSocket];
  const first = await runEdgeplug(["allocate", "--owner", "job-1", `${GPU}=2`, ...api]);
  assert.equal(first.code, 0, first.stderr);
  assert.equal(
    first.stdout,
    [
      "allocated to job-1 (container main)",
      `${GPU}: gpu2, gpu1`,
      "  env         EVIL=a\\e[2Jb",
      "  env         GPUS=gpu2,gpu1",
      "  mount       /opt/gpu/lib -> /usr/lib/gpu (read-only)",
      "  device      /dev/gpu2 -> /dev/gpu2 (rw)",
      "  device      /dev/gpu1 -> /dev/gpu1 (rw)",
      "  annotation  acme.io/gpus=gpu2,gpu1",
      "  cdi         acme.io/gpu=gpu2",
      "  cdi         acme.io/gpu=gpu1",
      "",
    ].join("\n"),
  );
  assert.deepEqual(plugin.preferredCalls.map((c) => [c.available, c.size]), [[["gpu0", "gpu1", "gpu2"], 2]]);
  assert.deepEqual(plugin.preStartCalls, [["gpu2", "gpu1"]]);

  const json = await runEdgeplug(["allocate", "--owner", "job-1", `${GPU}=2`, "--output", "json", ...api]);
  assert.equal(json.code, 0, json.stderr);
  const answer = JSON.parse(json.stdout) as { allocations: Array<{ owner: string; devices: string[]; response: { envs: Record<string, string>; cdiDevices: { name: string }[] } }> };
  assert.deepEqual(answer.allocations.map((a) => [a.owner, a.devices, a.response.envs.EVIL, a.response.cdiDevices.length]), [["job-1", ["gpu2", "gpu1"], "a\u001b[2Jb", 2]]);
  assert.equal(plugin.allocateCalls.length, 1, "the same request again is answered from the record");

  const over = await runEdgeplug(["allocate", "--owner", "job-2", "--container", "side", `${GPU}=2`, ...api]);
  assert.deepEqual([over.code, over.stdout], [1, ""]);
  assert.equal(over.stderr, `edgeplug allocate: refused: requested number of devices unavailable for ${GPU}. Requested: 2, Available: 1\n`);
  const unknown = await runEdgeplug(["allocate", "--owner", "job-2", "acme.io/none=1", "--config", node.policy]);
  assert.equal(unknown.code, 1);
  assert.equal(unknown.stderr, "edgeplug allocate: refused: cannot allocate unregistered device acme.io/none\n");
  const changed = await runEdgeplug(["allocate", "--owner", "job-1", `${GPU}=1`, ...api]);
  assert.equal(changed.code, 1);
  assert.match(changed.stderr, /refused: pod "job-1" container "main" changed request for resource "acme\.io\/gpu" from 2 to 1/);

  const released = await runEdgeplug(["release", "--owner", "job-1", ...api]);
  assert.deepEqual([released.code, released.stdout], [0, `released job-1 container main: ${GPU} gpu2, gpu1\n`]);
  const again = await runEdgeplug(["release", "--owner", "job-1", "--output", "json", ...api]);
  assert.deepEqual([again.code, JSON.parse(again.stdout)], [0, { released: [] }]);
  const text = await runEdgeplug(["release", "--owner", "job-1", ...api]);
  assert.equal(text.stdout, "job-1 held no devices; nothing released\n");
  const afterwards = await runEdgeplug(["allocate", "--owner", "job-2", `${GPU}=3`, ...api]);
  assert.equal(afterwards.code, 0, afterwards.stderr);
});

test("allocate --wait waits for a device plugin that registers after the request, and gives up after DUR naming what is missing", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  const refused = await runEdgeplug(["allocate", "--api", node.apiSocket, "--owner", "early", "example.com/dev=2"]);
  assert.equal(refused.code, 1, "without --wait the request is refused at once");

  const gaveUp = await runEdgeplug(["allocate", "--api", node.apiSocket, "--owner", "early", "--wait", "1s", "example.com/dev=2"]);
  assert.equal(gaveUp.code, 1, gaveUp.stderr);
  assert.match(gaveUp.stderr, /^edgeplug allocate: waiting up to 1s: example\.com\/dev: no device plugin has registered it$/m);
  assert.match(gaveUp.stderr, /^edgeplug allocate: not ready within 1s \(--wait\), nothing allocated: example\.com\/dev: no device plugin has registered it$/m);

  const waiting = startEdgeplug(["allocate", "--api", node.apiSocket, "--owner", "late", "--wait", "30s", "--output", "json", "example.com/dev=2"]);
  node.after(() => waiting.terminate());
  await waitUntil(() => waiting.stderr().includes("waiting up to 30s"), "allocate to say it waits", 10_000);
  const plugin = startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--resource", "example.com/dev", "--devices", "2", "--numa-nodes", "0", "--no-pre-start", "--no-preferred"]);
  await plugin.waitForLine(/^registered$/);
  const { code } = await waiting.exited;
  assert.equal(code, 0, waiting.stderr());
  const answer = JSON.parse(waiting.stdout()) as { allocations: { resource: string; devices: string[] }[] };
  assert.deepEqual(answer.allocations.map((a) => [a.resource, [...a.devices].sort()]), [["example.com/dev", ["dev0", "dev1"]]]);

  const tooLong = await runEdgeplug(["allocate", "--api", node.apiSocket, "--owner", "o", "--wait", "2h", "example.com/dev=1"]);
  assert.equal(tooLong.code, 2);
  assert.match(tooLong.stderr, /--wait: must be at most 1h0m0s, got "2h"/);
});

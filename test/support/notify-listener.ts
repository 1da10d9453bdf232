/**
 * A service manager's notification socket for tests: an AF_UNIX SOCK_DGRAM
 * socket, bound by a small python3 program because Node cannot bind (or send
 * to) unix datagram sockets. Each datagram becomes one JSON line with the
 * message's assignments and, checked at the moment it arrived, whether each
 * of `watchPaths` existed: that shows what the agent had done before it said
 * READY=1 without racing the agent afterwards. BARRIER=1 round trips
 * (systemd-notify waits for one) are answered as systemd does, by closing the
 * descriptor that came with them, and are not reported.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";

const LISTENER = String.raw`
import array, json, os, socket, sys
address, watch_paths = sys.argv[1], sys.argv[2:]
listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
listener.bind(address)
print(json.dumps({"listening": address}), flush=True)
while True:
    data, ancillary, _flags, _peer = listener.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
    existed = {path: os.path.exists(path) for path in watch_paths}
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            for fd in fds:
                os.close(fd)
    fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
    if fields.get("BARRIER") == "1":
        continue
    print(json.dumps({"fields": fields, "existed": existed}), flush=True)
`;

export interface Notification {
  /** The message's assignments, e.g. { READY: "1", STATUS: "ready" }. */
  fields: Record<string, string>;
  /** For each watched path: did it exist when the datagram arrived? */
  existed: Record<string, boolean>;
}

export interface NotifyListener {
  /** The value for NOTIFY_SOCKET. */
  address: string;
  messages(): Notification[];
  /** Resolves with the first message (already received or not) that has `field`, e.g. "READY". */
  waitFor(field: string, options?: { after?: number; timeoutMs?: number }): Promise<Notification>;
  close(): Promise<void>;
}

/** Binds a notification socket at `address` (a path) and reports what arrives on it. */
export async function startNotifyListener(address: string, watchPaths: string[] = []): Promise<NotifyListener> {
  const child = spawn("python3", ["-c", LISTENER, address, ...watchPaths], { stdio: ["ignore", "pipe", "pipe"] });
  const received: Notification[] = [];
  let stderr = "";
  let pending = "";
  const wakers = new Set<() => void>();
  let listening: (() => void) | null = null;
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    const lines = (pending + chunk).split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      const record = JSON.parse(line) as Notification & { listening?: string };
      if (record.listening !== undefined) listening?.();
      else received.push(record);
    }
    for (const wake of wakers) wake();
  });
  const exited = once(child, "close");
  void exited.then(() => {
    for (const wake of wakers) wake();
  });
  await new Promise<void>((resolve, reject) => {
    const fail = (why: string) => reject(new Error(`python3 notification listener: ${why}; stderr: ${stderr}`));
    listening = resolve;
    child.once("error", (error) => fail(String(error)));
    void exited.then(([code]) => fail(`exited with ${String(code)}`)); // no effect once resolved
  });
  return {
    address,
    messages: () => [...received],
    waitFor(field, { after = 0, timeoutMs = 15_000 } = {}) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = received.slice(after).find((message) => field in message.fields);
          if (found) {
            done();
            resolve(found);
          } else if (child.exitCode !== null) {
            done();
            reject(new Error(`notification listener exited; stderr: ${stderr}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`no ${field}= message within ${timeoutMs} ms; got ${JSON.stringify(received)}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          wakers.delete(check);
        };
        wakers.add(check);
        check();
      });
    },
    async close() {
      if (child.exitCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
      fs.rmSync(address, { force: true });
    },
  };
}

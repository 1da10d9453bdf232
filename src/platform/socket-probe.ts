/**
 * One connect to a unix socket, to learn whether something listens there:
 * the agent's start (kubelet.sock's stale sockets, a daemon beside a
 * --reconcile-once run, plugins already running) and `status` (the agent's
 * live socket) each decide from it.
 */
import * as net from "node:net";

/** `accepts`: connected; `refused`: ECONNREFUSED (a socket file nobody listens on); `silent`: no answer within the timeout; `unreachable`: any other error (missing, no permission). */
export type SocketProbe = "accepts" | "refused" | "silent" | "unreachable";

export function probeSocket(socketPath: string, timeoutMs = 1000): Promise<SocketProbe> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    const done = (outcome: SocketProbe) => {
      socket.destroy();
      resolve(outcome);
    };
    socket.setTimeout(timeoutMs, () => done("silent"));
    socket.once("connect", () => done("accepts"));
    socket.once("error", (error) => done((error as { code?: string }).code === "ECONNREFUSED" ? "refused" : "unreachable"));
  });
}

/**
 * The kubelet's pod-resources API on the kubelet's own path
 * (`podResources.socket`, default /var/lib/kubelet/pod-resources/kubelet.sock),
 * where monitoring agents such as GPU exporters dial it, besides the API
 * socket. gRPC only, as the kubelet serves it, with the kubelet's rate limit:
 * 100 calls a second with bursts of 10 for the whole socket, a refused call
 * answered ResourceExhausted "rejected by rate limit".
 *
 * The directory is created 0750 when missing, as the kubelet creates it; the
 * socket is bound aside and linked into place with mode 0660 (root and its
 * group, as the API socket without socketGroup), and a live process already
 * serving the path is never taken over.
 *
 * @example
 * ```ts
 * const podResources = await servePodResourcesSocket({ socketPath, devices, log });
 * await podResources.close();
 * ```
 */
import * as path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "../log/logger.ts";
import type { RequestReports } from "../rpc/request-reports.ts";
import type { UnixServer } from "../rpc/unix-server.ts";
import type { GuardAction } from "../server/connection-guard.ts";
import { serveGuardedGrpc } from "../server/guarded-grpc.ts";
import { type ListenerLimits, POD_RESOURCES_RATE_LIMIT, POD_RESOURCES_RATE_LIMITED, POD_RESOURCES_SOCKET_LIMITS, type RateLimit, TokenBucket } from "../server/limits.ts";
import { podResourcesRoutes, type PodResourcesSource } from "./pod-resources-service.ts";
import { claimSocketPath } from "../server/socket-guard.ts";

export interface PodResourcesSocketOptions {
  socketPath: string;
  devices: PodResourcesSource;
  log: Logger;
  /** Default POD_RESOURCES_SOCKET_LIMITS; tests pass smaller ones. */
  limits?: ListenerLimits;
  /** Default POD_RESOURCES_RATE_LIMIT; `now` is the bucket's clock, for tests. */
  rateLimit?: RateLimit;
  now?: () => number;
  /** Told of every connection or call the limits refused or ended (for metrics). */
  onLimit?: (action: GuardAction | "rate_limited") => void;
  /** Told of requests served as `localhost` (their authority was no host) and of those node:http2 reset unseen. */
  reports?: RequestReports;
}

/** The kubelet's pod-resources directory mode. */
const DIRECTORY_MODE = 0o750;
const SOCKET_MODE = 0o660;

/** Claims the path, serves v1.PodResourcesLister on it; close() stops serving and removes the socket. */
export async function servePodResourcesSocket(options: PodResourcesSocketOptions): Promise<UnixServer> {
  const { socketPath, log } = options;
  if (!path.isAbsolute(socketPath)) throw new Error(`podResources.socket must be an absolute path: ${socketPath}`);
  await claimSocketPath(socketPath, { expect: "kubelet-pod-resources", log, directoryMode: DIRECTORY_MODE });
  const bucket = new TokenBucket(options.rateLimit ?? POD_RESOURCES_RATE_LIMIT, options.now);
  const admit = () => {
    if (bucket.take()) return;
    options.onLimit?.("rate_limited");
    throw new ConnectError(POD_RESOURCES_RATE_LIMITED, Code.ResourceExhausted);
  };
  // The kubelet's own pod-resources client (grpc-go) sends the socket path as :authority: served.
  const server = await serveGuardedGrpc({
    socketPath,
    routes: podResourcesRoutes(options.devices, admit),
    log,
    limits: options.limits ?? POD_RESOURCES_SOCKET_LIMITS,
    mode: SOCKET_MODE,
    name: "pod-resources socket",
    purpose: "the pod-resources API",
    onLimit: options.onLimit,
    reports: options.reports,
  });
  log.info("pod-resources socket serving", { socket: socketPath, mode: `0${SOCKET_MODE.toString(8)}` });
  return server;
}

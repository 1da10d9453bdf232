/**
 * The connection to one device plugin instance, keyed by (resource, socket):
 * every call goes through a Connect client on the plugin's unix channel.
 * `connect` dials and reads the plugin's options; `watch` keeps the
 * ListAndWatch stream open and hands each validated message (the complete
 * device list) to the listener, refusing a bad message without ending the
 * stream; the listener hears once when the stream ends.
 */
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import type { ContainerAllocateResponse, DevicePluginOptions } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { DevicePlugin, EmptySchema } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { type ListAndWatchResponseView, ListAndWatchResponseViewSchema } from "../gen/edgeplug/v1/device_list_view_pb.ts";
import { dialUnix, type UnixChannel } from "../rpc/unix-channel.ts";
import { type Clock, pause, systemClock } from "../platform/clock.ts";
import { type Backoff, BackoffCount } from "../util/backoff.ts";
import { peerMessageOf } from "../log/error-message.ts";
import type { PinnedSocket, SocketIdentity } from "../platform/pinned-socket.ts";
import type { DeviceList } from "./device-list.ts";
import { listRegion, readDeviceList, sameBytes } from "./device-list-reader.ts";
import { ListBudget } from "./list-budget.ts";
import { MAX_LIST_MESSAGE_BYTES } from "./names.ts";

export type { DeviceInfo, DeviceList } from "./device-list.ts";

/**
 * DevicePlugin's ListAndWatch, the same call on the wire, answered as the
 * view that leaves each Device encoded (device-list-reader.ts reads them).
 */
const listAndWatchView = { ...DevicePlugin.method.listAndWatch, output: ListAndWatchResponseViewSchema };
const DevicePluginListView = { ...DevicePlugin, methods: [listAndWatchView], method: { listAndWatch: listAndWatchView } } as unknown as GenService<{
  listAndWatch: { methodKind: "server_streaming"; input: typeof EmptySchema; output: typeof ListAndWatchResponseViewSchema };
}>;

export interface EndpointListener {
  /** A message that passed validation: the complete device list of the resource. */
  devices(endpoint: DevicePluginEndpoint, devices: DeviceList): void;
  /** The last good list, `devices`, sent again byte for byte. */
  unchanged(endpoint: DevicePluginEndpoint, devices: DeviceList): void;
  /** A message that was refused; the previous list stays. */
  refused(endpoint: DevicePluginEndpoint, reason: string): void;
  /** The stream ended (plugin gone, closed, or failed); called once, not after close(). */
  ended(endpoint: DevicePluginEndpoint, reason: string): void;
}

export interface EndpointOptions {
  resource: string;
  /** Absolute path of the plugin's DevicePlugin socket. */
  socket: string;
  /** That socket opened for dialling: dialled instead of `socket`, closed with the endpoint. */
  pinned?: Pick<PinnedSocket, "dialPath" | "close"> & Partial<Pick<PinnedSocket, "stat">>;
  dialTimeoutMs: number;
  /** Largest device list accepted in one message (security.maxDevicesPerResource). */
  maxDevices: number;
  /** Times the pauses between lists and before ListAndWatch is opened again (default: the system's). */
  clock?: Clock;
}

/** A call to an endpoint whose stream ended or that was replaced or closed (the kubelet's errEndpointStopped). */
export class EndpointStoppedError extends Error {
  override name = "EndpointStoppedError";
  constructor(socket: string) {
    super(`endpoint ${socket} has been stopped`);
  }
}

/** edgeplug bounds the calls the kubelet leaves unbounded, so a hung plugin cannot hold an allocation forever. */
const CALL_TIMEOUT_MS = 30_000;
/** The deadline of each allocation call to a plugin; the allocator's whole-request deadline derives from them. */
export const PLUGIN_CALL_TIMEOUTS = {
  getPreferredAllocationMs: CALL_TIMEOUT_MS,
  allocateMs: CALL_TIMEOUT_MS,
  /** The kubelet's (KubeletPreStartContainerRPCTimeoutInSecs). */
  preStartContainerMs: 30_000,
} as const;
/** Backoff before opening ListAndWatch again after an oversized message. */
const REOPEN_BACKOFF: Backoff = { initialMs: 250, maxMs: 30_000 };
/**
 * Lists read on one ListAndWatch call before it is ended and opened again at
 * once. Connect 2.3.0 races each read of a streaming call against the call's
 * end (run-call.js), which keeps every message read alive until the call
 * ends: a plugin flapping a device every 50 ms grew the agent by 3 MiB a
 * minute. The plugin sends its full list on the new call, which matches the
 * last one and changes nothing. At most about 1.5 MiB is held per plugin.
 */
export const LISTS_PER_CALL = 1_000;
/**
 * What one device of a list costs the agent in all (Connect's decoding,
 * reading, status, events, checkpoint), rounded from what `npm run bench --
 * devices` measured with 100,000 devices (docs/performance.md, "Costs behind choices in the code").
 */
const LIST_MS_PER_DEVICE = 0.01;

/** A streaming call whose first message has been asked for (so that its failure is never unhandled). */
interface OpenedCall {
  iterator: AsyncIterator<ListAndWatchResponseView>;
  first: Promise<IteratorResult<ListAndWatchResponseView>>;
}

function openCall(call: AsyncIterable<ListAndWatchResponseView>): OpenedCall {
  const iterator = call[Symbol.asyncIterator]();
  const first = iterator.next();
  // Read by watch(); a call that fails before it (options refused, endpoint closed) is ended by close().
  first.catch(() => {});
  return { iterator, first };
}

/** The messages of an opened call, its first included; leaving the loop early ends the call. */
async function* resumed({ iterator, first }: OpenedCall): AsyncGenerator<ListAndWatchResponseView> {
  // False while a message is with the reader: a reader that stops then ends the call; a call that failed has ended.
  let reading = true;
  try {
    for (let step = await first; !step.done; step = await iterator.next()) {
      reading = false;
      yield step.value;
      reading = true;
    }
  } finally {
    if (!reading) await iterator.return?.();
  }
}

export class DevicePluginEndpoint {
  readonly resource: string;
  readonly socket: string;
  /** The socket by real path and, when it was opened, inode: what other plugins' endpoints are compared with. */
  readonly identity: SocketIdentity;
  options: DevicePluginOptions | null = null;
  readonly #channel: UnixChannel;
  readonly #client: Client<typeof DevicePlugin>;
  readonly #lists: Client<typeof DevicePluginListView>;
  readonly #maxDevices: number;
  readonly #abort = new AbortController();
  readonly #pinned: EndpointOptions["pinned"];
  readonly #clock: Clock;
  /** The ListAndWatch call connect() opened beside GetDevicePluginOptions, until watch() takes it. */
  #opened: OpenedCall | null = null;
  #closed = false;

  constructor(options: EndpointOptions) {
    this.resource = options.resource;
    this.socket = options.socket;
    this.identity = { realPath: options.socket, stat: options.pinned?.stat };
    this.#maxDevices = options.maxDevices;
    this.#pinned = options.pinned;
    this.#clock = options.clock ?? systemClock;
    const dial = { connectPath: options.pinned?.dialPath, connectTimeoutMs: options.dialTimeoutMs, readMaxBytes: MAX_LIST_MESSAGE_BYTES };
    this.#channel = dialUnix(options.socket, dial);
    this.#client = createClient(DevicePlugin, this.#channel.transport);
    this.#lists = createClient(DevicePluginListView, this.#channel.transport);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Dials and reads the plugin's options (the kubelet's PluginConnected),
   * with ListAndWatch opened at the same time on the same connection: the
   * kubelet opens it after the options have come back, one round trip later.
   * Its messages wait for watch(); close() ends the call.
   */
  async connect(signal?: AbortSignal): Promise<DevicePluginOptions> {
    const callSignal = signal ? AbortSignal.any([signal, this.#abort.signal]) : this.#abort.signal;
    const options = this.#client.getDevicePluginOptions({}, { signal: callSignal, timeoutMs: CALL_TIMEOUT_MS });
    this.#opened ??= openCall(this.#lists.listAndWatch({}, { signal: this.#abort.signal }));
    this.options = await options;
    return this.options;
  }

  /**
   * Opens ListAndWatch and feeds `listener` until the stream ends or
   * {@link close} is called. A message over the size cap ends the stream on
   * the transport's side (Connect refuses it from its length prefix, before
   * reading it), so it is refused like any bad message and the stream is
   * opened again after a backoff: the plugin sends its full list on every
   * open, and the last good list stays meanwhile. After {@link LISTS_PER_CALL}
   * lists the call is ended and opened again at once, seamlessly.
   */
  watch(listener: EndpointListener): void {
    void (async () => {
      let reason = "ListAndWatch stream ended";
      const reopen = new BackoffCount(REOPEN_BACKOFF);
      let lastGood: Uint8Array | null = null;
      let lastList: DeviceList | null = null;
      const budget = new ListBudget();
      for (let open = true; open && !this.#closed;) {
        open = false;
        let lists = 0;
        const opened = this.#opened;
        this.#opened = null;
        try {
          for await (const message of opened ? resumed(opened) : this.#lists.listAndWatch({}, { signal: this.#abort.signal })) {
            if (this.#closed) return;
            if (++lists > LISTS_PER_CALL) {
              // Read again on the next call, which starts with the plugin's whole list.
              open = true;
              break;
            }
            const startedAt = performance.now();
            const devices = message.devices.length;
            // A plugin that sends the same list again (many do, on a timer) costs a comparison, not a read.
            // A view of the message's buffer: let go of below, with the message's own views.
            let region = listRegion(message.devices);
            if (lastGood !== null && region !== null && sameBytes(lastGood, region)) {
              region = null;
              dropDeviceViews(message);
              listener.unchanged(this, lastList!);
              if (!(await this.#pace(budget, startedAt, devices))) return;
              continue;
            }
            const checked = readDeviceList(message.devices, this.#maxDevices, lastList);
            const regionCopy = typeof checked === "string" ? null : region?.slice() ?? null;
            region = null;
            dropDeviceViews(message);
            if (typeof checked === "string") {
              listener.refused(this, checked);
            } else {
              reopen.succeeded();
              lastGood = regionCopy;
              lastList = checked;
              listener.devices(this, checked);
            }
            if (!(await this.#pace(budget, startedAt, devices))) return;
          }
        } catch (error) {
          if (!this.#closed && error instanceof ConnectError && error.code === Code.ResourceExhausted) {
            const reopenMs = reopen.failed();
            listener.refused(this, `a ListAndWatch message is over ${MAX_LIST_MESSAGE_BYTES} bytes; ListAndWatch is opened again in ${reopenMs} ms`);
            open = await pause(this.#clock, reopenMs, this.#abort.signal);
            continue;
          }
          reason = `ListAndWatch stream failed: ${peerMessageOf(error)}`;
        }
      }
      if (!this.#closed) {
        this.close();
        listener.ended(this, reason);
      }
    })();
  }

  /**
   * Charges a list to the budget: the time taken since `startedAt`, or what
   * such a list costs in all when that is more; waits when the budget is
   * overspent. Not reading meanwhile lets HTTP/2 flow control hold the
   * plugin back, and its next list is its latest. False when closed meanwhile.
   */
  async #pace(budget: ListBudget, startedAt: number, devices: number): Promise<boolean> {
    const pauseMs = budget.spend(Math.max(performance.now() - startedAt, devices * LIST_MS_PER_DEVICE));
    return pauseMs <= 0 || (await pause(this.#clock, pauseMs, this.#abort.signal));
  }

  async getPreferredAllocation(available: string[], mustInclude: string[], size: number, caller?: AbortSignal): Promise<string[]> {
    const response = await this.#call(() =>
      this.#client.getPreferredAllocation(
        { containerRequests: [{ availableDeviceIDs: available, mustIncludeDeviceIDs: mustInclude, allocationSize: size }] },
        { signal: this.#callSignal(caller), timeoutMs: PLUGIN_CALL_TIMEOUTS.getPreferredAllocationMs },
      )
    );
    return response.containerResponses[0]?.deviceIDs ?? [];
  }

  async allocate(deviceIds: string[], caller?: AbortSignal): Promise<ContainerAllocateResponse> {
    const response = await this.#call(() =>
      this.#client.allocate({ containerRequests: [{ devicesIds: deviceIds }] }, { signal: this.#callSignal(caller), timeoutMs: PLUGIN_CALL_TIMEOUTS.allocateMs })
    );
    const first = response.containerResponses[0];
    if (!first) throw new Error(`no containers return in allocation response ${JSON.stringify({ containerResponses: [] })}`);
    return first;
  }

  async preStartContainer(deviceIds: string[], caller?: AbortSignal): Promise<void> {
    await this.#call(() => this.#client.preStartContainer({ devicesIds: deviceIds }, { signal: this.#callSignal(caller), timeoutMs: PLUGIN_CALL_TIMEOUTS.preStartContainerMs }));
  }

  /** Ends a call with the endpoint, or sooner when the caller (an API client) gives up. */
  #callSignal(caller: AbortSignal | undefined): AbortSignal {
    return caller ? AbortSignal.any([this.#abort.signal, caller]) : this.#abort.signal;
  }

  /** Runs a unary call; on a stopped endpoint, or one stopped while the call was in flight, the stopped error. */
  async #call<T>(call: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new EndpointStoppedError(this.socket);
    try {
      return await call();
    } catch (error) {
      if (this.#closed) throw new EndpointStoppedError(this.socket);
      throw error;
    }
  }

  /** Ends the stream and the connection; the listener is not told. Safe to call twice. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#abort.abort();
    this.#channel.close();
    // After the channel: it dials no more, so the descriptor number cannot be reused under a dial.
    this.#pinned?.close();
  }
}

/**
 * Empties a ListAndWatch message once its list is read. The stream's async
 * iterators (Connect's) keep the last message they yielded while they wait for
 * the next, and its views, one per device, hold the message's buffer: with
 * 100,000 devices some 10 MB of views and the buffers under them, for as long
 * as the plugin sends nothing new.
 */
function dropDeviceViews(message: { devices: Uint8Array[] }): void {
  message.devices.length = 0;
}

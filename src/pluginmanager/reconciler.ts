/**
 * The reconciler: compares the desired state of world with the actual one
 * and asks the operation executor to converge. Unlike the kubelet's 1 s loop
 * it reacts to each desired-state change at once, for that socket only; a
 * periodic resync compares everything to catch what an event missed.
 */
import type { Clock, OperationExecutor } from "./operations.ts";
import { systemClock } from "./operations.ts";
import type { ActualStateOfWorld, DesiredChange, DesiredSocket, DesiredStateOfWorld, RegisteredPlugin } from "./state.ts";

export interface ReconcilerOptions {
  dsw: DesiredStateOfWorld;
  asw: ActualStateOfWorld;
  executor: OperationExecutor;
  /** The register sequence; rejects when the attempt failed (the executor then backs off). */
  register: (desired: DesiredSocket, signal: AbortSignal) => Promise<void>;
  /** The unregister sequence: removes the plugin from the actual state and tells its handler. */
  unregister: (plugin: RegisteredPlugin) => void;
  resyncMs: number;
  clock?: Clock;
  /** Runs before each periodic full compare (the watcher's rescan). */
  onResync?: () => void;
  /** Called after every pass: each desired-state change and each full compare. */
  onPass?: () => void;
}

export class Reconciler {
  readonly #options: ReconcilerOptions;
  readonly #clock: Clock;
  #resyncMs: number;
  #unsubscribe: () => void = () => {};
  #cancelResync: () => void = () => {};
  #running = false;

  constructor(options: ReconcilerOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#resyncMs = options.resyncMs;
  }

  /** Starts reacting to desired-state changes and arms the periodic resync. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#unsubscribe = this.#options.dsw.subscribe((change) => this.#onDesiredChange(change));
    this.#armResync();
    this.reconcileAll();
  }

  /** Stops reacting and clears the resync timer; operations are the executor's to stop. */
  stop(): void {
    this.#running = false;
    this.#unsubscribe();
    this.#cancelResync();
  }

  /** Sets the resync period; a running reconciler re-arms its timer with it. */
  setResyncPeriod(resyncMs: number): void {
    this.#resyncMs = resyncMs;
    if (!this.#running) return;
    this.#cancelResync();
    this.#armResync();
  }

  /** Converges one socket: unregister a plugin whose socket left or changed, register a desired one. */
  reconcile(socket: string): void {
    if (!this.#running) return;
    const { dsw, asw, executor } = this.#options;
    const desired = dsw.get(socket);
    const actual = asw.get(socket);
    if (actual && actual.inode !== desired?.inode) {
      // One operation per socket: a registration still in flight ends first,
      // and its end (the executor's onReady) brings us back here.
      if (executor.isRunning(socket)) {
        executor.abort(socket);
        return;
      }
      this.#options.unregister(actual);
    }
    if (desired && !asw.has(socket, desired.inode)) {
      executor.run(socket, (signal) => this.#options.register(desired, signal));
    }
  }

  /** The full compare: every unregistration first, then every registration. */
  reconcileAll(): void {
    if (!this.#running) return;
    const { dsw, asw } = this.#options;
    for (const plugin of asw.plugins()) {
      if (dsw.get(plugin.socket)?.inode !== plugin.inode) this.reconcile(plugin.socket);
    }
    for (const desired of dsw.sockets()) this.reconcile(desired.socket);
    this.#options.onPass?.();
  }

  #onDesiredChange(change: DesiredChange): void {
    const { executor } = this.#options;
    // A new socket at the path is a new plugin: its predecessor's backoff and
    // any attempt still running for the predecessor do not apply to it. A
    // removed socket leaves no retry timer behind.
    executor.resetBackoff(change.socket);
    if (change.kind !== "added") executor.abort(change.socket);
    this.reconcile(change.socket);
    this.#options.onPass?.();
  }

  #armResync(): void {
    this.#cancelResync = this.#clock.setTimer(() => {
      if (!this.#running) return;
      this.#options.onResync?.();
      this.reconcileAll();
      this.#armResync();
    }, this.#resyncMs);
  }
}

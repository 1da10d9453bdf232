/**
 * Who holds which devices: the kubelet's podDevices, keyed by owner (the
 * checkpoint's PodUID), container and resource, each with the plugin's
 * Allocate answer. It converts to and from the checkpoint's entries.
 */
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import type { ContainerAllocateResponse } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { ContainerAllocateResponseSchema } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { messageOf } from "../log/error-message.ts";
import type { PodDevicesEntry } from "./checkpoint/checkpoint.ts";

/** One container's devices of one resource. */
export interface ContainerDevices {
  owner: string;
  container: string;
  resource: string;
  /** NUMA node (-1: none) -> device ids. */
  byNode: Map<number, string[]>;
  response: ContainerAllocateResponse;
}

/**
 * Bounds on what device plugins' Allocate answers add to the checkpoint, so
 * that it stays under the reader's MAX_CHECKPOINT_BYTES (64 MiB; the answers
 * are written in base64): one answer (real ones take a few KiB: env, mounts,
 * CDI names), and all answers together.
 */
export const ALLOCATE_ANSWER_LIMITS = {
  answerBytes: 64 * 1024,
  allAnswersBytes: 32 * 1024 * 1024,
  /**
   * What each resource is sure to find of allAnswersBytes, however much
   * other resources' answers take: a resource takes more only from what
   * is left once the other resources' unused guarantees are set aside
   * (at most half of the whole, so a node with hundreds of resources
   * still lets one grow).
   */
  guaranteedBytesPerResource: 2 * 1024 * 1024,
} as const;

export class PodDevices {
  /** owner -> "container\0resource" -> devices; insertion order is the checkpoint's order. */
  readonly #owners = new Map<string, Map<string, ContainerDevices>>();
  readonly #answerBytes = new WeakMap<ContainerDevices, number>();
  #allAnswersBytes = 0;
  readonly #answersBytesByResource = new Map<string, number>();
  /** Owners whose release is on its way to disk: left out of the checkpoint, their devices still held. */
  readonly #releasing = new Set<string>();

  /** The encoded size of every held Allocate answer, which {@link ALLOCATE_ANSWER_LIMITS} bounds. */
  get allAnswersBytes(): number {
    return this.#allAnswersBytes;
  }

  /** The encoded size of the Allocate answers held for `resource`. */
  answersBytesOf(resource: string): number {
    return this.#answersBytesByResource.get(resource) ?? 0;
  }

  #countAnswer(entry: ContainerDevices, bytes: number): void {
    this.#allAnswersBytes += bytes;
    const left = (this.#answersBytesByResource.get(entry.resource) ?? 0) + bytes;
    if (left === 0) this.#answersBytesByResource.delete(entry.resource);
    else this.#answersBytesByResource.set(entry.resource, left);
  }

  get(owner: string, container: string, resource: string): ContainerDevices | undefined {
    return this.#owners.get(owner)?.get(key(container, resource));
  }

  add(entry: ContainerDevices): void {
    let containers = this.#owners.get(entry.owner);
    if (!containers) this.#owners.set(entry.owner, containers = new Map());
    const replaced = containers.get(key(entry.container, entry.resource));
    if (replaced) this.#countAnswer(replaced, -(this.#answerBytes.get(replaced) ?? 0));
    containers.set(key(entry.container, entry.resource), entry);
    const bytes = answerBytes(entry.response);
    this.#answerBytes.set(entry, bytes);
    this.#countAnswer(entry, bytes);
  }

  /** Leaves `owner` out of the checkpoint's entries from now on (its release is being written); its devices stay held. */
  beginRelease(owner: string): void {
    this.#releasing.add(owner);
  }

  /** `owner` is in the checkpoint's entries again (its release was written and done, or refused). */
  endRelease(owner: string): void {
    this.#releasing.delete(owner);
  }

  isReleasing(owner: string): boolean {
    return this.#releasing.has(owner);
  }

  /** Removes `entry` if it is still held (an allocation whose write failed); true if it was. */
  remove(entry: ContainerDevices): boolean {
    const containers = this.#owners.get(entry.owner);
    const k = key(entry.container, entry.resource);
    if (containers?.get(k) !== entry) return false;
    containers.delete(k);
    if (containers.size === 0) this.#owners.delete(entry.owner);
    this.#countAnswer(entry, -(this.#answerBytes.get(entry) ?? 0));
    return true;
  }

  /** Removes and returns every entry of `owner`. */
  release(owner: string): ContainerDevices[] {
    const entries = [...(this.#owners.get(owner)?.values() ?? [])];
    this.#owners.delete(owner);
    for (const entry of entries) this.#countAnswer(entry, -(this.#answerBytes.get(entry) ?? 0));
    return entries;
  }

  ownerEntries(owner: string): ContainerDevices[] {
    return [...(this.#owners.get(owner)?.values() ?? [])];
  }

  owners(): string[] {
    return [...this.#owners.keys()];
  }

  *entries(): IterableIterator<ContainerDevices> {
    for (const containers of this.#owners.values()) yield* containers.values();
  }

  /** Device ids held per resource, by any owner. */
  allocatedIds(resource: string): Set<string> {
    const ids = new Set<string>();
    for (const entry of this.entries()) {
      if (entry.resource !== resource) continue;
      for (const list of entry.byNode.values()) for (const id of list) ids.add(id);
    }
    return ids;
  }

  toCheckpointEntries(): PodDevicesEntry[] {
    return [...this.entries()].filter((entry) => !this.#releasing.has(entry.owner)).map((entry) => ({
      podUID: entry.owner,
      containerName: entry.container,
      resourceName: entry.resource,
      deviceIDs: new Map([...entry.byNode].map(([node, ids]) => [node, [...ids]])),
      allocResp: toBinary(ContainerAllocateResponseSchema, entry.response),
    }));
  }

  /** Adds the checkpoint's entries; returns those skipped because their AllocResp does not decode (as the kubelet does). */
  restore(entries: PodDevicesEntry[]): string[] {
    const skipped: string[] = [];
    for (const entry of entries) {
      let response: ContainerAllocateResponse;
      try {
        response = fromBinary(ContainerAllocateResponseSchema, entry.allocResp);
      } catch (error) {
        skipped.push(`${entry.podUID}/${entry.containerName}/${entry.resourceName}: ${messageOf(error)}`);
        continue;
      }
      this.add({ owner: entry.podUID, container: entry.containerName, resource: entry.resourceName, byNode: entry.deviceIDs, response });
    }
    return skipped;
  }
}

/** Every device id of an entry once, in node order (a device on two nodes is listed under both). */
export function entryDeviceIds(entry: ContainerDevices): string[] {
  return [...new Set([...entry.byNode.values()].flat())];
}

function key(container: string, resource: string): string {
  return `${container}\u0000${resource}`;
}

/** The bytes an Allocate answer takes in the checkpoint before base64. */
export function answerBytes(response: ContainerAllocateResponse): number {
  return toBinary(ContainerAllocateResponseSchema, response).length;
}

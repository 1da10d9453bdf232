/**
 * The kubelet's device choice (devicesToAllocate, filterByAffinity): split
 * the available devices by NUMA alignment with a hint, take aligned devices
 * first, let the plugin's preferred allocation decide the rest, then fall
 * back to unaligned and topology-less devices. edgeplug has no topology
 * manager; its hint is the one NUMA node that can hold the whole request on
 * its own (the one with most free devices), as a single-numa-node policy
 * would choose, or none.
 */
/** Where each device is: its NUMA nodes, empty without topology (DeviceList answers it). */
export interface DeviceNodes {
  nodesOf(id: string): readonly number[];
}

/** The kubelet's fake NUMA node for devices without topology. */
export const NO_NUMA_NODE = -1;

export interface AffinitySplit {
  aligned: string[];
  unaligned: string[];
  noAffinity: string[];
}

/**
 * Classifies each available device by the first of its nodes in the sorted
 * node order (hint nodes first, -1 last, then by how many devices a node
 * has, then by id), so each device lands in exactly one set.
 */
export function filterByAffinity(devices: DeviceNodes, available: Iterable<string>, hint: number[] | null): AffinitySplit {
  const split: AffinitySplit = { aligned: [], unaligned: [], noAffinity: [] };
  const perNode = new Map<number, string[]>();
  /** Devices on more than one node, the only ones that can come up twice below. */
  const onSeveral = new Set<string>();
  for (const id of available) {
    const nodes = devices.nodesOf(id);
    if (nodes.length > 1) onSeveral.add(id);
    for (const node of nodes.length > 0 ? nodes : [NO_NUMA_NODE]) {
      let ids = perNode.get(node);
      if (!ids) perNode.set(node, (ids = []));
      ids.push(id);
    }
  }
  const inHint = (node: number) => hint !== null && hint.includes(node);
  const order = [...perNode.keys()].sort((a, b) => {
    if (inHint(a) !== inHint(b)) return inHint(a) ? -1 : 1;
    if ((a === NO_NUMA_NODE) !== (b === NO_NUMA_NODE)) return a === NO_NUMA_NODE ? 1 : -1;
    const byCount = perNode.get(a)!.length - perNode.get(b)!.length;
    return byCount !== 0 ? byCount : a - b;
  });
  const placed = new Set<string>();
  for (const node of order) {
    for (const id of perNode.get(node)!.sort()) {
      if (onSeveral.has(id)) {
        if (placed.has(id)) continue;
        placed.add(id);
      }
      if (hint === null || node === NO_NUMA_NODE) (node === NO_NUMA_NODE ? split.noAffinity : split.unaligned).push(id);
      else (inHint(node) ? split.aligned : split.unaligned).push(id);
    }
  }
  return split;
}

/** The single NUMA node with the most available devices, when it can hold `count` alone; else null. */
export function singleNodeHint(devices: DeviceNodes, available: Iterable<string>, count: number): number[] | null {
  const perNode = new Map<number, number>();
  for (const id of available) {
    for (const node of devices.nodesOf(id)) perNode.set(node, (perNode.get(node) ?? 0) + 1);
  }
  let best: number | null = null;
  for (const [node, free] of perNode) {
    if (free < count) continue;
    if (best === null || free > perNode.get(best)! || (free === perNode.get(best)! && node < best)) best = node;
  }
  return best === null ? null : [best];
}

/**
 * Picks `count` devices from `available` the kubelet's way; `preferred` is
 * the plugin's GetPreferredAllocation (null when the plugin does not offer it).
 * Returns fewer than `count` only if the sets run short.
 */
export async function chooseDevices(
  devices: DeviceNodes,
  available: string[],
  count: number,
  preferred: ((available: string[], mustInclude: string[], size: number) => Promise<string[]>) | null,
): Promise<string[]> {
  const hint = singleNodeHint(devices, available, count);
  const { aligned, unaligned, noAffinity } = filterByAffinity(devices, available, hint);
  const picked: string[] = [];
  const takeFrom = (ids: Iterable<string>): boolean => {
    for (const id of ids) {
      if (picked.length >= count) break;
      if (!picked.includes(id)) picked.push(id);
    }
    return picked.length >= count;
  };
  if (aligned.length >= count) {
    if (preferred) {
      const answer = await preferred(aligned, [], count);
      if (takeFrom(answer.filter((id) => aligned.includes(id)))) return picked;
    }
    takeFrom(aligned);
    return picked;
  }
  if (takeFrom(aligned)) return picked;
  if (preferred) {
    const answer = await preferred(available, [...picked], count);
    const free = new Set(available);
    if (takeFrom(answer.filter((id) => free.has(id)))) return picked;
  }
  if (takeFrom(unaligned)) return picked;
  takeFrom(noAffinity);
  return picked;
}

/** Groups device ids under each of their NUMA nodes (-1 when none), as the kubelet's checkpoint stores them. */
export function groupByNode(devices: DeviceNodes, ids: string[]): Map<number, string[]> {
  const groups = new Map<number, string[]>();
  for (const id of ids) {
    const nodes = devices.nodesOf(id);
    for (const node of nodes.length > 0 ? nodes : [NO_NUMA_NODE]) {
      let list = groups.get(node);
      if (!list) groups.set(node, (list = []));
      list.push(id);
    }
  }
  return groups;
}

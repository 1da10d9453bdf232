/**
 * The endpoint rule that is the device manager's own, on both ways a device
 * plugin names its endpoint (Register on the registration socket, and the
 * watched directory, whose other rules are ../endpoint-rules.ts): a socket
 * that a live endpoint of another resource uses is refused, since two
 * resources over one plugin would hand out the same devices twice.
 */

/** The refusal when a live endpoint of another resource uses `socket`. */
export function sharedSocketRefusal(socket: string, holder: string | undefined, resource: string): string | null {
  if (holder === undefined || holder === resource) return null;
  return `endpoint ${JSON.stringify(socket)} is the socket of device plugin ${holder}; each resource registers its own socket`;
}

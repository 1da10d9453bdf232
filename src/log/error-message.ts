/** The message of whatever was thrown: an Error's message, anything else as a string. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** How much of an error that carries a peer's text (a plugin's gRPC message) is kept. */
export const PEER_MESSAGE_MAX_CHARS = 1024;

/**
 * {@link messageOf} for errors that may carry a plugin's text: cut at
 * {@link PEER_MESSAGE_MAX_CHARS}, saying how much was left out, because that
 * text is kept in status and events, logged and sent back to plugins.
 */
export function peerMessageOf(error: unknown): string {
  const message = messageOf(error);
  if (message.length <= PEER_MESSAGE_MAX_CHARS) return message;
  return `${message.slice(0, PEER_MESSAGE_MAX_CHARS)}... (${message.length - PEER_MESSAGE_MAX_CHARS} more characters)`;
}

/** The message of whatever was thrown: an Error's message, anything else as a string. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

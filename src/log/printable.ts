/**
 * Text that came from outside (plugin names, types, errors, paths) made safe
 * to print on a terminal: control characters would let a plugin move the
 * cursor, recolour or clear the screen, ring the bell, or forge table rows
 * and log lines with CR/LF. Each one is shown as a visible escape instead
 * (`\n`, `\r`, `\t`, `\e`, `\x07`, `\u009b`), so nothing is hidden either.
 * JSON output needs none of this: JSON.stringify escapes what JSON must.
 *
 * @example
 * ```ts
 * printable("gpu\x1b[2J\r\nregistered"); // "gpu\\e[2J\\r\\nregistered"
 * ```
 */

/**
 * C0 controls and DEL: what names, ids, owners and socket addresses from
 * outside may not hold. The regular expressions here match control
 * characters on purpose: they are what untrusted text is checked for.
 */
// deno-lint-ignore no-control-regex
const C0_CONTROL_OR_DEL = /[\u0000-\u001f\u007f]/;

/** Whether `text` holds a C0 control character or DEL (a newline, an escape, NUL...). */
export function hasControlCharacter(text: string): boolean {
  return C0_CONTROL_OR_DEL.test(text);
}

/**
 * C0 controls, DEL, C1 controls, and the Unicode characters that reorder or
 * break lines on display (bidi overrides and isolates, line/paragraph
 * separators): a name could otherwise show text other than what it holds.
 */
// deno-lint-ignore no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

const NAMED: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\u001b": "\\e" };

function escapeOne(char: string): string {
  const named = NAMED[char];
  if (named !== undefined) return named;
  const code = char.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `text` with every control character replaced by a visible escape; unchanged when it has none. */
export function printable(text: string): string {
  return text.replace(UNSAFE, escapeOne);
}

/** Whether `text` holds a character {@link printable} would escape. */
export function hasUnsafeCharacters(text: string): boolean {
  UNSAFE.lastIndex = 0;
  const found = UNSAFE.test(text);
  UNSAFE.lastIndex = 0;
  return found;
}

/**
 * The checkpoint file as Go's encoding/json writes it: struct fields in
 * declaration order, map keys sorted by their string form (byte order), nil
 * slices and maps as `null`, `[]byte` as standard base64, strings escaped as
 * Go escapes them (`<`, `>`, `&`, U+2028 and U+2029 included), no whitespace
 * and no trailing newline.
 */
import { Buffer } from "node:buffer";
import { compareGoStrings, type GoCheckpointData, type GoPodDevicesEntry, renderedOnce } from "./checkpoint-spew.ts";

/** The whole file: `{"Data":{...},"Checksum":N}`. */
export function goCheckpointJson(data: GoCheckpointData, checksum: number): string {
  const parts: string[] = ['{"Data":{"PodDeviceEntries":'];
  const entries = data.podDeviceEntries;
  if (entries === null) {
    parts.push("null");
  } else {
    parts.push("[");
    entries.forEach((entry, index) => {
      if (index > 0) parts.push(",");
      entryJson(entry, parts);
    });
    parts.push("]");
  }
  parts.push(',"RegisteredDevices":');
  const registered = data.registeredDevices;
  if (registered === null) {
    parts.push("null");
  } else {
    const names = [...registered.keys()].sort(compareGoStrings);
    parts.push("{");
    names.forEach((name, index) => {
      if (index > 0) parts.push(",");
      parts.push(goJsonString(name), ":", stringsJson(registered.get(name)!));
    });
    parts.push("}");
  }
  parts.push('},"Checksum":', String(checksum), "}");
  return parts.join("");
}

function entryJson(entry: GoPodDevicesEntry, parts: string[]): void {
  parts.push(
    '{"PodUID":',
    goJsonString(entry.podUID),
    ',"ContainerName":',
    goJsonString(entry.containerName),
    ',"ResourceName":',
    goJsonString(entry.resourceName),
    ',"DeviceIDs":',
  );
  const numa = entry.deviceIDs;
  if (numa === null) {
    parts.push("null");
  } else {
    // encoding/json sorts integer keys by their decimal text, so "-1" < "0" < "10" < "2".
    const keys = [...numa.keys()].map((node) => ({ node, text: String(node) }));
    keys.sort((a, b) => compareGoStrings(a.text, b.text));
    parts.push("{");
    keys.forEach(({ node, text }, index) => {
      if (index > 0) parts.push(",");
      parts.push('"', text, '":', stringsJson(numa.get(node)!));
    });
    parts.push("}");
  }
  parts.push(',"AllocResp":');
  parts.push(entry.allocResp === null ? "null" : `"${Buffer.from(entry.allocResp.buffer, entry.allocResp.byteOffset, entry.allocResp.byteLength).toString("base64")}"`);
  parts.push("}");
}

const jsonOfFrozen = new WeakMap<readonly string[], string>();

function stringsJson(values: readonly string[] | null): string {
  return values === null ? "null" : renderedOnce(jsonOfFrozen, values, encodeStrings);
}

function encodeStrings(values: readonly string[]): string {
  let out = "[";
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (i > 0) out += ",";
    // Most ids need no escaping: added as they are, without a string made for each.
    if (NEEDS_ESCAPE.test(value)) out += goJsonString(value);
    else out += '"' + value + '"';
  }
  return out + "]";
}

/** Characters Go's encoder does not write as they are (HTML-sensitive ones included, as json.Marshal does). */
// deno-lint-ignore no-control-regex
const NEEDS_ESCAPE = /[\u0000-\u001f"\\<>&\u2028\u2029\ud800-\udfff]/;
const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/**
 * A string as Go's encoding/json writes it. A lone surrogate cannot come from
 * a Go string; Go writes invalid UTF-8 as U+FFFD, so it is written as `\ufffd`.
 */
export function goJsonString(value: string): string {
  if (!NEEDS_ESCAPE.test(value)) return `"${value}"`;
  let out = '"';
  for (let i = 0; i < value.length; i++) {
    const char = value[i]!;
    const code = value.charCodeAt(i);
    const short = SHORT_ESCAPES[char];
    if (short !== undefined) {
      out += short;
    } else if (code < 0x20 || char === "<" || char === ">" || char === "&" || code === 0x2028 || code === 0x2029) {
      out += "\\u" + code.toString(16).padStart(4, "0");
    } else if (code >= 0xd800 && code <= 0xdbff && isLowSurrogate(value.charCodeAt(i + 1))) {
      out += char + value[i + 1]!;
      i++;
    } else if (code >= 0xd800 && code <= 0xdfff) {
      out += "\\ufffd";
    } else {
      out += char;
    }
  }
  return out + '"';
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

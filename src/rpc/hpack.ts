/**
 * HPACK (RFC 7541), the header compression of HTTP/2: what edgeplug needs to
 * read a client's header blocks and to write a field back in their place
 * (src/rpc/authority-rewrite.ts). It decodes every representation, keeps the
 * dynamic table as the peer's encoder does, and encodes literals without
 * Huffman coding. Names and values are held as latin1 strings, one character
 * per octet, so nothing a client sends is lost or re-encoded.
 *
 * @example
 * ```ts
 * const decoder = new HpackDecoder();
 * const fields = decoder.decode(block); // [{ name: ":method", value: "POST" }, ...]
 * ```
 */

export interface HeaderField {
  name: string;
  value: string;
}

/** A header block that breaks RFC 7541: the connection cannot be decoded further. */
export class HpackError extends Error {
  override name = "HpackError";
}

/** How a literal field tells the decoder to treat its table (RFC 7541 section 6.2). */
export type LiteralIndexing = "incremental" | "none" | "never";

/** One representation of a block, with the bytes it took (`start` to `end`). */
export type Representation =
  | { kind: "indexed"; index: number; field: HeaderField; start: number; end: number }
  | {
    kind: "literal";
    indexing: LiteralIndexing;
    /** The name's index in the tables, 0 when the name is a literal. */
    nameIndex: number;
    field: HeaderField;
    start: number;
    end: number;
  }
  | { kind: "size-update"; size: number; start: number; end: number };

/** RFC 7541 Appendix A. Index 1 is the first entry. */
const STATIC_TABLE: readonly HeaderField[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ...[
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
  ].map((name) => [name, ""] as const),
].map(([name, value]) => ({ name, value }));

/**
 * The bit length of each symbol's Huffman code, 0 to 255 and EOS (RFC 7541
 * Appendix B). The code is canonical: ordered by length, then by symbol, each
 * code is the one before plus one, shifted to its length. So lengths alone
 * rebuild the table.
 */
const HUFFMAN_CODE_LENGTHS = [
  13,
  23,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  24,
  30,
  28,
  28,
  30,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  30,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  28,
  6,
  10,
  10,
  12,
  13,
  6,
  8,
  11,
  10,
  10,
  8,
  11,
  8,
  6,
  6,
  6,
  5,
  5,
  5,
  6,
  6,
  6,
  6,
  6,
  6,
  6,
  7,
  8,
  15,
  6,
  12,
  10,
  13,
  6,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  7,
  8,
  7,
  8,
  13,
  19,
  13,
  14,
  6,
  15,
  5,
  6,
  5,
  6,
  5,
  6,
  6,
  6,
  5,
  7,
  7,
  6,
  6,
  6,
  5,
  6,
  7,
  6,
  5,
  5,
  6,
  7,
  7,
  7,
  7,
  7,
  15,
  11,
  14,
  13,
  28,
  20,
  22,
  20,
  20,
  22,
  22,
  22,
  23,
  22,
  23,
  23,
  23,
  23,
  23,
  24,
  23,
  24,
  24,
  22,
  23,
  24,
  23,
  23,
  23,
  23,
  21,
  22,
  23,
  22,
  23,
  23,
  24,
  22,
  21,
  20,
  22,
  22,
  23,
  23,
  21,
  23,
  22,
  22,
  24,
  21,
  22,
  23,
  23,
  21,
  21,
  22,
  21,
  23,
  22,
  23,
  23,
  20,
  22,
  22,
  22,
  23,
  22,
  22,
  23,
  26,
  26,
  20,
  19,
  22,
  23,
  22,
  25,
  26,
  26,
  26,
  27,
  27,
  26,
  24,
  25,
  19,
  21,
  26,
  27,
  27,
  26,
  27,
  24,
  21,
  21,
  26,
  26,
  28,
  27,
  27,
  27,
  20,
  24,
  20,
  21,
  22,
  21,
  21,
  23,
  22,
  22,
  25,
  25,
  24,
  24,
  26,
  23,
  26,
  27,
  26,
  26,
  27,
  27,
  27,
  27,
  27,
  28,
  27,
  27,
  27,
  27,
  27,
  26,
  30,
];
const EOS = 256;
const LONGEST_CODE = 30;

/**
 * Canonical decoding: per length, the first code of that length, how many
 * codes have it, and where its symbols start in `symbols` (sorted by length,
 * then symbol).
 */
const huffman = (() => {
  const symbols = HUFFMAN_CODE_LENGTHS.map((_, symbol) => symbol)
    .sort((a, b) => HUFFMAN_CODE_LENGTHS[a]! - HUFFMAN_CODE_LENGTHS[b]! || a - b);
  const firstCode = new Array<number>(LONGEST_CODE + 1).fill(0);
  const count = new Array<number>(LONGEST_CODE + 1).fill(0);
  const offset = new Array<number>(LONGEST_CODE + 1).fill(0);
  let code = 0;
  let length = 0;
  symbols.forEach((symbol, position) => {
    const symbolLength = HUFFMAN_CODE_LENGTHS[symbol]!;
    if (position > 0) code = (code + 1) * 2 ** (symbolLength - length);
    if (count[symbolLength] === 0) {
      firstCode[symbolLength] = code;
      offset[symbolLength] = position;
    }
    count[symbolLength]!++;
    length = symbolLength;
  });
  return { symbols, firstCode, count, offset };
})();

function huffmanDecode(bytes: Uint8Array, start: number, end: number): string {
  let decoded = "";
  let code = 0;
  let length = 0;
  for (let position = start; position < end; position++) {
    const byte = bytes[position]!;
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      length++;
      const rank = code - huffman.firstCode[length]!;
      if (huffman.count[length]! > 0 && rank >= 0 && rank < huffman.count[length]!) {
        const symbol = huffman.symbols[huffman.offset[length]! + rank]!;
        if (symbol === EOS) throw new HpackError("Huffman-coded string contains EOS");
        decoded += String.fromCharCode(symbol);
        code = 0;
        length = 0;
      } else if (length >= LONGEST_CODE) {
        throw new HpackError("invalid Huffman code");
      }
    }
  }
  // What is left must be the start of EOS (all ones) and shorter than a byte (section 5.2).
  if (length > 7 || code !== 2 ** length - 1) throw new HpackError("invalid Huffman padding");
  return decoded;
}

/** Entry overhead counted toward the table size (section 4.1). */
const ENTRY_OVERHEAD = 32;
/** Integers above this are refused: no field, index or table size of ours comes close. */
const LARGEST_INTEGER = 2 ** 31 - 1;

function entrySize(field: HeaderField): number {
  return field.name.length + field.value.length + ENTRY_OVERHEAD;
}

/**
 * Decodes header blocks of one connection, in order, keeping its dynamic
 * table. `maxTableSize` is the largest table the peer may ask for with a size
 * update: the SETTINGS_HEADER_TABLE_SIZE the decoding side advertised
 * (4096, HTTP/2's default and Node's).
 */
export class HpackDecoder {
  readonly #maxAllowedSize: number;
  #maxSize = 4096;
  #size = 0;
  /** Newest first, as the indices count them. */
  readonly #entries: HeaderField[] = [];

  constructor(maxTableSize = 4096) {
    this.#maxAllowedSize = maxTableSize;
  }

  /** The dynamic table's size as RFC 7541 counts it. */
  get tableSize(): number {
    return this.#size;
  }

  decode(block: Uint8Array): HeaderField[] {
    const fields: HeaderField[] = [];
    this.walk(block, (representation) => {
      if (representation.kind !== "size-update") fields.push(representation.field);
    });
    return fields;
  }

  /**
   * Decodes `block`, telling `visit` of each representation in order, after
   * the table has taken it in. Throws HpackError on anything RFC 7541 refuses;
   * the table is then in an unknown state and the connection must not be
   * decoded further.
   */
  walk(block: Uint8Array, visit: (representation: Representation) => void): void {
    let position = 0;
    let fieldSeen = false;
    while (position < block.length) {
      const start = position;
      const first = block[position]!;
      if (first & 0x80) {
        const [index, next] = decodeInteger(block, position, 7);
        if (index === 0) throw new HpackError("indexed field with index 0");
        position = next;
        visit({ kind: "indexed", index, field: this.#lookup(index), start, end: position });
        fieldSeen = true;
      } else if ((first & 0xe0) === 0x20) {
        if (fieldSeen) throw new HpackError("dynamic table size update after a field");
        const [size, next] = decodeInteger(block, position, 5);
        if (size > this.#maxAllowedSize) throw new HpackError(`dynamic table size update to ${size} over ${this.#maxAllowedSize}`);
        position = next;
        this.#maxSize = size;
        this.#evict(0);
        visit({ kind: "size-update", size, start, end: position });
      } else {
        const indexing: LiteralIndexing = first & 0x40 ? "incremental" : first & 0x10 ? "never" : "none";
        const [nameIndex, afterIndex] = decodeInteger(block, position, indexing === "incremental" ? 6 : 4);
        position = afterIndex;
        let name: string;
        if (nameIndex === 0) {
          [name, position] = decodeString(block, position);
        } else {
          name = this.#lookup(nameIndex).name;
        }
        let value: string;
        [value, position] = decodeString(block, position);
        const field = { name, value };
        if (indexing === "incremental") this.#insert(field);
        visit({ kind: "literal", indexing, nameIndex, field, start, end: position });
        fieldSeen = true;
      }
    }
  }

  #lookup(index: number): HeaderField {
    if (index <= STATIC_TABLE.length) return STATIC_TABLE[index - 1]!;
    const entry = this.#entries[index - STATIC_TABLE.length - 1];
    if (!entry) throw new HpackError(`index ${index} is not in the table`);
    return entry;
  }

  #insert(field: HeaderField): void {
    const size = entrySize(field);
    // An entry larger than the table empties it and is not kept (section 4.4).
    this.#evict(Math.min(size, this.#maxSize + 1));
    if (size <= this.#maxSize) {
      this.#entries.unshift(field);
      this.#size += size;
    }
  }

  /** Evicts the oldest entries until `room` more octets fit. */
  #evict(room: number): void {
    while (this.#size + room > this.#maxSize && this.#entries.length > 0) {
      this.#size -= entrySize(this.#entries.pop()!);
    }
  }
}

/** Reads an integer with an N-bit prefix (section 5.1): the value and the position after it. */
export function decodeInteger(bytes: Uint8Array, position: number, prefixBits: number): [number, number] {
  if (position >= bytes.length) throw new HpackError("header block ends inside an integer");
  const prefixMax = (1 << prefixBits) - 1;
  let value = bytes[position++]! & prefixMax;
  if (value < prefixMax) return [value, position];
  let factor = 1;
  for (;;) {
    if (position >= bytes.length) throw new HpackError("header block ends inside an integer");
    const byte = bytes[position++]!;
    value += (byte & 0x7f) * factor;
    if (value > LARGEST_INTEGER) throw new HpackError("integer too large");
    if ((byte & 0x80) === 0) return [value, position];
    factor *= 128;
  }
}

/** Writes `value` with an N-bit prefix, the prefix's high bits taken from `flags`. */
export function encodeInteger(value: number, prefixBits: number, flags: number): number[] {
  const prefixMax = (1 << prefixBits) - 1;
  if (value < prefixMax) return [flags | value];
  const bytes = [flags | prefixMax];
  let rest = value - prefixMax;
  while (rest >= 128) {
    bytes.push((rest % 128) | 0x80);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return bytes;
}

function decodeString(bytes: Uint8Array, position: number): [string, number] {
  if (position >= bytes.length) throw new HpackError("header block ends before a string");
  const huffmanCoded = (bytes[position]! & 0x80) !== 0;
  const [length, start] = decodeInteger(bytes, position, 7);
  const end = start + length;
  if (end > bytes.length) throw new HpackError("string runs past the end of the header block");
  const text = huffmanCoded ? huffmanDecode(bytes, start, end) : latin1(bytes, start, end);
  return [text, end];
}

function latin1(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString("latin1");
}

/** A string literal without Huffman coding (section 5.2). */
function encodeString(text: string): Buffer {
  const octets = Buffer.from(text, "latin1");
  return Buffer.concat([Buffer.from(encodeInteger(octets.length, 7, 0)), octets]);
}

const LITERAL_FLAGS: Record<LiteralIndexing, { flags: number; prefixBits: number }> = {
  incremental: { flags: 0x40, prefixBits: 6 },
  none: { flags: 0x00, prefixBits: 4 },
  never: { flags: 0x10, prefixBits: 4 },
};

/**
 * A literal field (section 6.2) with its name by index (`nameIndex` > 0) or
 * as a literal (`nameIndex` 0), strings not Huffman-coded. A decoder's table
 * takes it in exactly as it takes in any other encoding of the same field.
 */
export function encodeLiteral(indexing: LiteralIndexing, nameIndex: number, field: HeaderField): Buffer {
  const { flags, prefixBits } = LITERAL_FLAGS[indexing];
  const parts: Buffer[] = [Buffer.from(encodeInteger(nameIndex, prefixBits, flags))];
  if (nameIndex === 0) parts.push(encodeString(field.name));
  parts.push(encodeString(field.value));
  return Buffer.concat(parts);
}

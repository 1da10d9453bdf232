/**
 * Lets Node's HTTP/2 server take requests whose `:authority` it would reset.
 *
 * nghttp2, inside node:http2, checks `:authority` while it decodes a header
 * block and resets the stream with PROTOCOL_ERROR when the value has a
 * character a URI authority may not hold. grpc-go before 1.50 sends the bare
 * socket path there (every device plugin built with it, the kubelet's own
 * pod-resources client), which a kubelet, a grpc-go server, accepts. No option
 * of node:http2 turns that check off and no event reaches JavaScript, so the
 * only place to act is before Node reads the bytes.
 *
 * A connection whose first request carries a plain authority (grpc-js, Connect,
 * curl) is handed to Node as the socket it is: nothing is added to its calls.
 * Any other connection is read through {@link AuthorityRewriter}: the client's
 * frames pass unchanged but for header blocks that carry such an authority as a
 * literal, in which that value is replaced by one of the same length. The
 * length is kept so that the dynamic table Node builds stays the size the
 * client's encoder counts: every later index the client sends, even one that
 * points at the replaced entry, means the same entry to Node. Frames Node sends
 * pass untouched.
 */
import { Duplex } from "node:stream";
import type * as net from "node:net";
import { encodeLiteral, HpackDecoder, HpackError, type Representation } from "./hpack.ts";
import { isPlainAuthority, STAND_IN_AUTHORITY } from "./authority.ts";

const FRAME_HEADER_BYTES = 9;
const FRAME_HEADERS = 0x1;
const FRAME_PUSH_PROMISE = 0x5;
const FRAME_CONTINUATION = 0x9;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
const CLIENT_PREFACE_BYTES = 24;
/** HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which Node's server keeps: the largest frame we send it. */
const MAX_FRAME_PAYLOAD = 16_384;
/**
 * A frame or header block larger than this is passed on unread, and so is the
 * rest of the connection: Node refuses both (frames over its 16 KiB maximum, header
 * lists over its 64 KiB one), so nothing larger ever needs rewriting.
 */
const MAX_HELD_BYTES = 256 * 1024;

/**
 * Reads the client's side of one HTTP/2 connection, connection preface first,
 * and returns the bytes to give Node in its place.
 */
export class AuthorityRewriter {
  readonly #decoder = new HpackDecoder();
  readonly #onReplaced: ((authority: string) => void) | undefined;
  #prefaceLeft = CLIENT_PREFACE_BYTES;
  #pending: Buffer = Buffer.alloc(0);
  /** The frames of a header block still waiting for END_HEADERS. */
  #block: { frames: Buffer[]; fragments: Buffer[]; headersFlags: number; priority: Buffer | undefined; streamId: number; size: number } | undefined;
  /** Set once the connection cannot be followed (a broken or oversized block): everything passes unread. */
  #passthrough = false;

  /** `onReplaced` is told of each authority replaced, as the client sent it (latin1 text). */
  constructor(onReplaced?: (authority: string) => void) {
    this.#onReplaced = onReplaced;
  }

  /** Takes the next bytes the client sent; returns what to hand Node now (possibly nothing). */
  push(chunk: Buffer): Buffer {
    if (this.#passthrough) return chunk;
    const out: Buffer[] = [];
    let input = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    if (this.#prefaceLeft > 0) {
      const preface = input.subarray(0, this.#prefaceLeft);
      out.push(preface);
      this.#prefaceLeft -= preface.length;
      input = input.subarray(preface.length);
    }
    while (input.length >= FRAME_HEADER_BYTES) {
      const length = input.readUIntBE(0, 3);
      if (length > MAX_HELD_BYTES) return this.#giveUp(out, input);
      if (input.length < FRAME_HEADER_BYTES + length) break;
      const frame = input.subarray(0, FRAME_HEADER_BYTES + length);
      input = input.subarray(frame.length);
      const handed = this.#frame(frame);
      if (handed === undefined) return this.#giveUp(out, input);
      out.push(...handed);
    }
    // Kept as a copy: the chunk's memory belongs to the socket's reader.
    this.#pending = Buffer.from(input);
    return out.length === 1 ? out[0]! : Buffer.concat(out);
  }

  /** The frames to hand Node for `frame`, or undefined when the connection cannot be followed. */
  #frame(frame: Buffer): Buffer[] | undefined {
    const type = frame[3]!;
    const flags = frame[4]!;
    const streamId = frame.readUInt32BE(5) & 0x7fffffff;
    const payload = frame.subarray(FRAME_HEADER_BYTES);
    if (this.#block) {
      if (type !== FRAME_CONTINUATION || streamId !== this.#block.streamId) return undefined;
      this.#block.frames.push(frame);
      this.#block.fragments.push(payload);
      this.#block.size += payload.length;
      if (this.#block.size > MAX_HELD_BYTES) return undefined;
      return flags & FLAG_END_HEADERS ? this.#endBlock() : [];
    }
    if (type === FRAME_CONTINUATION || type === FRAME_PUSH_PROMISE) return undefined;
    if (type !== FRAME_HEADERS) return [frame];
    let start = 0;
    let end = payload.length;
    if (flags & FLAG_PADDED) {
      if (payload.length < 1) return undefined;
      end -= payload[0]!;
      start = 1;
    }
    let priority: Buffer | undefined;
    if (flags & FLAG_PRIORITY) {
      priority = payload.subarray(start, start + 5);
      start += 5;
    }
    if (end < start) return undefined;
    const fragment = payload.subarray(start, end);
    this.#block = { frames: [frame], fragments: [fragment], headersFlags: flags, priority, streamId, size: fragment.length };
    return flags & FLAG_END_HEADERS ? this.#endBlock() : [];
  }

  #endBlock(): Buffer[] | undefined {
    const block = this.#block!;
    this.#block = undefined;
    const fragments = block.fragments.length === 1 ? block.fragments[0]! : Buffer.concat(block.fragments);
    let rewritten: Buffer | undefined;
    try {
      rewritten = this.#rewrite(fragments);
    } catch (error) {
      if (error instanceof HpackError) return undefined;
      throw error;
    }
    if (!rewritten) return block.frames;
    return headerFrames(block.streamId, block.headersFlags & FLAG_END_STREAM, block.priority, rewritten);
  }

  /** The block with each authority node:http2 would refuse replaced, or undefined when it has none. */
  #rewrite(block: Buffer): Buffer | undefined {
    const parts: Buffer[] = [];
    let copiedTo = 0;
    this.#decoder.walk(block, (representation) => {
      if (representation.kind === "size-update" || representation.field.name !== ":authority") return;
      const authority = representation.field.value;
      if (isPlainAuthority(authority)) return;
      const replacement = replacementOf(representation);
      if (!replacement) return;
      parts.push(block.subarray(copiedTo, representation.start), ...replacement);
      copiedTo = representation.end;
      this.#onReplaced?.(authority);
    });
    if (parts.length === 0) return undefined;
    parts.push(block.subarray(copiedTo));
    return Buffer.concat(parts);
  }

  #giveUp(out: Buffer[], rest: Buffer): Buffer {
    this.#passthrough = true;
    if (this.#block) out.push(...this.#block.frames);
    this.#block = undefined;
    out.push(rest);
    this.#pending = Buffer.alloc(0);
    return Buffer.concat(out);
  }
}

/** The static table's `:authority` entry (RFC 7541 Appendix A). */
const STATIC_AUTHORITY_INDEX = 1;
/**
 * A regular header whose name is as long as `:authority`: with an empty value
 * it takes the same room in the table as an empty `:authority`.
 */
const EMPTY_AUTHORITY_PLACEHOLDER = "x-edgeplug";

/**
 * What to give Node in place of a representation carrying an unplain
 * authority, or undefined to leave it: an index into the dynamic table needs
 * nothing, as the entry it points at was replaced when it was inserted.
 *
 * A literal keeps its kind and takes a value of the same length, so the table
 * entries Node makes have the sizes the client counts. An empty authority has
 * no replacement of its length: it is sent as `localhost` without indexing
 * and, when the client indexed it, followed by an empty placeholder header
 * that Node indexes in its place (a later index to it then names that header,
 * and the request has no authority, which Node and Connect accept).
 */
function replacementOf(representation: Representation): Buffer[] | undefined {
  const localhost = { name: ":authority", value: STAND_IN_AUTHORITY };
  if (representation.kind === "indexed") {
    return representation.index === STATIC_AUTHORITY_INDEX ? [encodeLiteral("none", STATIC_AUTHORITY_INDEX, localhost)] : undefined;
  }
  if (representation.kind !== "literal") return undefined;
  const { indexing, nameIndex, field } = representation;
  if (field.value.length > 0) return [encodeLiteral(indexing, nameIndex, { name: field.name, value: "x".repeat(field.value.length) })];
  if (indexing !== "incremental") return [encodeLiteral(indexing, STATIC_AUTHORITY_INDEX, localhost)];
  return [
    encodeLiteral("none", STATIC_AUTHORITY_INDEX, localhost),
    encodeLiteral("incremental", 0, { name: EMPTY_AUTHORITY_PLACEHOLDER, value: "" }),
  ];
}

/** A HEADERS frame and as many CONTINUATION frames as `block` needs, the last with END_HEADERS. */
function headerFrames(streamId: number, endStream: number, priority: Buffer | undefined, block: Buffer): Buffer[] {
  const frames: Buffer[] = [];
  let offset = 0;
  let first = true;
  do {
    const room = MAX_FRAME_PAYLOAD - (first && priority ? priority.length : 0);
    const fragment = block.subarray(offset, offset + room);
    offset += fragment.length;
    const last = offset >= block.length;
    const type = first ? FRAME_HEADERS : FRAME_CONTINUATION;
    const flags = (first ? endStream | (priority ? FLAG_PRIORITY : 0) : 0) | (last ? FLAG_END_HEADERS : 0);
    const payload = first && priority ? Buffer.concat([priority, fragment]) : fragment;
    const header = Buffer.alloc(FRAME_HEADER_BYTES);
    header.writeUIntBE(payload.length, 0, 3);
    header[3] = type;
    header[4] = flags;
    header.writeUInt32BE(streamId, 5);
    frames.push(header, payload);
    first = false;
  } while (offset < block.length);
  return frames;
}

/**
 * Decides, from the bytes a client sent first (its connection preface and what
 * came with it), whether its connection needs {@link AuthorityRewriter}: true
 * unless those bytes hold a whole first header block whose authority is plain.
 * A client that waits for the server's SETTINGS before its first request, as
 * grpc-go does, has sent no header block yet and is read through the rewriter.
 */
export function needsAuthorityRewrite(head: Buffer): boolean {
  let position = CLIENT_PREFACE_BYTES;
  while (position + FRAME_HEADER_BYTES <= head.length) {
    const length = head.readUIntBE(position, 3);
    const type = head[position + 3]!;
    const flags = head[position + 4]!;
    const end = position + FRAME_HEADER_BYTES + length;
    if (end > head.length) return true;
    if (type === FRAME_HEADERS) {
      if (!(flags & FLAG_END_HEADERS) || flags & FLAG_PADDED) return true;
      const fragment = head.subarray(position + FRAME_HEADER_BYTES + (flags & FLAG_PRIORITY ? 5 : 0), end);
      try {
        // A fresh decoder holds the same table as Node's will: this is the connection's first block.
        const fields = new HpackDecoder().decode(fragment);
        const authority = fields.find((field) => field.name === ":authority");
        return authority !== undefined && !isPlainAuthority(authority.value);
      } catch {
        return true;
      }
    }
    position = end;
  }
  return true;
}

/**
 * A stream for Node's HTTP/2 server in place of `socket`: what the client
 * sends goes through `rewriter`, what Node writes goes to the socket as it is.
 * `head` holds the bytes already read from the socket.
 */
export function rewritingStream(socket: net.Socket, head: Buffer, rewriter: AuthorityRewriter): Duplex {
  let reading = false;
  const forward = (chunk: Buffer) => {
    const out = rewriter.push(chunk);
    if (out.length > 0 && !stream.push(out)) socket.pause();
  };
  const stream = new Duplex({
    read() {
      if (!reading) {
        reading = true;
        forward(head);
        socket.on("data", forward);
      }
      socket.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      if (socket.write(chunk)) callback();
      else socket.once("drain", () => callback());
    },
    // An answer is several frames written at once (HEADERS, DATA, trailers): one write to the socket for them all.
    writev(chunks, callback) {
      const written = socket.write(chunks.length === 1 ? chunks[0]!.chunk : Buffer.concat(chunks.map(({ chunk }) => chunk as Buffer)));
      if (written) callback();
      else socket.once("drain", () => callback());
    },
    final(callback) {
      socket.end(callback);
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  socket.once("end", () => stream.push(null));
  socket.once("close", () => stream.destroy());
  socket.on("error", (error) => stream.destroy(error));
  return stream;
}

/**
 * Hands an HTTP/2 connection to `serve`: the socket itself, with the bytes
 * already read (`head`) put back, when its first request's authority is plain;
 * otherwise a {@link rewritingStream} over it.
 */
export function handOverHttp2(
  socket: net.Socket,
  head: Buffer,
  serve: (connection: Duplex) => void,
  onReplaced?: (authority: string) => void,
): void {
  if (!needsAuthorityRewrite(head)) {
    socket.unshift(head);
    serve(socket);
    return;
  }
  serve(rewritingStream(socket, head, new AuthorityRewriter(onReplaced)));
}

import Router, { type RouterMiddleware } from '@koa/router';
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline, Readable } from 'node:stream';
import { createGzip } from 'node:zlib';
import type Koa from 'koa';
import inflate from 'inflation';
import getRawBody from 'raw-body';
import type { Static, TSchema } from 'typebox';
import type { RequestMeta } from '../../commands/bus.js';
import type { Logger } from '../../infra/logger.js';
import { badRequest, ProblemError } from './problem.js';
import { Validator } from './validation.js';

export type AuthKind = 'key' | 'session' | 'owner';

export type Principal =
  | { kind: 'none' }
  | { kind: 'key'; key_id: string; project_id: string; tenant_id: string; scopes: string[] }
  | { kind: 'session'; user_id: string; tenant_id: string }
  /** The memory service's caller: `verified` when MEMORY_OWNER_TOKEN is set (and was presented), false when none is configured. */
  | { kind: 'owner'; verified: boolean };

export const BODY_LIMIT_BYTES = 1024 * 1024;

/** Request headers the skeleton reads on every request: the server's rule and the OpenAPI document's pattern. */
export const REQUEST_ID_PATTERN = '^[A-Za-z0-9._:-]{1,128}$';
export const IDEMPOTENCY_KEY_PATTERN = '^[\\x21-\\x7e]{1,255}$';
const IDEMPOTENCY_KEY = new RegExp(IDEMPOTENCY_KEY_PATTERN);

export interface Call<P, Q, B> {
  params: P;
  query: Q;
  body: B;
  principal: Principal;
  meta: RequestMeta;
  koa: Koa.Context;
  log: Logger;
  /** Aborts when the client goes away before its answer is finished: pass it to read-model waits. */
  signal: AbortSignal;
}

export interface Reply {
  status?: number;
  body?: unknown;
  /**
   * Instead of `body`, for answers too large to hold: JSON text in chunks, sent as they come (chunked, no
   * Content-Length) and asked for one chunk ahead of what the connection has taken. The status line is sent
   * with the first chunk, so a stream that fails later cannot become a problem response: the connection is
   * destroyed (Koa pipes the body with stream.pipeline), and the client sees an incomplete answer, never
   * complete-looking JSON. A client that takes nothing of it for SEND_TIMEOUT_MS is cut the same way (see sendGuarded).
   * Sent gzip-compressed to a client whose Accept-Encoding takes gzip.
   */
  stream?: AsyncIterable<string>;
  /** Log position of the command's last event: sent as X-Event-Position. */
  position?: number;
  headers?: Record<string, string>;
}

export interface ResponseDoc {
  description: string;
  schema?: TSchema;
  /** Response headers this answer may carry, for the OpenAPI document. */
  headers?: Record<string, { description: string; schema: TSchema }>;
}

export interface RouteDef<P extends TSchema = TSchema, Q extends TSchema = TSchema, B extends TSchema = TSchema> {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  /** Accepted credentials; empty means public. */
  auth: AuthKind[];
  /** API key scope this operation needs (keys with `*` have every scope). */
  scope?: string;
  params?: P;
  query?: Q;
  body?: B;
  /** Projections a query reads: it honours X-Min-Position / min_position against them. */
  readModels?: string[];
  responses: Record<number, ResponseDoc>;
  /** Problem statuses this operation can answer, for the OpenAPI document. */
  errors: number[];
  /** What a status means for this operation, where the document's general text (one for every operation) does not fit. */
  errorDescriptions?: Partial<Record<number, string>>;
  /** Members a problem answer of this status carries besides the Problem's own (documented as allOf: [Problem, this]). */
  problemExtensions?: Partial<Record<number, TSchema>>;
  /** false: an operation of the spec that is routed and documented but answers 501 (see api/platform/unbuilt.ts). */
  implemented?: false;
  handler(call: Call<Static<P>, Static<Q>, Static<B>>): Promise<Reply>;
}

export function route<P extends TSchema, Q extends TSchema, B extends TSchema>(def: RouteDef<P, Q, B>): RouteDef {
  return def as unknown as RouteDef;
}

/** Commands change state (and take an Idempotency-Key); queries (GET, and POSTs that read: search, context, chat) declare their read models. */
export const isCommand = (r: RouteDef) => r.method !== 'GET' && !r.readModels && r.implemented !== false;

export interface Mounting {
  authenticate(ctx: Koa.Context, accepted: AuthKind[]): Promise<Principal>;
  /** Rejects with `signal`'s reason (a ClientGoneError) once it aborts, releasing the wait. */
  waitFor(projections: string[], position: number, signal?: AbortSignal): Promise<void>;
  /** Content types a JSON body may have (type-is patterns); default `application/json` and `+json` types. */
  jsonTypes?: string[];
  /** SEND_TIMEOUT_MS, for answers of more than one piece, streamed or not (see sendGuarded); default 60 s. */
  sendTimeoutMs?: number;
}

/** The most of a streamed answer written at once: a client's progress is seen a piece at a time. */
export const STREAM_PIECE_BYTES = 64 * 1024;

/**
 * An answer's chunks (a streamed answer's, or one of a larger JSON text) as UTF-8 pieces of at most STREAM_PIECE_BYTES, destroying the response when its
 * client takes none of it for `sendTimeoutMs`, as nginx's `send_timeout` does. A piece is asked for once the
 * connection has taken the one before (one ahead, see Reply.stream), so the time a piece waits at `yield` is time
 * in which the client took nothing; the time the source spends making a chunk (reading a page of the read model,
 * waiting for a vector) is not counted. Without it, a client that stops reading (TCP keeps a zero window open
 * indefinitely) holds the connection, and the chunk being sent (an export's page of 1,000 memories), until the
 * server stops.
 */
export async function* sendGuarded(
  chunks: AsyncIterable<string | Buffer> | Iterable<string | Buffer>, res: ServerResponse, sendTimeoutMs: number, onStall: () => void,
): AsyncGenerator<Buffer> {
  for await (const chunk of chunks) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    for (let at = 0; at < bytes.length; at += STREAM_PIECE_BYTES) {
      const timer = setTimeout(() => {
        onStall();
        res.destroy();
      }, sendTimeoutMs);
      try {
        yield bytes.subarray(at, at + STREAM_PIECE_BYTES);
      } finally {
        clearTimeout(timer);
      }
    }
  }
}

/** Mounts routes on a router in the same order everywhere: auth → validation → consistency → handler. */
export function mountRoutes(router: Router, routes: RouteDef[], mounting: Mounting): void {
  for (const def of routes) {
    const params = def.params ? new Validator(def.params, 'path', true) : undefined;
    const query = def.query ? new Validator(def.query, 'query', true) : undefined;
    const body = def.body ? new Validator(def.body, 'body') : undefined;
    const path = def.path;
    const command = isCommand(def);
    // A query schema open to any parameter (the health probes', for cache busters) takes the query as it comes.
    const openQuery = (def.query as { additionalProperties?: unknown } | undefined)?.additionalProperties === true;
    const serve = async (ctx: Koa.Context): Promise<void> => {
      const principal = def.auth.length > 0 ? await mounting.authenticate(ctx, def.auth) : ({ kind: 'none' } as const);
      const meta = ctx.state.meta as RequestMeta;
      if (principal.kind === 'key' && def.scope && !principal.scopes.includes('*') && !principal.scopes.includes(def.scope)) {
        throw new ProblemError(403, 'insufficient-scope', `this API key lacks the scope ${def.scope}`);
      }
      // Sent at all (empty too), a key must be well-formed; only commands take one (as documented), so only they check it.
      // After authentication, as every validation: a caller without credentials learns nothing of the request's form.
      if (command && ctx.req.headers['idempotency-key'] !== undefined && !IDEMPOTENCY_KEY.test(ctx.get('Idempotency-Key'))) {
        throw badRequest('invalid Idempotency-Key', [{ location: 'header.Idempotency-Key', message: 'must be 1-255 visible ASCII characters' }]);
      }
      if (principal.kind === 'key') {
        meta.actor = `key:${principal.key_id}`;
        meta.project_id = principal.project_id;
        meta.tenant_id = principal.tenant_id;
      } else if (principal.kind === 'session') {
        meta.actor = `user:${principal.user_id}`;
        meta.tenant_id = principal.tenant_id;
      } else if (principal.kind === 'owner') {
        // Without MEMORY_OWNER_TOKEN anyone who reaches the port may write: the log does not claim it was the owner.
        meta.actor = principal.verified ? 'owner' : 'anonymous';
      }
      const rawQuery = { ...ctx.query } as Record<string, unknown>;
      const minPosition = openQuery ? undefined : takeMinPosition(ctx, rawQuery, def.readModels !== undefined);
      for (const [k, v] of Object.entries(rawQuery)) {
        if (Array.isArray(v) && !openQuery) throw badRequest(`query parameter ${k} given more than once`, [{ location: `query.${k}`, message: 'must be given once', value: v }]);
      }
      const parsedParams = params ? lowercaseUuids(def.params!, params.parse(ctx.params)) as Record<string, unknown> : ctx.params;
      // A session acts on the project in the path: its events' metadata names it (a key's project is set above).
      if (principal.kind === 'session' && typeof parsedParams.projectId === 'string') meta.project_id = parsedParams.projectId;
      const call: Call<unknown, unknown, unknown> = {
        params: parsedParams,
        query: query ? query.parse(rawQuery) : rejectUnknownQuery(rawQuery),
        body: body ? body.parse(await readJsonBody(ctx, mounting.jsonTypes)) : undefined,
        principal,
        meta,
        koa: ctx,
        // The request's logger is made on first use (see app.ts): most requests log nothing.
        get log() { return ctx.state.log as Logger; },
        get signal() { return requestSignal(ctx); },
      };
      if (minPosition !== undefined && def.readModels && def.readModels.length > 0) await mounting.waitFor(def.readModels, minPosition, requestSignal(ctx));
      const reply = await def.handler(call as never);
      if (reply.position !== undefined) ctx.set('X-Event-Position', String(reply.position));
      for (const [k, v] of Object.entries(reply.headers ?? {})) ctx.set(k, v);
      ctx.status = reply.status ?? 200;
      if (ctx.status === 204) return;
      // Serialised here so scalar JSON values (a config value "abc", 42, null) are sent as JSON too.
      ctx.type = 'application/json';
      const sendTimeoutMs = mounting.sendTimeoutMs ?? 60_000;
      const stalled = stalledLogger(call, sendTimeoutMs);
      if (reply.stream) {
        const chunks = Readable.from(sendGuarded(reply.stream, ctx.res, sendTimeoutMs, stalled), { highWaterMark: 1 });
        // Large answers (an export is mostly digits and repeated keys) are compressed when the client takes gzip, on
        // libuv's threads, not this one, at level 1 as nginx does by default: 2.4x smaller at about 75 MB/s a core with
        // random vectors, against 2.7x at 20 MB/s for zlib's default level 6. pipeline: a source that fails destroys
        // the compressor, and so the connection.
        ctx.vary('Accept-Encoding');
        // x-gzip: gzip's old name, which RFC 9110 (8.4.1.3) says to take as gzip.
        if (['gzip', 'x-gzip'].includes(ctx.acceptsEncodings('gzip', 'x-gzip', 'identity') || '')) {
          ctx.set('Content-Encoding', 'gzip');
          ctx.body = pipeline(chunks, createGzip({ level: 1 }), () => {});
        } else ctx.body = chunks;
      }
      else {
        const json = JSON.stringify(reply.body ?? null);
        // An answer of more than one piece (100 search results of long memories, about 1 MB) is sent in pieces under the
        // same timeout, with its length: otherwise a client that stops reading holds it, and the connection, for ever.
        const bytes = json.length * 3 <= STREAM_PIECE_BYTES ? undefined : Buffer.from(json);
        if (!bytes || bytes.length <= STREAM_PIECE_BYTES) ctx.body = bytes ?? json;
        else {
          ctx.body = Readable.from(sendGuarded([bytes], ctx.res, sendTimeoutMs, stalled), { highWaterMark: 1 });
          ctx.length = bytes.length;
        }
      }
    };
    const handler: RouterMiddleware = async (ctx) => {
      try {
        await serve(ctx);
      } catch (error) {
        if (!(error instanceof ClientGoneError)) throw error;
        // A wait (authentication's or the route's) ended by a client that left: nobody is left to answer,
        // nothing is written (the socket is closed), and it is no failure of ours. 499 ("client closed
        // request", as nginx logs it) is for the access log only.
        ctx.status = 499;
      }
    };
    router.register(path, [def.method], handler, { name: def.operationId });
  }
}

/** Why a request's read-model wait ended early: its client closed the connection before the answer was finished. */
export class ClientGoneError extends Error {
  override readonly name = 'ClientGoneError';
  constructor() {
    super('the client closed the connection before its answer was finished');
  }
}

const SIGNAL = Symbol('request signal');

/**
 * An AbortSignal that aborts (with a ClientGoneError) when the request's connection closes before its
 * response is finished: a client that hangs up releases its waits instead of holding a listener and a
 * timer for CONSISTENCY_TIMEOUT_MS. Made on first use, once per request. (The response's 'close', not
 * the request's: the request stream closes as soon as its body has been read.)
 */
export function requestSignal(ctx: Koa.Context): AbortSignal {
  const state = ctx.state as { [SIGNAL]?: AbortSignal };
  if (state[SIGNAL]) return state[SIGNAL];
  const controller = new AbortController();
  const res = ctx.res;
  if (res.destroyed) abortUnfinished(res, controller);
  else res.once('close', () => abortUnfinished(res, controller));
  return (state[SIGNAL] = controller.signal);
}

function abortUnfinished(res: ServerResponse, controller: AbortController): void {
  if (!res.writableFinished) controller.abort(new ClientGoneError());
}

/**
 * What sendGuarded calls when a client takes none of an answer in time. Made by a function, not written as a named
 * closure in the route's handler: under tsx (esbuild's keepNames) each named closure made costs a defineProperty of its
 * name, for every answer.
 */
function stalledLogger(call: { log: Logger }, sendTimeoutMs: number): () => void {
  return () => call.log.warn({ send_timeout_ms: sendTimeoutMs }, 'the client took none of the answer within SEND_TIMEOUT_MS: closing the connection');
}

/** UUIDs in the path are case-insensitive (RFC 9562): ids are stored lower-case, so compare them that way. */
function lowercaseUuids(schema: TSchema, value: unknown): unknown {
  const properties = (schema as { properties?: Record<string, { format?: string }> }).properties;
  if (!properties || value === null || typeof value !== 'object') return value;
  const out = { ...(value as Record<string, unknown>) };
  for (const [name, property] of Object.entries(properties)) {
    if (property.format === 'uuid' && typeof out[name] === 'string') out[name] = (out[name] as string).toLowerCase();
  }
  return out;
}

function rejectUnknownQuery(query: Record<string, unknown>): Record<string, unknown> {
  const names = Object.keys(query);
  if (names.length > 0) throw badRequest('invalid query', [{ location: 'query', message: `unknown parameter${names.length > 1 ? 's' : ''}: ${names.join(', ')}`, value: names }]);
  return {};
}

/**
 * X-Min-Position header or min_position query parameter: a non-negative integer log position. Both may be
 * given (a client library sending the header on every request, a caller adding the parameter): each is
 * checked, and the request waits for the later of the two, which satisfies both.
 */
function takeMinPosition(ctx: Koa.Context, query: Record<string, unknown>, accepted: boolean): number | undefined {
  const fromQuery = query.min_position;
  delete query.min_position;
  if (Array.isArray(fromQuery)) throw badRequest('query parameter min_position given more than once', [{ location: 'query.min_position', message: 'must be given once', value: fromQuery }]);
  if (fromQuery !== undefined && !accepted) {
    throw badRequest('min_position is not accepted here', [{ location: 'query.min_position', message: 'only queries wait for read models; commands are applied in order', value: fromQuery }]);
  }
  // A header on a command is ignored (clients may send it on every request); a query parameter is not.
  if (!accepted) return undefined;
  // A token sent empty (`?min_position=`, `X-Min-Position:`) is a malformed one, as the document's pattern says (and
  // as a min_position on a command is), not an absent one: a client that meant to send a position did not. (ctx.get
  // answers '' for an absent header too, so the header is read from the request itself.)
  const given: Array<[unknown, string]> = [[ctx.req.headers['x-min-position'], 'header.X-Min-Position'], [fromQuery, 'query.min_position']];
  const positions = given.flatMap(([raw, location]) => {
    if (raw === undefined) return [];
    if (typeof raw !== 'string' || !POSITION.test(raw)) {
      throw badRequest('invalid consistency token', [{ location, message: 'must be a position returned in X-Event-Position', value: raw }]);
    }
    return [Number(raw)];
  });
  return positions.length > 0 ? Math.max(...positions) : undefined;
}

const POSITION = /^\d{1,16}$/;

/**
 * The position a request asks to be served at (X-Min-Position or min_position, the later of the two), read
 * leniently for what runs before validation (authentication): undefined when neither is a valid position,
 * since the route's own check answers a malformed one (takeMinPosition).
 */
export function requestedMinPosition(ctx: Koa.Context): number | undefined {
  const fromQuery = ctx.query.min_position;
  const valid = [ctx.get('X-Min-Position'), fromQuery].filter((raw): raw is string => typeof raw === 'string' && POSITION.test(raw)).map(Number);
  return valid.length > 0 ? Math.max(...valid) : undefined;
}

/**
 * Reads a JSON body: content type must be JSON, at most 1 MiB, UTF-8, one JSON value and nothing after it
 * (JSON.parse rejects trailing data), not empty. Every failure is a 400 problem.
 */
export async function readJsonBody(ctx: Koa.Context, types: string[] = ['application/json', '+json']): Promise<unknown> {
  const is = ctx.is(types);
  // null: the request has no body at all (neither Content-Length nor Transfer-Encoding), whatever its type.
  if (is === null) throw badRequest('request body is required');
  if (!is) {
    throw badRequest('Content-Type must be application/json', [{ location: 'header.Content-Type', message: 'must be application/json', value: ctx.get('Content-Type') || null }]);
  }
  // JSON is UTF-8 (RFC 8259 §8.1): another declared charset is refused rather than decoded as UTF-8.
  const charset = ctx.request.charset;
  if (charset && !/^utf-?8$/i.test(charset)) {
    throw badRequest('JSON bodies must be UTF-8', [{ location: 'header.Content-Type', message: 'charset must be utf-8 (or absent)', value: ctx.get('Content-Type') }]);
  }
  const bytes = await readBody(ctx);
  // Checked on the bytes: decoding first would turn a latin1 "café" into a stored "caf\uFFFD".
  if (!isUtf8(bytes)) {
    const offset = firstInvalidUtf8Byte(bytes);
    const byte = `0x${bytes[offset]!.toString(16).toUpperCase().padStart(2, '0')}`;
    throw badRequest(`request body is not valid UTF-8 (byte ${offset})`, [{ location: 'body', message: `must be UTF-8 (RFC 8259 §8.1): byte ${offset} (${byte}) is not part of a well-formed UTF-8 sequence` }]);
  }
  // A byte order mark is not JSON text, and RFC 8259 §8.1 lets parsers ignore it: it is skipped.
  const text = bytes.toString('utf8', hasUtf8Bom(bytes) ? 3 : 0);
  if (text === '') throw badRequest('request body is required');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw badRequest(`malformed JSON: ${(error as Error).message}`);
  }
  checkJsonShape(value, text);
  return value;
}

/**
 * Requests that wait for 100 Continue before sending their body (Expect: 100-continue; see answerClientErrors,
 * which takes them from Node instead of letting it answer 100 at once). It is sent when the body is read, so a
 * request refused before that (credentials, route, method, browser, a declared length over the limit) is
 * answered without its body ever being sent (curl announces bodies over 1 MiB so); Node then closes the
 * connection, since the client may still send the body it announced.
 */
const awaitingContinue = new WeakSet<IncomingMessage>();

export function awaitContinue(req: IncomingMessage): void {
  awaitingContinue.add(req);
}

/** Asks a request waiting for 100 Continue for its body; nothing for any other request. */
export function sendContinue(ctx: Koa.Context): void {
  if (awaitingContinue.delete(ctx.req) && !ctx.res.headersSent) ctx.res.writeContinue();
}

/**
 * The body's bytes, read by raw-body (as co-body and koa-body read them, without their decoding): at most 1 MiB after a
 * gzip (or x-gzip), deflate or br Content-Encoding is undone by inflation (names are case-insensitive, RFC 9110
 * §8.4.1), a client that leaves before the end noticed (see failOnAbort). Bytes, not text: decoding as UTF-8 here
 * would turn invalid bytes into U+FFFD before readJsonBody could see them.
 */
async function readBody(ctx: Koa.Context): Promise<Buffer> {
  const req = ctx.req;
  const declared = req.headers['content-encoding'];
  // A recipient should take x-gzip for gzip (RFC 9110 §8.4.1.3); inflation, which reads this header, knows only the latter.
  const encoding = declared === undefined ? 'identity' : (req.headers['content-encoding'] = declared.toLowerCase().replace(/^x-gzip$/, 'gzip'));
  const length = req.headers['content-length'];
  // An uncompressed body declared over the limit is refused unread (raw-body): not asked for either.
  if (encoding !== 'identity' || !(Number(length) > BODY_LIMIT_BYTES)) sendContinue(ctx);
  try {
    // raw-body notices a client leaving in the middle of an uncompressed body itself (see failOnAbort), but not one
    // that left before the body was asked for (it fails that as a stream not readable).
    if (encoding === 'identity') {
      if (req.destroyed && !req.complete) throw requestAborted();
      return await getRawBody(req, { limit: BODY_LIMIT_BYTES, length: length === undefined ? undefined : Number(length) });
    }
    return await failOnAbort(req, getRawBody(inflate(req), { limit: BODY_LIMIT_BYTES }));
  } catch (error) {
    // raw-body leaves the rest of a body it refused paused (piped into a decompressor, or not): a request sent
    // next on this connection would wait behind it until the keep-alive timeout. The rest is read and dropped
    // instead, as Node does with a body nobody reads (bounded by the server's requestTimeout), so the client gets
    // this answer and can go on using the connection; closing it would cut a client still sending (EPIPE).
    req.unpipe();
    req.resume();
    const { type, status } = error as { type?: string; status?: number };
    if (type === 'entity.too.large') throw badRequest(`request body exceeds ${BODY_LIMIT_BYTES} bytes`);
    if (type === 'request.aborted') throw new ProblemError(400, 'aborted', 'request body was not received completely');
    if (type === 'encoding.unsupported' || status === 415) {
      throw badRequest('unsupported Content-Encoding', [{ location: 'header.Content-Encoding', message: 'must be gzip, deflate, br or identity', value: ctx.get('Content-Encoding') }]);
    }
    // Corrupt compressed data, or fewer or more bytes than Content-Length.
    throw badRequest('request body could not be read');
  }
}

/**
 * Waits for `reading`, but fails it as raw-body fails an uncompressed body whose client leaves before its end
 * (type 'request.aborted') once the request closes incomplete. raw-body notices a client leaving by the
 * request's 'aborted' event; a compressed body, though, is read from the decompressor inflation pipes the
 * request into, which a request cut short neither ends nor fails: the read would wait for ever, and the
 * request would never finish or be logged. The read left behind is reachable only from the request, and is
 * collected with it.
 */
async function failOnAbort<T>(req: IncomingMessage, reading: Promise<T>): Promise<T> {
  let aborted!: () => void;
  const closed = new Promise<never>((_, reject) => {
    aborted = () => {
      if (!req.complete) reject(requestAborted());
    };
  });
  // A client can leave while the request is authenticated, before its body is asked for.
  if (req.destroyed) aborted();
  else req.once('close', aborted);
  try {
    return await Promise.race([reading, closed]);
  } finally {
    req.off('close', aborted);
  }
}

/** The error raw-body fails a body with when its client leaves before the end (mapped to the `aborted` problem). */
const requestAborted = () => Object.assign(new Error('request aborted'), { type: 'request.aborted' });

/**
 * Where `bytes` stop being UTF-8: the offset of the first byte that is not part of a well-formed sequence
 * (Unicode Table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF, nothing cut short), or -1.
 * Only for the error message: isUtf8 (simdutf) answers whether there is one much faster.
 */
function firstInvalidUtf8Byte(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const lead = bytes[i]!;
    if (lead < 0x80) {
      i++;
      continue;
    }
    // The sequence's length and the range its second byte must be in (the others are 0x80-0xBF).
    let length: number;
    let low = 0x80;
    let high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) length = 2;
    else if (lead >= 0xe0 && lead <= 0xef) [length, low, high] = [3, lead === 0xe0 ? 0xa0 : 0x80, lead === 0xed ? 0x9f : 0xbf];
    else if (lead >= 0xf0 && lead <= 0xf4) [length, low, high] = [4, lead === 0xf0 ? 0x90 : 0x80, lead === 0xf4 ? 0x8f : 0xbf];
    else return i;
    for (let k = 1; k < length; k++) {
      const next = bytes[i + k];
      if (next === undefined || next < (k === 1 ? low : 0x80) || next > (k === 1 ? high : 0xbf)) return i;
    }
    i += length;
  }
  return -1;
}

const hasUtf8Bom = (bytes: Uint8Array) => bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;

/**
 * How deeply bodies may nest arrays and objects. Deeper values are no one's data, and past it they break
 * what handles them later: stack overflows in hashing and serialising, and SQLite's JSON functions
 * (used by the read models) refuse documents nested 1,000 levels deep, which would stop a projection.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Refuses a parsed body nested more than MAX_JSON_DEPTH levels deep (a scalar is 0, `[]` is 1), or holding a
 * `__proto__` key at any depth: JSON.parse makes it an own property, which a later spread or merge turns into
 * the object's prototype (prototype poisoning). One walk without recursion, stopping at the first problem.
 * Also refuses an object with the same name twice (`text`: the body parsed): JSON.parse keeps the last, so
 * the request would mean one thing to this server and maybe another to a proxy or a log reader that keeps
 * the first (RFC 8259 §4 asks for unique names; I-JSON, RFC 7493 §2.3, requires them). The walk counts the
 * names the parsed objects hold; a text with more names than that has a duplicate, which duplicateName finds.
 */
function checkJsonShape(value: unknown, text: string): void {
  const stack: Array<[unknown, number]> = [[value, 0]];
  let names = 0;
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    const level = depth + 1;
    if (level > MAX_JSON_DEPTH) {
      throw badRequest(`JSON nested more than ${MAX_JSON_DEPTH} levels deep`, [{ location: 'body', message: `must be nested at most ${MAX_JSON_DEPTH} levels deep (arrays and objects)` }]);
    }
    if (!Array.isArray(current) && Object.hasOwn(current, '__proto__')) {
      throw badRequest('JSON with a __proto__ key (prototype poisoning)', [{ location: 'body', message: 'must not have a __proto__ key, at any depth' }]);
    }
    const children = Array.isArray(current) ? current : Object.values(current);
    if (!Array.isArray(current)) names += children.length;
    for (const child of children) if (child !== null && typeof child === 'object') stack.push([child, level]);
  }
  if (names > 0 && countNames(text) > names) {
    const duplicate = duplicateName(text);
    throw badRequest(`JSON object with a duplicate name at ${duplicate.location}`, [{
      location: duplicate.location, message: 'names within an object must be unique (RFC 8259 §4, I-JSON)', value: duplicate.name,
    }]);
  }
}

const BACKSLASH = 0x5c, COLON = 0x3a;

/** The end (after the closing quote) of the JSON string starting at `at` (its opening quote), in valid JSON. */
function stringEnd(text: string, at: number): number {
  // The first quote after an even number of backslashes (none included) ends it.
  for (let j = text.indexOf('"', at + 1); ; j = text.indexOf('"', j + 1)) {
    let escapes = 0;
    while (text.charCodeAt(j - 1 - escapes) === BACKSLASH) escapes++;
    if (escapes % 2 === 0) return j + 1;
  }
}

/** Whether the JSON string ending before `end` is an object member's name: a colon follows it (valid JSON). */
function isName(text: string, end: number): boolean {
  let i = end;
  while (text.charCodeAt(i) <= 0x20) i++;
  return text.charCodeAt(i) === COLON;
}

/** How many member names a valid JSON text has. */
function countNames(text: string): number {
  let count = 0;
  for (let i = text.indexOf('"'); i !== -1; i = text.indexOf('"', i)) {
    i = stringEnd(text, i);
    if (isName(text, i)) count++;
  }
  return count;
}

/**
 * The first name that repeats within its object, and where (`body.a.b.0.name`), in a valid JSON text known to
 * have one. Names are compared decoded (`"a"` and `"\u0061"` are the same name).
 */
function duplicateName(text: string): { location: string; name: string } {
  const frames: Array<{ names?: Set<string>; key: string; index: number }> = [];
  const path = () => ['body', ...frames.map((f) => f.key)].join('.');
  for (let i = 0; i < text.length;) {
    const c = text[i]!;
    if (c === '{' || c === '[') {
      frames.push(c === '{' ? { names: new Set(), key: '', index: 0 } : { key: '0', index: 0 });
      i++;
    } else if (c === '}' || c === ']') {
      frames.pop();
      i++;
    } else if (c === ',') {
      const frame = frames.at(-1)!;
      if (!frame.names) frame.key = String(++frame.index);
      i++;
    } else if (c === '"') {
      const end = stringEnd(text, i);
      const frame = frames.at(-1);
      if (frame?.names && isName(text, end)) {
        const name = JSON.parse(text.slice(i, end)) as string;
        frame.key = name;
        if (frame.names.has(name)) return { location: path(), name };
        frame.names.add(name);
      }
      i = end;
    } else i++;
  }
  return { location: 'body', name: '' };
}

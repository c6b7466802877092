/**
 * The event store port. Two adapters implement it: `embedded` (SQLite, the default)
 * and `esdb` (EventStoreDB/KurrentDB). Both are exercised by test/contract/eventstore.
 *
 * Positions are global, strictly increasing numbers; clients only ever see them as
 * opaque consistency tokens (X-Event-Position / X-Min-Position).
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface EventMetadata {
  correlation_id: string;
  causation_id: string;
  actor: string;
  project_id?: string;
  /** The tenant the project belongs to (platform commands; absent on the memory service). */
  tenant_id?: string;
  occurred_at: string;
  [key: string]: Json | undefined;
}

/** What a command handler appends. `id` is deterministic so a retried request is a no-op. */
export interface NewEvent {
  id: string;
  type: string;
  data: Record<string, unknown>;
  metadata: EventMetadata;
}

export interface RecordedEvent<Data = Record<string, unknown>> {
  id: string;
  stream: string;
  revision: number;
  position: number;
  type: string;
  /** Always a JSON object (see eventObject). */
  data: Data;
  /** Cairn's events carry every field; an event another tool wrote (EventStoreDB) may carry none (see eventObject). */
  metadata: EventMetadata;
  recorded_at: string;
}

/**
 * `no_stream`: the stream must not exist; a number: the revision of the stream's last event;
 * `any`: no check (only for operator tools, never for command handlers).
 */
export type ExpectedRevision = number | 'no_stream' | 'stream_exists' | 'any';

export interface AppendResult {
  /** Revision of the last event written (or found, for an idempotent retry). */
  revision: number;
  /** Global position of the last event written. */
  position: number;
  /**
   * false: an idempotent retry, which found these events in the log and wrote nothing. Absent where the store
   * cannot tell (EventStoreDB answers a retry as it answered the first append; it tells for appends marked `repeat`).
   */
  written?: boolean;
}

export interface StreamInfo {
  stream: string;
  revision: number;
  event_count: number;
  first_position: number;
  last_position: number;
  created_at: string;
  updated_at: string;
}

export interface SubscriptionFilter {
  /** Only events whose type is in this list. */
  types?: string[];
  /** Only events of streams starting with one of these prefixes. */
  streamPrefixes?: string[];
  /**
   * Only events whose metadata's `correlation_id` (the request that caused them) is one of these: an audit's "what did
   * request X do". The embedded log has SQLite test them (only matches are parsed); EventStoreDB's adapter reads past
   * the others.
   */
  correlationIds?: string[];
  /** Only events whose metadata's `actor` (key:<id>, user:<subject>, owner, …) is one of these. */
  actors?: string[];
}

export interface SubscribeOptions {
  filter?: SubscriptionFilter;
  signal?: AbortSignal;
  onPosition?: (position: number) => void;
}

/** One stream's part of a multi-stream append. */
export interface StreamAppend {
  stream: string;
  events: NewEvent[];
  expected: ExpectedRevision;
  /**
   * The id of the event at the expected revision, when the caller decided on a state it knows the last
   * event of: a store that `verifiesLastEventId` refuses the append (WrongExpectedVersionError) unless the
   * stream's event at that revision is this one. A revision alone cannot tell a state that includes a
   * not-yet-committed append (which may still fail) from the stream another writer moved to the same revision.
   */
  expectedLastEventId?: string;
  /**
   * The append may repeat one made before by a request the client can send again (its Idempotency-Key gives its events
   * the first request's ids), wherever the stream has moved since. A store without an index of event ids (EventStoreDB
   * recognises a repeated append only at the revision it was first written at) looks for them among the stream's last
   * events first (REPEAT_LOOKBACK) and, where it holds them, writes nothing and answers as a replay (`written: false`).
   * The embedded log finds any id it holds, and ignores this.
   */
  repeat?: boolean;
}

/**
 * How many of a stream's last events a store without an index of event ids (EventStoreDB) looks through for a repeated
 * append's: a request repeated after more later events on its stream than this is written again (as a new change).
 * Bounded, because the look is one read per command sent with an Idempotency-Key, first requests included.
 */
export const REPEAT_LOOKBACK = 256;

export interface EventStore {
  readonly kind: 'embedded' | 'esdb';
  append(stream: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult>;
  /**
   * Appends to several streams, in order, each with its expected revision; one result per append.
   * `atomic` says whether the store writes all of them or none (embedded: one transaction). EventStoreDB
   * has no multi-stream transactions: there the appends run one after another and stop at the first
   * failure, so callers must tolerate a written prefix (see the agent name reservation).
   */
  appendAll(appends: StreamAppend[]): Promise<AppendResult[]>;
  readonly atomicAppendAll: boolean;
  /** Whether appendAll checks `expectedLastEventId` in the append's own transaction (embedded: yes; EventStoreDB: no). */
  readonly verifiesLastEventId: boolean;
  /** Events of one stream from `fromRevision` (inclusive), in revision order; at most `limit` (see readLimit), all by default. */
  readStream(stream: string, options?: { fromRevision?: number; limit?: number }): Promise<RecordedEvent[]>;
  /** Events of every stream after `fromPosition` (exclusive; 0 = from the beginning), in global order; at most `limit` (see readLimit), 1000 by default. */
  readAll(fromPosition: number, options?: { limit?: number; filter?: SubscriptionFilter }): Promise<RecordedEvent[]>;
  /**
   * Catch-up then live subscription after `fromPosition` (exclusive). Pull-based: the consumer
   * takes the next event when it is ready for it, so nothing is checkpointed ahead of work.
   * `onPosition`, with a filter: called with a position the subscription has read up to, once every
   * matching event up to it has been yielded, so a consumer can count events it never sees as passed.
   */
  subscribeToAll(fromPosition: number, options?: SubscribeOptions): AsyncIterable<RecordedEvent>;
  /**
   * The position of the last event in the log (0 when empty). `bound.timeoutMs` (the readiness probe; also on
   * countAfter) makes a store that waits on the network (EventStoreDB) give up after that long, rejecting, with
   * its reads cancelled; the embedded log answers from its file at once and ignores it.
   */
  headPosition(bound?: { timeoutMs?: number }): Promise<number>;
  /**
   * The position of the last record the log holds, the store's own included (EventStoreDB's system events, which
   * headPosition skips and a subscription's checkpoints may pass): no checkpoint taken from this log lies past it.
   * What tells a read model built from another or a longer log (an older copy of the log restored) from one that
   * is merely behind. `bound`: as on headPosition.
   */
  endPosition(bound?: { timeoutMs?: number }): Promise<number>;
  /**
   * How many events follow `position` in the global log, counting at most `max` (a projection's lag in
   * events: positions are dense on the embedded log, but byte offsets on EventStoreDB).
   */
  countAfter(position: number, max: number, bound?: { timeoutMs?: number }): Promise<number>;
  /**
   * Streams in name order (compareStreamNames) after `after`, whose names start with `prefix`; at most `limit` (see
   * readLimit), 100 by default.
   */
  listStreams(options?: { prefix?: string; limit?: number; after?: string }): Promise<StreamInfo[]>;
  streamInfo(stream: string): Promise<StreamInfo | undefined>;
  close(): Promise<void>;
}

/** The order streams are listed in: their names' UTF-8 bytes (code point order, as SQLite compares text), not UTF-16 units. */
export function compareStreamNames(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/**
 * A read's `limit`: a non-negative integer, or Infinity; one past the end of the log reads to its end. A negative or
 * fractional limit is a caller's mistake, refused (RangeError) rather than read as everything on one path, nothing or a
 * page cut short on another.
 */
export function readLimit(limit: number): number {
  if (!(limit >= 0) || (limit !== Infinity && !Number.isInteger(limit))) throw new RangeError(`a read limit must be a non-negative integer, not ${limit}`);
  return Math.min(limit, Number.MAX_SAFE_INTEGER);
}

export function matchesFilter(event: { type: string; stream: string; metadata?: Record<string, unknown> }, filter?: SubscriptionFilter): boolean {
  if (!filter) return true;
  if (filter.types && !filter.types.includes(event.type)) return false;
  if (filter.streamPrefixes && !filter.streamPrefixes.some((p) => event.stream.startsWith(p))) return false;
  // Only a string matches (as in the embedded log's SQL filter, which compares text with text): an event written by
  // another tool with a number or no metadata at all is no request's and no actor's.
  if (filter.correlationIds && !includesText(filter.correlationIds, event.metadata?.correlation_id)) return false;
  if (filter.actors && !includesText(filter.actors, event.metadata?.actor)) return false;
  return true;
}

const includesText = (values: string[], value: unknown) => typeof value === 'string' && values.includes(value);

/**
 * An event's data or metadata as the port hands it out: always a JSON object, whoever wrote the event. Cairn writes
 * objects; other tools writing to the same EventStoreDB (its web UI, scripts, other services), or a row put into the
 * embedded log by hand, may write anything. What is not an object is kept, under one key, rather than handed on as
 * it is (`null`, 42, an array, a string: a reader of a known type's `data.…` throws on `null`, and the embedded log's
 * JSON.parse failed every read holding a row that is not JSON, for good):
 * none (absent, empty bytes or text, JSON `null`) is `{}`; other JSON (a number, a string, an array, a boolean) is `{ value }`;
 * bytes that are not JSON (binary data, text that is not JSON) are `{ raw: <base64> }`.
 */
export function eventObject(value: unknown): Record<string, unknown> {
  if (value === null || value === undefined || value === '') return {};
  if (value instanceof Uint8Array) return value.length === 0 ? {} : { raw: Buffer.from(value).toString('base64') };
  if (typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
  return { value };
}

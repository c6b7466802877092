import {
  ANY, BACKWARDS, END, ErrorType, EventStoreDBClient, FORWARDS, NO_STREAM, START, STREAM_EXISTS,
  convertToCommandError, eventTypeFilter, excludeSystemEvents, isCommandError, jsonEvent, streamNameFilter,
} from '@eventstore/db-client';
import type {
  AllStreamRecordedEvent, AllStreamResolvedEvent, AllStreamSubscription, AppendExpectedRevision, Filter, JSONType, Position,
  RecordedEvent as EsdbRecordedEvent, ReadPosition, StreamingRead,
} from '@eventstore/db-client';
import { AppendTooLargeError, DuplicateEventIdError, EventStoreTimeoutError, StreamDeletedError, WrongExpectedVersionError } from './errors.js';
import { redactSecrets } from '../redact.js';
import { compareStreamNames, eventObject, matchesFilter, readLimit, REPEAT_LOOKBACK } from './port.js';
import type {
  AppendResult, EventMetadata, EventStore, ExpectedRevision, NewEvent, RecordedEvent, StreamAppend, StreamInfo, SubscribeOptions, SubscriptionFilter,
} from './port.js';

/*
 * Positions.
 *
 * ESDB addresses an event in $all by {commit, prepare}: byte offsets in its transaction log. Every
 * append made through gRPC is an "implicit transaction": one prepare record per event, flagged
 * IsCommitted, with no separate commit record. For those the server reports commit === prepare ===
 * the event's own log offset, for each event of a multi-event append too (AllReader builds
 * `CommitEventRecord(event, prepare.LogPosition)`, and live subscriptions get
 * `EventCommitted(prepare.LogPosition)`), so the commit position alone is unique and strictly
 * increasing in $all order. That is the number the port sees.
 *
 * Resuming from a number P uses {commit: P, prepare: P}, which is exactly the position the server
 * gave that event. Subscriptions treat it as exclusive; forward reads of $all include the event at
 * P, so readAll skips it itself.
 *
 * Caveat: events written by legacy TCP clients in explicit transactions share one commit position
 * (the commit record's) and differ only in prepare position; one number cannot address them, and
 * resuming from (C, C) would skip part of such a transaction. Rather than lose or repeat events
 * silently, `toPosition` refuses them. Offsets above 2^53 (9 PB of log) are refused for the same reason.
 */
function toPosition(position: Position): number {
  if (position.commit !== position.prepare) {
    throw new Error(`ESDB position ${position.commit}/${position.prepare} belongs to an explicit transaction: `
      + 'commit and prepare positions differ, which a single numeric position cannot represent');
  }
  if (position.commit > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`ESDB position ${position.commit} exceeds 2^53`);
  return Number(position.commit);
}

/**
 * A position the server may not know, as a number, or 0 where it does not: stream reads on servers before 22.6
 * and events of explicit transactions carry {2^64-1, 2^64-1} (the server's Position.End for "none"), which the
 * client passes on as it is (it never leaves `position` out); an append's answer may have none, or -1.
 */
function knownPosition(position: Position | undefined): number {
  return position && position.commit > 0n && position.commit === position.prepare && position.commit <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(position.commit)
    : 0;
}

function esdbPosition(position: number): ReadPosition {
  // No user event sits at 0: the log starts with the epoch record.
  if (position <= 0) return START;
  const p = BigInt(position);
  return { commit: p, prepare: p };
}

function toExpectedRevision(expected: ExpectedRevision): AppendExpectedRevision {
  switch (expected) {
    case 'no_stream': return NO_STREAM;
    case 'stream_exists': return STREAM_EXISTS;
    case 'any': return ANY;
    default: return BigInt(expected);
  }
}

/** `$`-prefixed types and streams are ESDB's own: metadata, links of system projections, statistics. */
function isSystem(event: { type: string; streamId: string }): boolean {
  return event.type.startsWith('$') || event.streamId.startsWith('$');
}

function isErrorOfType(error: unknown, type: ErrorType): boolean {
  return error instanceof Error && isCommandError(error) && error.type === type;
}

/**
 * The server could not be reached, or is no longer the leader (a restart, a partition, an election): like a silence, a
 * 503 to retry, not an internal error. (The client leaves gRPC's UNAVAILABLE of its server-features call unconverted.)
 */
function isUnreachable(error: unknown): boolean {
  const converted = error instanceof Error ? convertToCommandError(error) : error;
  return isErrorOfType(converted, ErrorType.UNAVAILABLE) || isErrorOfType(converted, ErrorType.NOT_LEADER);
}

/**
 * The event store on EventStoreDB / KurrentDB (gRPC client). Needs a user allowed to read $all
 * (an admin by default) and server 22.6 or later, which reports positions on stream reads.
 *
 * Idempotence is ESDB's own: event ids are passed through, and a retried append of the same ids at
 * the same expected revision succeeds without writing. Unlike the embedded store, ESDB does not keep
 * event ids unique across the log: the same id appended to another stream (or at the current end of
 * the same stream) is written again, so DuplicateEventIdError is raised here only for an append that
 * repeats an id within itself (checked before sending); a batch whose ids match the stream only in part
 * is reported as a WrongExpectedVersionError.
 *
 * Every call but subscribeToAll is bounded by `timeoutMs` (EVENTSTORE_TIMEOUT_MS) and then fails with an
 * EventStoreTimeoutError: a server that accepts the connection and stops answering (a partition, a half-open
 * connection, a leader election that does not end) would otherwise hold a command, and every command queued behind
 * it on its stream, for ever. The client bounds none of them itself: its reads and batch appends are gRPC streams
 * opened with `deadline: Infinity` (a batch append's `deadline` only tells the server), and before its first append
 * it asks the server's features with no deadline, caching the pending answer for every append after it.
 */
export class EsdbEventStore implements EventStore {
  readonly kind = 'esdb' as const;
  private readonly client: EventStoreDBClient;
  private readonly subscriptions = new Set<AllStreamSubscription>();
  private readonly reads = new Set<StreamingRead<unknown>>();
  private readonly timeoutMs: number;
  private closed = false;

  /** `timeoutMs`: how long an append waits for its answer, and a read for each answer of the server (10 s by default, as EVENTSTORE_TIMEOUT_MS). */
  constructor(connectionString: string, options: { timeoutMs?: number } = {}) {
    this.client = withRedactedWarnings(() => EventStoreDBClient.connectionString(connectionString));
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** EventStoreDB has no multi-stream transactions: in order, stopping at the first failure (a written prefix stays). */
  readonly atomicAppendAll = false;
  /** Not checkable in an ESDB append: the command bus sends an append decided on a pending one only after that one succeeded. */
  readonly verifiesLastEventId = false;

  async appendAll(appends: StreamAppend[]): Promise<AppendResult[]> {
    const results: AppendResult[] = [];
    for (const { stream, events, expected, repeat } of appends) results.push(await this.append(stream, events, expected, { repeat }));
    return results;
  }

  async append(stream: string, events: NewEvent[], expected: ExpectedRevision, options: Pick<StreamAppend, 'repeat'> = {}): Promise<AppendResult> {
    if (this.closed) throw new Error('event store is closed');
    // An empty append would still write a record in ESDB; check the expectation without writing.
    if (events.length === 0) return this.checkOnly(stream, expected);
    // One append that repeats an id is refused whole, as by the embedded store (ESDB would write both).
    const ids = new Set<string>();
    for (const e of events) {
      if (ids.has(e.id)) throw new DuplicateEventIdError(e.id, stream);
      ids.add(e.id);
    }
    // The client serialises inside an async Promise executor, after awaiting the server's features: a JSON.stringify
    // that throws there (a bigint, a cycle) is an unhandled rejection and the append never settles, and data the caller
    // changes after the call would be written as changed. Take the events' JSON now (refusing what is not JSON), as the
    // embedded store does.
    const recorded = events.map((e): NewEvent => ({ ...e, data: JSON.parse(JSON.stringify(e.data)), metadata: JSON.parse(JSON.stringify(e.metadata)) }));
    if (options.repeat) {
      const found = await this.foundInStream(stream, recorded);
      if (found) return found;
      const result = await this.answerInTime(stream, this.write(stream, recorded, expected));
      return (await this.holdsAsSent(stream, recorded, result.revision)) ? result : { ...result, written: false };
    }
    return this.answerInTime(stream, this.write(stream, recorded, expected));
  }

  /**
   * Whether the stream holds the events as this append sent them, up to `revision`. Two nodes taking one request (the
   * same Idempotency-Key, so the same event ids) at the same revision both get the server's success: the slower append
   * is answered as a retry of the faster, and only what it holds (another node's times and request id) tells them
   * apart. Where the read back fails, the append counts as written (as it would without this look).
   */
  private async holdsAsSent(stream: string, events: NewEvent[], revision: number): Promise<boolean> {
    const stored = await this.readStream(stream, { fromRevision: revision - events.length + 1, limit: events.length }).catch(() => undefined);
    if (stored === undefined) return true;
    const sent = (e: { id: string; type: string; data: unknown; metadata: unknown }) => JSON.stringify([e.id, e.type, e.data, e.metadata]);
    return stored.length === events.length && stored.every((e, i) => sent(e) === sent(events[i]!));
  }

  /**
   * The events of a possible repeat where the stream's last REPEAT_LOOKBACK events hold them, answered as the embedded
   * log answers a replay (their last one's revision and position, `written: false`; DuplicateEventIdError when it holds
   * only some of them, or not in a row), or undefined when it holds none of them. The server recognises an append of ids it holds
   * only at the revision they were first written at: appended at the stream's current revision, after later events,
   * they would be written again.
   */
  private async foundInStream(stream: string, events: NewEvent[]): Promise<AppendResult | undefined> {
    // The stream's last REPEAT_LOOKBACK events, read backwards from its end: a retry comes soon after its request.
    const held = (await this.readStreamEvents(stream, { fromRevision: END, direction: BACKWARDS, maxCount: REPEAT_LOOKBACK })).reverse();
    const at = held.findIndex((e) => e.id === events[0]!.id);
    if (at < 0) {
      const taken = events.find((e) => held.some((h) => h.id === e.id));
      if (taken) throw new DuplicateEventIdError(taken.id, stream);
      return undefined;
    }
    const misplaced = events.find((e, i) => held[at + i]?.id !== e.id);
    if (misplaced) throw new DuplicateEventIdError(events[0]!.id, stream);
    const last = held[at + events.length - 1]!;
    return { revision: last.revision, position: last.position || await this.headPosition(), written: false };
  }

  private async write(stream: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    try {
      const result = await this.client.appendToStream(stream, events.map((e) => jsonEvent({
        id: e.id,
        type: e.type,
        data: e.data as JSONType,
        metadata: e.metadata as unknown as JSONType,
      })), {
        expectedRevision: toExpectedRevision(expected),
        // The server gives up on the write after this long (a batch append's deadline, a unary append's gRPC deadline).
        deadline: this.timeoutMs,
      });
      // With `throwOnAppendFailure=false` in the connection string the client answers a refused expectation with
      // `success: false` instead of throwing (on its batch path with a current revision made of a boolean): ask the stream.
      if (!result.success) throw new WrongExpectedVersionError(stream, expected, (await this.streamInfo(stream))?.revision ?? 'no_stream');
      const revision = Number(result.nextExpectedRevision);
      // The server answers with the last event's position, also for an idempotent retry (it looks the
      // event up); older servers may leave it out of a retry's answer (or send -1), so read it back then.
      const position = knownPosition(result.position) || await this.positionOf(stream, revision);
      return { revision, position };
    } catch (error) {
      if (isErrorOfType(error, ErrorType.WRONG_EXPECTED_VERSION)) {
        const actual = (error as { actualVersion?: bigint | string }).actualVersion;
        throw new WrongExpectedVersionError(stream, expected, typeof actual === 'bigint' ? Number(actual) : 'no_stream');
      }
      // The server's own timeout (a commit, prepare or forward timeout, as in a leader election): the write's outcome is
      // unknown. A batch append answers it with a Timeout status (the client's DeadlineExceededError, as a gRPC deadline),
      // a unary append with ABORTED "Operation timed out" (the client's TimeoutError).
      if (isErrorOfType(error, ErrorType.DEADLINE_EXCEEDED) || isErrorOfType(error, ErrorType.TIMEOUT)) {
        throw new EventStoreTimeoutError('append', stream, this.timeoutMs, { cause: error });
      }
      if (isUnreachable(error)) throw new EventStoreTimeoutError('append', stream, this.timeoutMs, { cause: error, unreachable: true });
      // Tombstoned by an operator (a hard delete): refused, now and for good.
      if (isErrorOfType(error, ErrorType.STREAM_DELETED)) throw new StreamDeletedError(stream, { cause: error });
      // Over the server's MaxAppendSize (a configuration value may be up to 1 MiB, and its event is larger): refused whole.
      if (isErrorOfType(error, ErrorType.MAXIMUM_APPEND_SIZE_EXCEEDED)) {
        const max = (error as { maxAppendSize?: number }).maxAppendSize;
        throw new AppendTooLargeError(stream, Number.isSafeInteger(max) ? max : undefined, { cause: error });
      }
      throw error;
    }
  }

  /**
   * The append's answer, or an EventStoreTimeoutError once it has not come within timeoutMs. The client cannot cancel
   * an append: it runs on, to be written or to fail unseen (its failure is handled here, never left unhandled).
   */
  private answerInTime(stream: string, append: Promise<AppendResult>): Promise<AppendResult> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new EventStoreTimeoutError('append', stream, this.timeoutMs)), this.timeoutMs);
    });
    append.catch(() => undefined);
    return Promise.race([append, late]).finally(() => clearTimeout(timer));
  }

  /**
   * How a read made for `operation` gives up: after `timeoutMs` in all, when a caller bounds it (the readiness probe),
   * else when the server has sent nothing for the store's timeoutMs.
   */
  private bound(operation: EventStoreTimeoutError['operation'], stream?: string, timeoutMs?: number): ReadBound {
    if (timeoutMs !== undefined) return { signal: AbortSignal.timeout(timeoutMs) };
    return {
      silenceMs: this.timeoutMs,
      error: (unreachable) => new EventStoreTimeoutError(operation, stream, this.timeoutMs, unreachable && { cause: unreachable, unreachable: true }),
    };
  }

  private async checkOnly(stream: string, expected: ExpectedRevision): Promise<AppendResult> {
    const info = await this.streamInfo(stream);
    const current = info ? info.revision : -1;
    const ok = expected === 'any'
      || (expected === 'no_stream' && current === -1)
      || (expected === 'stream_exists' && current >= 0)
      || expected === current;
    if (!ok) throw new WrongExpectedVersionError(stream, expected, current === -1 ? 'no_stream' : current);
    return { revision: current, position: info?.last_position ?? 0 };
  }

  /** The position of one event of a stream; falls back to the head, a safe upper bound as a consistency token. */
  private async positionOf(stream: string, revision: number): Promise<number> {
    const [event] = await this.readStream(stream, { fromRevision: revision, limit: 1 });
    return event && event.position > 0 ? event.position : this.headPosition();
  }

  async readStream(stream: string, options: { fromRevision?: number; limit?: number } = {}): Promise<RecordedEvent[]> {
    const from = options.fromRevision ?? 0;
    const limit = options.limit === undefined ? undefined : readLimit(options.limit);
    if (limit === 0) return [];
    return this.readStreamEvents(stream, {
      fromRevision: from > 0 ? BigInt(from) : START,
      direction: FORWARDS,
      ...(limit !== undefined ? { maxCount: limit } : {}),
    });
  }

  /** A stream's events as the client's read gives them (in its direction). */
  private async readStreamEvents(stream: string, options: Parameters<EventStoreDBClient['readStream']>[1]): Promise<RecordedEvent[]> {
    const read = await drainStream(this.track(this.client.readStream(stream, options)), this.bound('readStream', stream)).catch((error: unknown) => {
      // A tombstoned stream: a command loading it to decide on is refused as its append would be, not a 500.
      throw isErrorOfType(error, ErrorType.STREAM_DELETED) ? new StreamDeletedError(stream, { cause: error }) : error;
    });
    return read.flatMap((resolved) => (resolved.event ? [toRecorded(resolved.event, false)] : []));
  }

  /**
   * Pages through $all forwards from `fromPosition`. This client has no server-side filter for reads,
   * so system events and the caller's filter are applied here, page after page, until `limit` events
   * are found or the end of the log is reached.
   */
  async readAll(fromPosition: number, options: { limit?: number; filter?: SubscriptionFilter } = {}): Promise<RecordedEvent[]> {
    return this.readAllUntil(fromPosition, options, this.bound('readAll'));
  }

  /** readAll, its reads bounded by `bound`. */
  private async readAllUntil(fromPosition: number, options: { limit?: number; filter?: SubscriptionFilter }, bound: ReadBound): Promise<RecordedEvent[]> {
    const limit = readLimit(options.limit ?? 1000);
    const found: RecordedEvent[] = [];
    let after = fromPosition;
    while (found.length < limit) {
      const pageSize = Math.min(Math.max(limit - found.length + 1, 64), 4096);
      const page = await drain(this.track(this.client.readAll({ fromPosition: esdbPosition(after), maxCount: pageSize, direction: FORWARDS })), bound);
      for (const { event } of page) {
        if (!event) continue;
        const position = toPosition(event.position);
        if (position <= after) continue; // the read starts at `after` inclusive
        after = position;
        if (isSystem(event)) continue;
        const recorded = toRecorded(event, true);
        if (matchesFilter(recorded, options.filter)) found.push(recorded);
      }
      if (page.length < pageSize) break;
    }
    return found.slice(0, limit);
  }

  /**
   * A catch-up subscription pulled with `for await`: the client's subscription is a Node stream
   * piped from the gRPC call, so while the consumer is busy the stream's buffer fills, gRPC flow
   * control stops the server, and nothing runs ahead of the consumer.
   */
  async *subscribeToAll(from: number, options: SubscribeOptions = {}): AsyncIterable<RecordedEvent> {
    const { filter, signal, onPosition } = options;
    if (signal?.aborted || this.closed) return;
    // With onPosition the filter is applied here, so the positions of skipped events are seen and reported.
    const subscription = this.client.subscribeToAll({ fromPosition: esdbPosition(from), filter: onPosition ? undefined : serverFilter(filter) });
    this.subscriptions.add(subscription);
    // Destroying the stream settles a pending read at once; unsubscribe (finally) cancels the gRPC call.
    const stop = () => { subscription.destroy(); };
    signal?.addEventListener('abort', stop, { once: true });
    const iterator = subscription[Symbol.asyncIterator]();
    try {
      for (;;) {
        let next: IteratorResult<{ event?: AllStreamRecordedEvent }>;
        try {
          next = await iterator.next();
        } catch (error) {
          if (signal?.aborted || this.closed) return; // our own destroy(): premature close
          throw error;
        }
        if (next.done) return;
        const event = next.value.event;
        if (!event || isSystem(event)) continue;
        const recorded = toRecorded(event, true);
        // The server filter is a pre-selection (one criterion only); the port's filter is exact.
        if (recorded.position <= from) continue;
        if (!matchesFilter(recorded, filter)) {
          onPosition?.(recorded.position);
          continue;
        }
        yield recorded;
        if (signal?.aborted) return;
      }
    } finally {
      signal?.removeEventListener('abort', stop);
      this.subscriptions.delete(subscription);
      subscription.destroy();
      await subscription.unsubscribe().catch(() => undefined);
    }
  }

  /**
   * The last non-system event of $all, read backwards page by page (system events may follow ours).
   *
   * `bound.timeoutMs` (the readiness probe; also countAfter's) cancels the reads after that long and rejects with
   * a TimeoutError; without it the store's own timeout applies (see bound()). The client's per-call `deadline` option
   * cannot: it opens every read as a gRPC stream with no deadline (its readAll passes `deadline: Infinity` over the
   * option), so a read waits as long as the server hangs, or as a connection that was accepted but never completes
   * its HTTP/2 handshake stays open.
   */
  async headPosition(bound: { timeoutMs?: number } = {}): Promise<number> {
    const reads = this.bound('headPosition', undefined, bound.timeoutMs);
    let from: ReadPosition = END;
    for (;;) {
      const page: AllStreamResolvedEvent[] = await drain(this.track(this.client.readAll({ fromPosition: from, maxCount: 64, direction: BACKWARDS })), reads);
      const events = page.flatMap((resolved) => (resolved.event ? [resolved.event] : []));
      const found = events.find((event) => !isSystem(event));
      if (found) return toPosition(found.position);
      const last = events.at(-1);
      if (page.length < 64 || !last) return 0;
      from = last.position; // backwards reads exclude the event at `from`
    }
  }

  /** The last record of $all, whatever it is (a system event after ours, a scavenge's): one backwards read. `bound`: see headPosition. */
  async endPosition(bound: { timeoutMs?: number } = {}): Promise<number> {
    const [last] = await drain(this.track(this.client.readAll({ fromPosition: END, maxCount: 1, direction: BACKWARDS })), this.bound('endPosition', undefined, bound.timeoutMs));
    return last?.event ? toPosition(last.event.position) : 0;
  }

  /** Counts by reading: positions here are byte offsets of the transaction file, not event numbers. `bound`: see headPosition. */
  async countAfter(position: number, max: number, bound: { timeoutMs?: number } = {}): Promise<number> {
    const reads = this.bound('countAfter', undefined, bound.timeoutMs);
    let count = 0;
    for (let after = position; count < max;) {
      const page = await this.readAllUntil(after, { limit: Math.min(4096, max - count) }, reads);
      count += page.length;
      if (page.length === 0) break;
      after = page[page.length - 1]!.position;
    }
    return count;
  }

  /**
   * ESDB has no index of stream names. The `$streams` system projection (enabled with
   * `--run-projections=System` or `All`) keeps a link to the first event of every stream; it is read
   * in full on every call, sorted and filtered here: O(streams). Without it the whole of $all is
   * scanned: O(events), acceptable for an operator command on a small store only. Each returned
   * stream then costs two reads (its first and last events).
   */
  async listStreams(options: { prefix?: string; limit?: number; after?: string } = {}): Promise<StreamInfo[]> {
    const prefix = options.prefix ?? '';
    const after = options.after ?? '';
    const limit = readLimit(options.limit ?? 100);
    const reads = this.bound('listStreams');
    const names = (await this.streamNames(reads)).filter((n) => n.startsWith(prefix) && compareStreamNames(n, after) > 0).sort(compareStreamNames);
    const infos: StreamInfo[] = [];
    for (const name of names) {
      if (infos.length >= limit) break;
      const info = await this.info(name, reads); // undefined for a deleted stream still linked from $streams
      if (info) infos.push(info);
    }
    return infos;
  }

  private async streamNames(bound: ReadBound): Promise<string[]> {
    const names = new Set<string>();
    try {
      await pull(this.track(this.client.readStream('$streams', { resolveLinkTos: false })), bound, ({ event }) => {
        const name = event ? linkTarget(event.data) : undefined;
        if (name && !name.startsWith('$')) names.add(name);
      });
      return [...names];
    } catch (error) {
      if (!isErrorOfType(error, ErrorType.STREAM_NOT_FOUND)) throw error;
    }
    await pull(this.track(this.client.readAll({ direction: FORWARDS })), bound, ({ event }) => {
      if (event && !isSystem(event)) names.add(event.streamId);
    });
    return [...names];
  }

  /**
   * First and last events of the stream. `event_count` assumes no gaps, true for ESDB revisions; a
   * stream truncated by $maxAge/$maxCount/$tb counts only the events it still holds. A deleted stream has no
   * info, also one still linked from $streams: the server answers a read of a soft-deleted stream with not
   * found, of a tombstoned (hard-deleted) one with StreamDeletedError.
   */
  async streamInfo(stream: string): Promise<StreamInfo | undefined> {
    return this.info(stream, this.bound('streamInfo', stream));
  }

  private async info(stream: string, bound: ReadBound): Promise<StreamInfo | undefined> {
    const last = await this.readOne(stream, BACKWARDS, bound);
    if (!last) return undefined;
    const first = await this.readOne(stream, FORWARDS, bound);
    if (!first) return undefined;
    return {
      stream,
      revision: Number(last.revision),
      event_count: Number(last.revision - first.revision) + 1,
      first_position: knownPosition(first.position),
      last_position: knownPosition(last.position),
      created_at: first.created.toISOString(),
      updated_at: last.created.toISOString(),
    };
  }

  private async readOne(stream: string, direction: typeof FORWARDS | typeof BACKWARDS, bound: ReadBound): Promise<EsdbRecordedEvent | undefined> {
    try {
      const read = await drainStream(this.track(this.client.readStream(stream, {
        direction, fromRevision: direction === FORWARDS ? START : END, maxCount: 1,
      })), bound);
      return read.find((resolved) => resolved.event)?.event;
    } catch (error) {
      if (isErrorOfType(error, ErrorType.STREAM_DELETED)) return undefined;
      throw error;
    }
  }

  /**
   * A read that close() ends with an error. The client's dispose() cancels the gRPC call under a read, and its
   * read stream takes the cancellation for an end: the read would answer with what it had so far (nothing, or
   * part of a stream) as if that were all.
   */
  private track<T extends StreamingRead<unknown>>(reading: T): T {
    this.reads.add(reading);
    reading.once('close', () => this.reads.delete(reading));
    return reading;
  }

  /**
   * Ends reads and subscriptions, and the client's gRPC streams (batch appends). Not its unary calls: a server-features
   * call the server never answers (see the class) stays open, holding the process, until it is answered or the
   * connection fails; the server and the ops CLI exit on their own after closing.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const reading of this.reads) reading.destroy(new Error('event store is closed'));
    for (const subscription of this.subscriptions) subscription.destroy();
    await this.client.dispose();
  }
}

/**
 * ESDB filters on one thing only, so the server gets the narrower criterion (exact types as an
 * anchored regex, else stream prefixes, else "no system events") and matchesFilter does the rest.
 */
function serverFilter(filter?: SubscriptionFilter): Filter {
  if (filter?.types) {
    const alternatives = filter.types.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    // An empty list matches nothing; a regex that cannot match keeps the server doing the skipping.
    return eventTypeFilter({ regex: alternatives.length > 0 ? `^(?:${alternatives.join('|')})$` : '(?!)' });
  }
  if (filter?.streamPrefixes && filter.streamPrefixes.length > 0) return streamNameFilter({ prefixes: filter.streamPrefixes });
  return excludeSystemEvents();
}

/**
 * When a read gives up: when `signal` aborts (a caller's bound on its whole call), or when the server has sent nothing
 * for `silenceMs`, failing with `error()`. Silence rather than a bound on the whole read: a long read (a projection's
 * filtered catch-up through a large log, listStreams without $streams) may take longer while the server answers all along.
 */
type ReadBound = { signal: AbortSignal } | { silenceMs: number; error: (unreachable?: Error) => Error };

/**
 * Reads a client read stream to its end, handing each item to `each`, or until `bound` gives up. Loops over reads
 * never stop early: leaving a `for await` destroys the client's stream but not the gRPC call piped into it, which
 * would stay open; so giving up cancels the call, and destroys the stream with the reason to end the loop.
 */
async function pull<T>(reading: StreamingRead<T>, bound: ReadBound, each: (item: T) => void): Promise<void> {
  const stop = (reason: Error) => {
    reading.cancel().catch(() => undefined);
    reading.destroy(reason);
  };
  const signal = 'signal' in bound ? bound.signal : undefined;
  const abort = () => stop(signal?.reason instanceof Error ? signal.reason : new Error('read aborted'));
  if (signal?.aborted) abort();
  else signal?.addEventListener('abort', abort, { once: true });
  const silence = 'silenceMs' in bound ? setTimeout(() => stop(bound.error()), bound.silenceMs) : undefined;
  try {
    for await (const item of reading) {
      silence?.refresh();
      each(item);
    }
  } catch (error) {
    if ('silenceMs' in bound && error instanceof Error && isUnreachable(error)) throw bound.error(error);
    throw error;
  } finally {
    signal?.removeEventListener('abort', abort);
    clearTimeout(silence);
  }
}

/** Reads a client read stream to its end (see pull). */
async function drain<T>(reading: StreamingRead<T>, bound: ReadBound): Promise<T[]> {
  const items: T[] = [];
  await pull(reading, bound, (item) => items.push(item));
  return items;
}

/** drain() for a stream read: a stream that does not exist reads as empty. */
async function drainStream<T>(reading: StreamingRead<T>, bound: ReadBound): Promise<T[]> {
  try {
    return await drain(reading, bound);
  } catch (error) {
    if (isErrorOfType(error, ErrorType.STREAM_NOT_FOUND)) return [];
    throw error;
  }
}

/**
 * Runs `fn` with console.warn's text redacted: the client's connection-string parser warns about an option it ignores
 * (`tlsVerifyCert=false`, an unknown key) by printing the whole string under the warning, password included. The
 * parse is synchronous, so nothing else warns meanwhile.
 */
function withRedactedWarnings<T>(fn: () => T): T {
  const warn = console.warn;
  console.warn = (...args: unknown[]) => warn(...args.map((a) => (typeof a === 'string' ? redactSecrets(a) : a)));
  try {
    return fn();
  } finally {
    console.warn = warn;
  }
}

/** A link event's data is `<revision>@<stream>`. */
function linkTarget(data: unknown): string | undefined {
  const text = typeof data === 'string' ? data : data instanceof Uint8Array ? Buffer.from(data).toString('utf8') : undefined;
  const at = text?.indexOf('@') ?? -1;
  return text !== undefined && at >= 0 ? text.slice(at + 1) : undefined;
}

/**
 * `strict` for $all reads, where the position is the checkpoint: it must be exact. Stream reads only
 * inform (commands use revisions), and may not know it (0, see knownPosition).
 */
function toRecorded(event: EsdbRecordedEvent, strict: boolean): RecordedEvent {
  const position = strict ? toPosition(event.position!) : knownPosition(event.position);
  return {
    id: event.id,
    stream: event.streamId,
    revision: Number(event.revision),
    position,
    type: event.type,
    data: decodeData(event.data),
    metadata: decodeData(event.metadata) as EventMetadata,
    recorded_at: event.created.toISOString(),
  };
}

/**
 * Events written by this adapter are JSON objects; what other tools write is handed on as an object too (see eventObject).
 * The client has parsed what it could: JSON data (JSON content type) and metadata that parses, into any JSON value; data
 * of JSON content type that is not JSON comes as its text, which cannot be told from a JSON string (`{ value: text }`);
 * the rest comes as bytes, parsed here if they are JSON text.
 */
function decodeData(data: unknown): Record<string, unknown> {
  if (data instanceof Uint8Array && data.length > 0) {
    try {
      return eventObject(JSON.parse(Buffer.from(data).toString('utf8')));
    } catch {
      // not JSON: kept as bytes
    }
  }
  return eventObject(data);
}

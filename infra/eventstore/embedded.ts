import Database from 'better-sqlite3';
import { EventEmitter } from 'node:events';
import { BroadcastChannel, type Worker } from 'node:worker_threads';
import { preparePrivateFile } from '../private-files.js';
import { startWorker } from '../threads.js';
import { openWritable, reviveError, type AppendOutcome, type AppendRequest, type SerialisedEvent } from './embedded-appender.js';
import { appendChannelName } from './embedded-channel.js';
import { compareStreamNames, eventObject, matchesFilter, readLimit } from './port.js';
import type {
  AppendResult, EventMetadata, EventStore, ExpectedRevision, NewEvent, RecordedEvent, StreamAppend, StreamInfo, SubscribeOptions, SubscriptionFilter,
} from './port.js';

interface PendingAppend extends AppendRequest {
  /** One result per stream: the append's, then those of `with`. */
  resolve: (results: AppendResult[]) => void;
  reject: (error: unknown) => void;
}

/** Rows are read as arrays (`raw()`), which is markedly faster on replays than one object per row. */
type EventRow = [position: number, id: string, stream: string, revision: number, type: string, data: string, metadata: string, recorded_at: string];
const COLUMNS = 'position, id, stream, revision, type, data, metadata, recorded_at';
interface StreamRow {
  name: string; revision: number; event_count: number; first_position: number; last_position: number;
  created_at: string; updated_at: string;
}

/**
 * Batches handed to the writer before the first is acknowledged: with two, the writer starts the next
 * commit as soon as one is durable instead of idling for a round trip through this thread.
 */
const MAX_IN_FLIGHT = 2;

/** How many recently appended events are kept in memory for subscribers tailing the log. */
const TAIL_SIZE = 8192;

/** How long a read-only store gathers commit announcements before reading the new rows once. */
const INGEST_WINDOW_MS = 2;

/** Positions a filtered read of a subscription tests at most (about 20 ms of SQLite's time for a metadata filter). */
const FILTER_WINDOW = 65_536;

/** How often a live subscription looks for events written by another process (ops CLI, a second node). */
const CROSS_PROCESS_POLL_MS = 200;

/**
 * Durable single-file event store on SQLite (WAL, synchronous=FULL: a commit is on disk before
 * append() resolves). Writes happen on a worker thread (see embedded-writer.ts); appends that arrive
 * while a commit is in flight are committed together in the next transaction (group commit), so one
 * fsync acknowledges many commands. Each append is still checked and applied on its own, and a failed
 * check rejects only that append. Reads use this thread's own connection.
 */
export class EmbeddedEventStore implements EventStore {
  readonly kind = 'embedded' as const;
  private readonly db: Database.Database;
  private readonly scan: Database.Database;
  private readonly appended = new EventEmitter();
  private queue: PendingAppend[] = [];
  private inFlight: Map<number, PendingAppend[]> = new Map();
  private nextBatchId = 1;
  private flushScheduled = false;
  private closed = false;
  /** Started at once, or with the first append for a store opened with `appends: false`. */
  private writerThread: Worker | undefined;
  /**
   * The newest events this process appended, with contiguous positions. Live subscribers (every
   * projection runner) read from here instead of re-reading and re-parsing the same rows from SQLite.
   * A gap (another process appended in between) restarts it, so it never hides an event.
   */
  private tail: RecordedEvent[] = [];
  /**
   * Live subscriptions of this object. Without any (the HTTP thread's store when the projections run in
   * their own thread) no tail is kept: it would only hold every appended event long enough for the
   * garbage collector to copy it twice.
   */
  private subscribers = 0;
  private readonly stmt;
  /** Prepared filtered reads, by their SQL (a projection's filter is the same on every call). */
  private readonly filtered = new Map<string, Database.Statement>();
  /** Heads announced by this log's writer threads in this process (see listenForAnnouncements). */
  private channel: BroadcastChannel | undefined;

  /** `appends: false`: the writer thread is started only if an append comes after all (the projection thread's store). */
  constructor(readonly file: string, options: { appends?: boolean } = {}) {
    // The log is written by a thread of its own, on its own connection: SQLite's in-memory and temporary databases
    // (":memory:", "") are private to a connection, so appends would be acknowledged into a database no read sees.
    if (file === ':memory:' || file === '') throw new TypeError(`the embedded event log needs a file, not ${JSON.stringify(file)} (a temporary directory will do)`);
    preparePrivateFile(file);
    this.db = new Database(file);
    this.db.pragma('busy_timeout = 5000');
    openWritable(this.db);
    // Two read connections. Scans (replays, catch-up) read many pages: memory-mapped, they run markedly
    // faster. Point reads (a stream's events, the head) come right after the writer thread's commits, which
    // invalidate a connection's page cache; refilling it through a memory map costs more than with plain
    // reads (measured: 59 vs 22 us for a lookup after each commit), so that connection maps nothing.
    this.scan = new Database(file, { readonly: true });
    this.scan.pragma('mmap_size = 1073741824');
    // A store that will append starts its writer thread now, not in the middle of the first request.
    if (options.appends !== false) void this.writer;
    this.appended.setMaxListeners(0);
    this.stmt = {
      streamRow: this.db.prepare<[string], StreamRow>('SELECT * FROM streams WHERE name = ?'),
      head: this.db.prepare<[], { p: number | null }>('SELECT MAX(position) AS p FROM events'),
      nextPosition: this.db.prepare<[number], { p: number | null }>('SELECT MIN(position) AS p FROM events WHERE position > ?'),
      idAt: this.db.prepare<[number], { id: string }>('SELECT id FROM events WHERE position = ?'),
      readStream: this.db.prepare<[string, number, number], EventRow>(
        `SELECT ${COLUMNS} FROM events WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?`).raw(),
      readAll: this.scan.prepare<[number, number], EventRow>(`SELECT ${COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?`).raw(),
      /** The few rows of the latest commits (announcements): a point read, on the unmapped connection. */
      readNewest: this.db.prepare<[number, number], EventRow>(`SELECT ${COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?`).raw(),
    };
  }

  private get writer(): Worker {
    if (this.writerThread) return this.writerThread;
    const writer = startWorker(import.meta.url, './embedded-writer', { file: this.file });
    writer.on('message', (message: { id: number; outcomes: AppendOutcome[]; head: number; recorded_at: string }) => this.settle(message));
    // A writer that died (it could not open the file, ran out of memory) fails what it was sent; the next append
    // starts another, rather than posting to a dead thread and waiting for ever.
    const died = (error: unknown) => {
      if (this.writerThread !== writer) return;
      this.writerThread = undefined;
      this.failAll(error);
    };
    writer.on('error', died);
    writer.on('exit', (code) => died(new Error(`the event log's writer thread exited (code ${code})`)));
    writer.unref();
    this.writerThread = writer;
    // From now on this object's own appends feed its tail (see remember).
    this.channel?.close();
    this.channel = undefined;
    return writer;
  }

  readonly atomicAppendAll = true;
  readonly verifiesLastEventId = true;

  async append(stream: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    return (await this.enqueue({ stream, events: serialise(events), expected }))[0]!;
  }

  /** All the appends in one transaction: every stream's expected revision holds and all are written, or none is. */
  async appendAll(appends: StreamAppend[]): Promise<AppendResult[]> {
    if (appends.length === 0) return [];
    const [first, ...rest] = appends.map((part) => ({ ...part, events: serialise(part.events) }));
    return this.enqueue({ ...first!, with: rest.length > 0 ? rest : undefined });
  }

  private enqueue(request: AppendRequest): Promise<AppendResult[]> {
    if (this.closed) return Promise.reject(new Error('event store is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ ...request, resolve, reject });
      // An idle writer starts at once; appends arriving while it commits are gathered for the next batch.
      if (this.inFlight.size === 0) this.flush();
      else this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  /** Sends the queued appends as one batch, unless MAX_IN_FLIGHT batches are being committed (then the next settle sends them). */
  private flush(): void {
    this.flushScheduled = false;
    if (this.inFlight.size >= MAX_IN_FLIGHT || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    const id = this.nextBatchId++;
    this.inFlight.set(id, batch);
    this.writer.ref();
    this.writer.postMessage({ id, batch: batch.map(({ stream, events, expected, expectedLastEventId, with: also }) => ({ stream, events, expected, expectedLastEventId, with: also })) });
  }

  private settle({ id, outcomes, head, recorded_at }: { id: number; outcomes: AppendOutcome[]; head: number; recorded_at: string }): void {
    const batch = this.inFlight.get(id);
    if (!batch) return;
    this.inFlight.delete(id);
    // The writer keeps the process alive only while a commit is outstanding.
    if (this.inFlight.size === 0) this.writerThread?.unref();
    batch.forEach((pending, i) => {
      const outcome = outcomes[i]!;
      if (!outcome.ok) {
        pending.reject(reviveError(outcome.error));
        return;
      }
      if (outcome.written) this.remember(pending, outcome.result, recorded_at);
      outcome.also?.forEach((part, j) => { if (part.written) this.remember(pending.with![j]!, part.result, recorded_at); });
      pending.resolve([{ ...outcome.result, written: outcome.written }, ...(outcome.also ?? []).map((p) => ({ ...p.result, written: p.written }))]);
    });
    if (head > 0) this.appended.emit('appended', head);
    this.appended.emit('settled');
    // Flush on the next turn, not now: the callers just resolved often append again at once (the next
    // command of the same request), and those appends should ride in the very next commit.
    this.scheduleFlush();
  }

  private remember({ stream, events }: AppendRequest, result: AppendResult, recordedAt: string): void {
    if (this.subscribers === 0) {
      this.tail = [];
      return;
    }
    const first = result.position - events.length + 1;
    if (this.tail.length > 0 && this.tail[this.tail.length - 1]!.position !== first - 1) this.tail = [];
    events.forEach((e, i) => {
      this.tail.push({
        id: e.id, stream, revision: result.revision - events.length + 1 + i, position: first + i,
        type: e.type, data: JSON.parse(e.data), metadata: JSON.parse(e.metadata), recorded_at: recordedAt,
      });
    });
    if (this.tail.length > 2 * TAIL_SIZE) this.tail = this.tail.slice(-TAIL_SIZE);
  }

  /**
   * Drops the tail unless the log still holds its last event at its position. A log restored from an older backup
   * under this process (SQLite's backup API: `sqlite3 events.db ".restore backup.db"`) ends before it, or holds other
   * events there (appended since the restore): served from the tail, the lost events would reach the subscribers
   * (a projection resuming from a rebuilt checkpoint would apply them). The log only grows otherwise: if its last
   * event is there, so is every one before it. Looked at where the tail is read after the log may have changed
   * without this object's knowledge: at a subscription's start and after each cross-process poll, and before ingesting.
   */
  private checkTail(): void {
    const last = this.tail.at(-1);
    if (last && this.stmt.idAt.get(last.position)?.id !== last.id) this.tail = [];
  }

  /** Events after `fromPosition` from the in-memory tail, or undefined when the tail does not cover it. */
  private fromTail(fromPosition: number, limit: number): RecordedEvent[] | undefined {
    const tail = this.tail;
    if (tail.length === 0) return undefined;
    const start = fromPosition - tail[0]!.position + 1;
    if (start < 0 || start >= tail.length) return undefined;
    return tail.slice(start, start + limit);
  }

  private failAll(error: unknown): void {
    for (const batch of this.inFlight.values()) for (const pending of batch) pending.reject(error);
    this.inFlight.clear();
    for (const pending of this.queue.splice(0)) pending.reject(error);
    this.appended.emit('settled');
  }

  async readStream(stream: string, options: { fromRevision?: number; limit?: number } = {}): Promise<RecordedEvent[]> {
    return this.stmt.readStream.all(stream, options.fromRevision ?? 0, options.limit === undefined ? -1 : readLimit(options.limit)).map(toRecorded);
  }

  async readAll(fromPosition: number, options: { limit?: number; filter?: SubscriptionFilter } = {}): Promise<RecordedEvent[]> {
    const limit = readLimit(options.limit ?? 1000);
    const filter = options.filter;
    if (!hasFilter(filter)) {
      return this.fromTail(fromPosition, limit) ?? this.stmt.readAll.all(fromPosition, limit).map(toRecorded);
    }
    return this.readFiltered(fromPosition, Number.MAX_SAFE_INTEGER, limit, filter);
  }

  /** Events after `from` up to `to` (inclusive) that match the filter, selected by SQLite: the others are never parsed. */
  private readFiltered(from: number, to: number, limit: number, filter: SubscriptionFilter): RecordedEvent[] {
    const where: string[] = ['position > ?', 'position <= ?'];
    const params: unknown[] = [from, to];
    if (filter.types) {
      where.push(`type IN (${filter.types.map(() => '?').join(', ')})`);
      params.push(...filter.types);
    }
    if (filter.streamPrefixes) {
      // SQLite's substr and length count characters, not UTF-16 units as String.length does.
      // An empty list matches nothing (as matchesFilter has it).
      where.push(filter.streamPrefixes.length === 0 ? '0' : `(${filter.streamPrefixes.map(() => 'substr(stream, 1, length(?)) = ?').join(' OR ')})`);
      for (const p of filter.streamPrefixes) params.push(p, p);
    }
    // Tested by SQLite, as types and stream prefixes are: a search by request or actor reads about 0.5 s per million
    // events (0.45 on a log with 4 KiB pages), against 1.8–2.3 s when each event was parsed to be tested
    // (bench/audit-search.ts).
    for (const [list, member] of [[filter.correlationIds, 'correlation_id'], [filter.actors, 'actor']] as const) {
      if (!list) continue;
      where.push(`${metadataMember(member)} IN (${list.map(() => '?').join(', ')})`);
      params.push(...list);
    }
    params.push(limit);
    const sql = `SELECT ${COLUMNS} FROM events WHERE ${where.join(' AND ')} ORDER BY position LIMIT ?`;
    let statement = this.filtered.get(sql);
    if (!statement) {
      statement = this.scan.prepare(sql).raw();
      this.filtered.set(sql, statement);
    }
    return (statement.all(...params) as EventRow[]).map(toRecorded);
  }

  async *subscribeToAll(fromPosition: number, options: SubscribeOptions = {}): AsyncIterable<RecordedEvent> {
    let position = fromPosition;
    const { signal, filter, onPosition } = options;
    // Caught up with the tail (this object's own appends, or the announced ones), the log needs no query
    // until something arrives there or the cross-process poll fires; then it is read for real.
    let mustRead = true;
    this.subscribers += 1;
    try {
      while (!signal?.aborted && !this.closed) {
        if (mustRead) this.checkTail();
        const tailEnd = this.tail.length > 0 ? this.tail[this.tail.length - 1]!.position : -1;
        let batch = this.fromTail(position, 512);
        // Read from the log up to here (behind the tail, with a filter: SQLite selects the matching events).
        let scannedTo = batch?.at(-1)?.position;
        if (!batch) {
          if (!mustRead && position === tailEnd) batch = [];
          else if (hasFilter(filter)) {
            const head = this.stmt.head.get()?.p ?? 0;
            // One synchronous read tests every event up to `to`: a window, so that a filter matching little in a large
            // log holds this thread (a stop signal, Ctrl-C) for one window at a time, not for the whole log. It starts
            // at the next event, so a gap in the positions (rows deleted, or one put in by hand far ahead: the log
            // appends from there) is passed in one step, not in windows of nothing.
            const next = head > position ? this.stmt.nextPosition.get(position)?.p ?? head : head;
            const to = Math.min(head, next - 1 + FILTER_WINDOW);
            batch = to > position ? this.readFiltered(position, to, 512, filter) : [];
            scannedTo = batch.length === 512 ? batch[511]!.position : to;
            if (scannedTo === to && to < head) await new Promise((resolve) => setImmediate(resolve));
          } else {
            batch = await this.readAll(position, { limit: 512 });
            scannedTo = batch.at(-1)?.position;
          }
        }
        if (scannedTo === undefined || scannedTo <= position) {
          mustRead = (await this.waitForAppend(position, signal)) === 'poll';
          continue;
        }
        for (const event of batch) {
          if (!matchesFilter(event, filter)) continue;
          yield event;
          if (signal?.aborted) return;
        }
        position = scannedTo;
        onPosition?.(position);
      }
    } finally {
      this.subscribers -= 1;
    }
  }

  /** Resolves when an append past `position` is in the tail ('append'), or after a short poll for other processes ('poll'). */
  private waitForAppend(position: number, signal?: AbortSignal): Promise<'append' | 'poll'> {
    if (signal?.aborted) return Promise.resolve('append');
    this.listenForAnnouncements();
    return new Promise((resolve) => {
      const done = (reason: 'append' | 'poll') => {
        clearTimeout(timer);
        this.appended.off('appended', onAppend);
        signal?.removeEventListener('abort', onAbort);
        resolve(reason);
      };
      const onAppend = (head: number) => { if (head > position) done('append'); };
      const onAbort = () => done('append');
      const timer = setTimeout(() => done('poll'), CROSS_PROCESS_POLL_MS);
      this.appended.on('appended', onAppend);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * A store object that never appended (the projection thread's) follows the heads that writer threads
   * of this process announce: it reads the new rows once into its tail, where all its subscriptions
   * find them, instead of each subscription querying the log after every commit.
   */
  private listenForAnnouncements(): void {
    if (this.channel || this.writerThread || this.closed) return;
    this.channel = new BroadcastChannel(appendChannelName(this.file));
    this.channel.unref();
    let known = this.stmt.head.get()?.p ?? 0;
    let announced = known;
    let timer: NodeJS.Timeout | undefined;
    const ingest = () => {
      timer = undefined;
      if (this.closed || this.writerThread) return;
      // A log restored under this process (see checkTail): from its end on, its events are read anew, and the heads
      // announced count from there (else its new events, at positions read before, would wait for it to pass its old head).
      if (this.tail.length > 0) this.checkTail();
      if (this.tail.length === 0) {
        const head = this.stmt.head.get()?.p ?? 0;
        if (head < known) known = announced = head;
      }
      // Other processes' commits are not announced: after many of them, read only what the tail keeps (the
      // subscriptions behind it read the log), not every event since the last announcement, parsed and dropped.
      known = Math.max(known, announced - TAIL_SIZE);
      for (;;) {
        const rows = this.stmt.readNewest.all(known, 4096);
        if (rows.length === 0) break;
        const events = rows.map(toRecorded);
        if (this.tail.length > 0 && this.tail[this.tail.length - 1]!.position !== events[0]!.position - 1) this.tail = [];
        for (const e of events) this.tail.push(e);
        known = events[events.length - 1]!.position;
        if (rows.length < 4096) break;
      }
      if (this.tail.length > 2 * TAIL_SIZE) this.tail = this.tail.slice(-TAIL_SIZE);
      this.appended.emit('appended', known);
    };
    this.channel.onmessage = (message) => {
      const head = (message as { data: number }).data;
      announced = Math.max(announced, head);
      // Announcements that arrive within INGEST_WINDOW_MS are read (and wake the subscriptions) once. A head below
      // one already read is a log restored under this process: ingest finds out (see above).
      if ((announced > known || head < known) && !timer) timer = setTimeout(ingest, INGEST_WINDOW_MS);
    };
  }

  async headPosition(): Promise<number> {
    return this.stmt.head.get()?.p ?? 0;
  }

  /** The log holds only events: its end is its head. */
  async endPosition(): Promise<number> {
    return this.headPosition();
  }

  async countAfter(position: number, max: number): Promise<number> {
    return this.db.prepare<[number, number], { n: number }>('SELECT COUNT(*) AS n FROM (SELECT 1 FROM events WHERE position > ? LIMIT ?)').get(position, max)!.n;
  }

  async listStreams(options: { prefix?: string; limit?: number; after?: string } = {}): Promise<StreamInfo[]> {
    const prefix = options.prefix ?? '';
    const after = options.after ?? '';
    // The names under a prefix lie in one range of the name index, from the prefix (or past `after`, whichever is later
    // in SQLite's order of names, UTF-8 bytes) to the prefix's successor: the scan reads that range only, rather than
    // every name after `after` in search of matches.
    const fromAfter = compareStreamNames(after, prefix) >= 0;
    const end = prefixEnd(prefix);
    const rows = this.db.prepare<unknown[], StreamRow>(`SELECT * FROM streams WHERE ${fromAfter ? 'name > ?' : 'name >= ?'}`
      + `${end === undefined ? '' : ' AND name < ?'} AND substr(name, 1, length(?)) = ? ORDER BY name LIMIT ?`)
      .all(fromAfter ? after : prefix, ...(end === undefined ? [] : [end]), prefix, prefix, readLimit(options.limit ?? 100));
    return rows.map(toStreamInfo);
  }

  async streamInfo(stream: string): Promise<StreamInfo | undefined> {
    const row = this.stmt.streamRow.get(stream);
    return row ? toStreamInfo(row) : undefined;
  }

  /** The close under way: a second call waits for it too, rather than returning while appends are still being committed. */
  private closing: Promise<void> | undefined;

  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.closed = true;
    // Let queued and in-flight appends finish, then stop the writer.
    while (this.queue.length > 0 || this.inFlight.size > 0) {
      await new Promise<void>((resolve) => this.appended.once('settled', () => resolve()));
    }
    this.appended.emit('appended', Number.MAX_SAFE_INTEGER);
    const writer = this.writerThread;
    if (writer) {
      await new Promise<void>((resolve) => {
        writer.ref();
        writer.once('message', () => resolve());
        writer.once('exit', () => resolve());
        writer.postMessage({ close: true });
      });
      await writer.terminate();
    }
    this.channel?.close();
    this.scan.close();
    this.db.close();
  }
}

/**
 * Events as the log stores them, taken when append is called: data that is not JSON (a bigint, a cycle) is refused
 * at once; the writer thread is sent only strings (a value that cannot be posted to it, such as a function, threw in
 * the middle of a group commit, and the appends beside it never settled); and the tail serves subscribers what the
 * log holds (JSON's Date strings, no undefined), not the caller's objects, which it may change afterwards.
 */
function serialise(events: NewEvent[]): SerialisedEvent[] {
  return events.map(({ id, type, data, metadata }) => ({ id, type, data: JSON.stringify(data), metadata: JSON.stringify(metadata) }));
}

function hasFilter(filter: SubscriptionFilter | undefined): filter is SubscriptionFilter {
  return filter !== undefined && (filter.types !== undefined || filter.streamPrefixes !== undefined
    || filter.correlationIds !== undefined || filter.actors !== undefined);
}

/**
 * A member of an event's metadata as SQL text: only a string counts, as matchesFilter has it. A row put in by hand whose
 * metadata is not JSON has none (json_extract would fail on it, and with it the whole read), nor one whose metadata is a
 * blob: SQLite reads JSON text in a blob, but the port hands a blob out as bytes (`{ raw }`, see decodeColumn).
 */
const metadataMember = (member: 'correlation_id' | 'actor') =>
  `(CASE WHEN typeof(metadata) = 'text' AND json_valid(metadata) THEN CASE json_type(metadata, '$.${member}') WHEN 'text' THEN metadata ->> '$.${member}' END END)`;

function toRecorded([position, id, stream, revision, type, data, metadata, recorded_at]: EventRow): RecordedEvent {
  return { id, stream, revision, position, type, data: decodeColumn(data), metadata: decodeColumn(metadata) as EventMetadata, recorded_at };
}

/**
 * An event's data or metadata column. This store writes JSON objects; a row put in by hand (sqlite3) may hold other
 * JSON, text that is not JSON or a blob, handed on as EventStoreDB's adapter hands on what other tools write (see
 * eventObject), rather than failing every read (and every projection's batch) that holds it.
 */
function decodeColumn(column: unknown): Record<string, unknown> {
  if (typeof column !== 'string') return eventObject(column);
  try {
    return eventObject(JSON.parse(column));
  } catch {
    return eventObject(Buffer.from(column));
  }
}

function toStreamInfo(row: StreamRow): StreamInfo {
  return {
    stream: row.name,
    revision: row.revision,
    event_count: row.event_count,
    first_position: row.first_position,
    last_position: row.last_position,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/**
 * The least string greater than every string starting with `prefix`, in SQLite's order of names (UTF-8 bytes, which is
 * code point order): the prefix with its last code point incremented. Undefined for an empty prefix or one ending in
 * U+10FFFF, which has none, or next to or in the surrogates. A bound too high would only make the scan longer: the query keeps
 * the exact prefix test.
 */
function prefixEnd(prefix: string): string | undefined {
  const last = [...prefix].at(-1);
  if (last === undefined) return undefined;
  const code = last.codePointAt(0)!;
  // A lone surrogate reaches SQLite as U+FFFD, as would its successor: no range to bound.
  if (code >= 0x10ffff || (code >= 0xd7ff && code <= 0xdfff)) return undefined;
  return prefix.slice(0, prefix.length - last.length) + String.fromCodePoint(code + 1);
}

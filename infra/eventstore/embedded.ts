import Database from 'better-sqlite3';
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DuplicateEventIdError, WrongExpectedVersionError } from './errors.js';
import { matchesFilter } from './port.js';
import type {
  AppendResult, EventStore, ExpectedRevision, NewEvent, RecordedEvent, StreamInfo, SubscriptionFilter,
} from './port.js';

interface PendingAppend {
  stream: string;
  events: NewEvent[];
  expected: ExpectedRevision;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

interface EventRow {
  position: number; id: string; stream: string; revision: number; type: string;
  data: string; metadata: string; recorded_at: string;
}
interface StreamRow {
  name: string; revision: number; event_count: number; first_position: number; last_position: number;
  created_at: string; updated_at: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS events (
  position    INTEGER PRIMARY KEY,
  id          TEXT NOT NULL UNIQUE,
  stream      TEXT NOT NULL,
  revision    INTEGER NOT NULL,
  type        TEXT NOT NULL,
  data        TEXT NOT NULL,
  metadata    TEXT NOT NULL,
  recorded_at TEXT NOT NULL,
  UNIQUE (stream, revision)
);
CREATE INDEX IF NOT EXISTS events_type ON events (type, position);
CREATE TABLE IF NOT EXISTS streams (
  name           TEXT PRIMARY KEY,
  revision       INTEGER NOT NULL,
  event_count    INTEGER NOT NULL,
  first_position INTEGER NOT NULL,
  last_position  INTEGER NOT NULL,
  created_at     TEXT NOT NULL,
  updated_at     TEXT NOT NULL
) WITHOUT ROWID;
`;

/** How often a live subscription looks for events written by another process (ops CLI, a second node). */
const CROSS_PROCESS_POLL_MS = 200;

/**
 * Durable single-file event store on SQLite (WAL, synchronous=FULL: a commit is on disk before
 * append() resolves). Appends that arrive in the same tick are committed in one transaction
 * (group commit), so one fsync acknowledges many commands; each append is still checked and
 * applied on its own, and a failed check rejects only that append.
 */
export class EmbeddedEventStore implements EventStore {
  readonly kind = 'embedded' as const;
  private readonly db: Database.Database;
  private readonly appended = new EventEmitter();
  private queue: PendingAppend[] = [];
  private flushScheduled = false;
  private closed = false;
  private readonly stmt;

  constructor(readonly file: string, options: { readonly?: boolean } = {}) {
    if (file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
    this.db = new Database(file, { readonly: options.readonly ?? false });
    this.db.pragma('busy_timeout = 5000');
    if (!options.readonly) {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = FULL');
      this.db.exec(SCHEMA);
    }
    this.appended.setMaxListeners(0);
    this.stmt = {
      findById: this.db.prepare<[string], { stream: string; revision: number; position: number }>(
        'SELECT stream, revision, position FROM events WHERE id = ?'),
      streamRow: this.db.prepare<[string], StreamRow>('SELECT * FROM streams WHERE name = ?'),
      head: this.db.prepare<[], { p: number | null }>('SELECT MAX(position) AS p FROM events'),
      insert: this.db.prepare(
        'INSERT INTO events (position, id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'),
      upsertStream: this.db.prepare(`INSERT INTO streams (name, revision, event_count, first_position, last_position, created_at, updated_at)
        VALUES (@name, @revision, @count, @first, @last, @now, @now)
        ON CONFLICT (name) DO UPDATE SET revision = @revision, event_count = event_count + @count,
          last_position = @last, updated_at = @now`),
      readStream: this.db.prepare<[string, number, number], EventRow>(
        'SELECT * FROM events WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?'),
      readAll: this.db.prepare<[number, number], EventRow>('SELECT * FROM events WHERE position > ? ORDER BY position LIMIT ?'),
    };
  }

  append(stream: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    if (this.closed) return Promise.reject(new Error('event store is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ stream, events, expected, resolve, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Commits every queued append in one transaction, then settles each promise. */
  private flush(): void {
    this.flushScheduled = false;
    const batch = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    const outcomes: Array<{ ok: true; result: AppendResult } | { ok: false; error: unknown }> = [];
    let head = 0;
    try {
      this.db.transaction(() => {
        head = this.stmt.head.get()?.p ?? 0;
        const now = new Date().toISOString();
        for (const pending of batch) {
          try {
            const result = this.applyOne(pending, head, now);
            head = Math.max(head, result.position);
            outcomes.push({ ok: true, result });
          } catch (error) {
            outcomes.push({ ok: false, error });
          }
        }
      }).immediate();
    } catch (error) {
      // The transaction itself failed (disk full, I/O error): nothing of this batch was written.
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) pending.resolve(outcome.result);
      else pending.reject(outcome.error);
    });
    this.appended.emit('appended', head);
  }

  /** Checks and writes one append inside the open transaction. Throws before writing anything. */
  private applyOne({ stream, events, expected }: PendingAppend, head: number, now: string): AppendResult {
    const row = this.stmt.streamRow.get(stream);
    const current = row ? row.revision : -1;
    if (events.length > 0) {
      const existing = this.stmt.findById.get(events[0]!.id);
      if (existing) return this.idempotentResult(stream, events, existing);
    }
    const ok = expected === 'any'
      || (expected === 'no_stream' && current === -1)
      || (expected === 'stream_exists' && current >= 0)
      || expected === current;
    if (!ok) throw new WrongExpectedVersionError(stream, expected, current === -1 ? 'no_stream' : current);
    if (events.length === 0) return { revision: current, position: row?.last_position ?? 0 };
    for (const e of events) if (this.stmt.findById.get(e.id)) throw new DuplicateEventIdError(e.id, stream);
    let revision = current;
    let position = head;
    for (const e of events) {
      revision += 1;
      position += 1;
      this.stmt.insert.run(position, e.id, stream, revision, e.type, JSON.stringify(e.data), JSON.stringify(e.metadata), now);
    }
    this.stmt.upsertStream.run({ name: stream, revision, count: events.length, first: head + 1, last: position, now });
    return { revision, position };
  }

  /** The same event ids were appended before (a retried request): answer as the first time, write nothing. */
  private idempotentResult(stream: string, events: NewEvent[], first: { stream: string; revision: number; position: number }): AppendResult {
    let last = first;
    for (let i = 0; i < events.length; i++) {
      const found = i === 0 ? first : this.stmt.findById.get(events[i]!.id);
      if (!found || found.stream !== stream || found.revision !== first.revision + i) {
        throw new DuplicateEventIdError(events[i]!.id, stream);
      }
      last = found;
    }
    return { revision: last.revision, position: last.position };
  }

  async readStream(stream: string, options: { fromRevision?: number; limit?: number } = {}): Promise<RecordedEvent[]> {
    return this.stmt.readStream.all(stream, options.fromRevision ?? 0, options.limit ?? -1).map(toRecorded);
  }

  async readAll(fromPosition: number, options: { limit?: number; filter?: SubscriptionFilter } = {}): Promise<RecordedEvent[]> {
    const limit = options.limit ?? 1000;
    const filter = options.filter;
    if (!filter || (!filter.types && !filter.streamPrefixes)) return this.stmt.readAll.all(fromPosition, limit).map(toRecorded);
    const where: string[] = ['position > ?'];
    const params: unknown[] = [fromPosition];
    if (filter.types) {
      where.push(`type IN (${filter.types.map(() => '?').join(', ')})`);
      params.push(...filter.types);
    }
    if (filter.streamPrefixes) {
      where.push(`(${filter.streamPrefixes.map(() => 'substr(stream, 1, ?) = ?').join(' OR ')})`);
      for (const p of filter.streamPrefixes) params.push(p.length, p);
    }
    params.push(limit);
    const rows = this.db.prepare(`SELECT * FROM events WHERE ${where.join(' AND ')} ORDER BY position LIMIT ?`).all(...params) as EventRow[];
    return rows.map(toRecorded);
  }

  async *subscribeToAll(fromPosition: number, options: { filter?: SubscriptionFilter; signal?: AbortSignal } = {}): AsyncIterable<RecordedEvent> {
    let position = fromPosition;
    const { signal, filter } = options;
    while (!signal?.aborted && !this.closed) {
      const batch = await this.readAll(position, { limit: 512 });
      if (batch.length === 0) {
        await this.waitForAppend(position, signal);
        continue;
      }
      for (const event of batch) {
        position = event.position;
        if (!matchesFilter(event, filter)) continue;
        yield event;
        if (signal?.aborted) return;
      }
    }
  }

  /** Resolves when an append past `position` is committed here, or after a short poll for other processes. */
  private waitForAppend(position: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.appended.off('appended', onAppend);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const onAppend = (head: number) => { if (head > position) done(); };
      const timer = setTimeout(done, CROSS_PROCESS_POLL_MS);
      this.appended.on('appended', onAppend);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  async headPosition(): Promise<number> {
    return this.stmt.head.get()?.p ?? 0;
  }

  async listStreams(options: { prefix?: string; limit?: number; after?: string } = {}): Promise<StreamInfo[]> {
    const prefix = options.prefix ?? '';
    const rows = this.db.prepare<[number, string, string, number], StreamRow>(
      'SELECT * FROM streams WHERE substr(name, 1, ?) = ? AND name > ? ORDER BY name LIMIT ?',
    ).all(prefix.length, prefix, options.after ?? '', options.limit ?? 100);
    return rows.map(toStreamInfo);
  }

  async streamInfo(stream: string): Promise<StreamInfo | undefined> {
    const row = this.stmt.streamRow.get(stream);
    return row ? toStreamInfo(row) : undefined;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.queue.length > 0) this.flush();
    this.closed = true;
    this.appended.emit('appended', Number.MAX_SAFE_INTEGER);
    this.db.close();
  }
}

function toRecorded(row: EventRow): RecordedEvent {
  return {
    id: row.id,
    stream: row.stream,
    revision: row.revision,
    position: row.position,
    type: row.type,
    data: JSON.parse(row.data),
    metadata: JSON.parse(row.metadata),
    recorded_at: row.recorded_at,
  };
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

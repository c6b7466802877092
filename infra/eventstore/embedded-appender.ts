import type Database from 'better-sqlite3';
import { DuplicateEventIdError, EventLogBusyError, StorageFullError, WrongExpectedVersionError } from './errors.js';
import type { AppendResult, ExpectedRevision } from './port.js';
import { setPageSize } from '../page-size.js';

export const SCHEMA = `
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

/** How far behind the log's last time a commit's clock may be and still be stamped with that time (see commit). */
export const MAX_CLOCK_STEP_BACK_MS = 60_000;

/** An event as it crosses to the writer thread: its data and metadata already the JSON text the log stores. */
export interface SerialisedEvent {
  id: string;
  type: string;
  data: string;
  metadata: string;
}

export interface AppendRequest {
  stream: string;
  events: SerialisedEvent[];
  expected: ExpectedRevision;
  /** See StreamAppend.expectedLastEventId. */
  expectedLastEventId?: string;
  /** Further appends to other streams that commit with this one or not at all (EventStore.appendAll). */
  with?: Array<Omit<AppendRequest, 'with'>>;
}

/** An outcome that crosses the worker boundary: errors travel as plain data and are rebuilt on the other side. */
export type AppendOutcome =
  /** `written`: false when the append was an idempotent replay of events already in the log. */
  | { ok: true; result: AppendResult; written: boolean; also?: Array<{ result: AppendResult; written: boolean }> }
  | { ok: false; error: { name: string; message: string; code?: string; stream?: string; expected?: ExpectedRevision; actual?: number | 'no_stream'; eventId?: string } };

export function reviveError(error: Extract<AppendOutcome, { ok: false }>['error']): Error {
  if (error.name === 'WrongExpectedVersionError') return new WrongExpectedVersionError(error.stream!, error.expected!, error.actual!);
  if (error.name === 'DuplicateEventIdError') return new DuplicateEventIdError(error.eventId!, error.stream!);
  if (error.code === 'SQLITE_FULL') return new StorageFullError(`the event log's storage is full: ${error.message}`);
  if (error.code?.startsWith('SQLITE_BUSY')) return new EventLogBusyError(`the event log is locked by another process: ${error.message}`);
  return Object.assign(new Error(error.message), { name: error.name });
}

function outcomeOf(error: unknown): AppendOutcome {
  if (error instanceof WrongExpectedVersionError) {
    return { ok: false, error: { name: error.name, message: error.message, stream: error.stream, expected: error.expected, actual: error.actual } };
  }
  if (error instanceof DuplicateEventIdError) return { ok: false, error: { name: error.name, message: error.message, stream: error.stream, eventId: error.eventId } };
  const e = error as Error & { code?: unknown };
  const code = typeof e?.code === 'string' ? { code: e.code } : {};
  return { ok: false, error: { name: e?.name ?? 'Error', message: e?.message ?? String(error), ...code } };
}

export function openWritable(db: Database.Database): void {
  db.pragma('busy_timeout = 5000');
  setPageSize(db);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(SCHEMA);
}

/**
 * Commits a batch of appends in one SQLite transaction (one fsync). Each append is checked and applied on
 * its own: a failed check rejects only that append, and nothing of it is written. If the transaction
 * itself fails (disk full, I/O error), every append of the batch fails and nothing is written.
 */
export class Appender {
  private readonly stmt;

  constructor(private readonly db: Database.Database) {
    this.applyRequest = db.transaction((request: AppendRequest, head: number, now: string) => this.applyParts(request, head, now));
    this.stmt = {
      idAt: db.prepare<[string, number], { id: string }>('SELECT id FROM events WHERE stream = ? AND revision = ?'),
      findById: db.prepare<[string], { stream: string; revision: number; position: number }>('SELECT stream, revision, position FROM events WHERE id = ?'),
      streamRow: db.prepare<[string], { revision: number; last_position: number }>('SELECT revision, last_position FROM streams WHERE name = ?'),
      last: db.prepare<[], { p: number; t: string }>('SELECT position AS p, recorded_at AS t FROM events ORDER BY position DESC LIMIT 1'),
      insert: db.prepare('INSERT INTO events (position, id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'),
      // Positional parameters: binding a named-parameter object costs more per call.
      upsertStream: db.prepare<[string, number, number, number, number, string, string]>(`INSERT INTO streams
          (name, revision, event_count, first_position, last_position, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (name) DO UPDATE SET revision = excluded.revision, event_count = event_count + excluded.event_count,
          last_position = excluded.last_position, updated_at = excluded.updated_at`),
    };
  }

  commit(batch: AppendRequest[]): { outcomes: AppendOutcome[]; head: number; recorded_at: string } {
    const outcomes: AppendOutcome[] = [];
    let head = 0;
    let now = new Date().toISOString();
    try {
      this.db.transaction(() => {
        const last = this.stmt.last.get();
        head = last?.p ?? 0;
        // Never before the log's last event when the clock was set back by up to a minute (a step of NTP's, another
        // process's clock a little behind): the times follow the positions, as audits by time (`ops events tail
        // --since/--until`) read them. A log stamped further ahead (a clock that had jumped) is not followed there.
        if (last && last.t > now && Date.parse(last.t) - Date.parse(now) <= MAX_CLOCK_STEP_BACK_MS) now = last.t;
        for (const request of batch) {
          try {
            const parts = this.applyRequest(request, head, now);
            head = Math.max(head, ...parts.map((p) => p.result.position));
            outcomes.push({ ok: true, ...parts[0]!, ...(request.with ? { also: parts.slice(1) } : {}) });
          } catch (error) {
            // A failed write in the middle of a statement (SQLITE_FULL or SQLITE_IOERR as a full page cache spills
            // into the WAL, SQLITE_NOMEM) rolls back the whole transaction, not only this request's savepoint: the
            // requests before it are undone, and those after it would each be committed on their own, outside
            // the batch, then reported as failed. The batch fails as a whole.
            if (!this.db.inTransaction) throw error;
            outcomes.push(outcomeOf(error));
          }
        }
      }).immediate();
    } catch (error) {
      const failed = outcomeOf(error);
      return { outcomes: batch.map(() => failed), head: 0, recorded_at: now };
    }
    return { outcomes, head, recorded_at: now };
  }

  /**
   * One request (an append and those that commit `with` it), all of it or none: a nested transaction is
   * a savepoint, rolled back if any part throws (a failed check, an insert that fails half-way), so a
   * refused request leaves no rows behind for the batch's commit, and the requests after it are unaffected.
   */
  private readonly applyRequest: (request: AppendRequest, head: number, now: string) => Array<{ result: AppendResult; written: boolean }>;

  private applyParts(request: AppendRequest, head: number, now: string): Array<{ result: AppendResult; written: boolean }> {
    const ids = new Set<string>();
    let at = head;
    return [request, ...(request.with ?? [])].map((part) => {
      for (const e of part.events) {
        if (ids.has(e.id)) throw new DuplicateEventIdError(e.id, part.stream);
        ids.add(e.id);
      }
      const before = at;
      const result = this.applyOne(part, at, now);
      at = Math.max(at, result.position);
      return { result, written: result.position > before };
    });
  }

  private applyOne({ stream, events, expected, expectedLastEventId }: AppendRequest, head: number, now: string): AppendResult {
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
    // The right revision, but reached by other events than those the caller decided on (an append it
    // counted on failed, and another writer's moved the stream just as far).
    if (expectedLastEventId !== undefined && current >= 0 && this.stmt.idAt.get(stream, current)?.id !== expectedLastEventId) {
      throw new WrongExpectedVersionError(stream, expected, current);
    }
    if (events.length === 0) return { revision: current, position: row?.last_position ?? 0 };
    // The first id was looked up above; the others may still be taken (by events of another stream).
    for (let i = 1; i < events.length; i++) if (this.stmt.findById.get(events[i]!.id)) throw new DuplicateEventIdError(events[i]!.id, stream);
    let revision = current;
    let position = head;
    for (const e of events) {
      revision += 1;
      position += 1;
      this.stmt.insert.run(position, e.id, stream, revision, e.type, e.data, e.metadata, now);
    }
    this.stmt.upsertStream.run(stream, revision, events.length, head + 1, position, now, now);
    return { revision, position };
  }

  /** The same event ids were appended before (a retried append): answer as the first time, write nothing. */
  private idempotentResult(stream: string, events: SerialisedEvent[], first: { stream: string; revision: number; position: number }): AppendResult {
    let last = first;
    for (let i = 0; i < events.length; i++) {
      const found = i === 0 ? first : this.stmt.findById.get(events[i]!.id);
      // Only some of the events were appended before (a retry that decided more than the first time): the error names
      // an id the log holds, not the one it lacks.
      if (!found) throw new DuplicateEventIdError(events[0]!.id, stream);
      if (found.stream !== stream || found.revision !== first.revision + i) throw new DuplicateEventIdError(events[i]!.id, stream);
      last = found;
    }
    return { revision: last.revision, position: last.position };
  }
}

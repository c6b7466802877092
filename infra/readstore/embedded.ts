import Database from 'better-sqlite3';
import type { Worker } from 'node:worker_threads';
import { setPageSize } from '../page-size.js';
import { preparePrivateFile } from '../private-files.js';
import { startCheckpointer, stopCheckpointer, truncateWal } from '../threads.js';
import {
  decodeCursor, encodeCursor,
  checkPauseHolder, isQueryField, pageLimit, pauseFields,
  type CheckpointInfo, type CollectionSpec, type Doc, type FieldValue, type FindOptions, type Page, type PauseHolder,
  type ProjectionFailure, type ProjectionWriter, type ReadStore, type Stored, type StoredPauses, type Where,
} from './port.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS rm_checkpoints (
  projection TEXT NOT NULL,
  slot       TEXT NOT NULL CHECK (slot IN ('live', 'rebuild')),
  position   INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  updated_at TEXT,
  failure    TEXT,
  paused_by  TEXT,
  PRIMARY KEY (projection, slot)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rm_collections (
  name       TEXT PRIMARY KEY,
  projection TEXT NOT NULL,
  indexes    TEXT NOT NULL
) WITHOUT ROWID;
`;

const NAME = /^[a-z][a-z0-9_]{0,62}$/;
/** How often the checkpointer thread moves the WAL into the database file. */
const CHECKPOINT_INTERVAL_MS = 250;

interface Row { id: string; position: number; deleted: number; doc: string }
/** The transaction of one applyBatch, as its writer sees it: `check` throws once it is no longer open. */
interface OpenBatch { open: boolean; check(): void }
type CheckpointRow = Omit<CheckpointInfo, 'failure' | 'paused_at' | 'paused_by'> & { failure: string | null; paused_by: string | null };
/**
 * Columns added to rm_checkpoints since it was first made (files made before them get them at open). A `paused_at` column
 * (pauses recorded without their holder, by one earlier version) is left unread.
 */
const ADDED_COLUMNS = ['failure', 'paused_by'];

/**
 * Read models in SQLite (a file beside the event log). Writes are not fsynced on every commit
 * (synchronous=NORMAL): read models are disposable and the checkpoint commits with them, so after a
 * crash the projection resumes from a checkpoint that matches its documents.
 */
export class EmbeddedReadStore implements ReadStore {
  readonly kind = 'embedded' as const;
  private readonly db: Database.Database;
  /**
   * Queries (get, find, count) read on a connection of their own: on `db` they would read inside a batch left open
   * while its projection awaits (a provider call in `apply`), and see its documents before it commits, or though it
   * then rolls back. `db` itself for an in-memory database, which no second connection can open.
   */
  private readonly reader: Database.Database;
  private readonly readerStatements = new Map<string, Database.Statement>();
  private lock: Promise<unknown> = Promise.resolve();
  private readonly statements = new Map<string, Database.Statement>();
  private readonly checkpointer?: Worker;
  /** collection → live table, valid while no other connection committed (PRAGMA data_version unchanged). */
  private readonly liveTables = new Map<string, string>();
  private dataVersion = -1;

  /** `walLimitBytes`: past it, a WAL the checkpointer has copied is cut back (64 MiB; smaller in tests). */
  constructor(readonly file: string, options: { checkpointer?: boolean; walLimitBytes?: number } = {}) {
    if (file !== ':memory:') preparePrivateFile(file);
    this.db = new Database(file);
    this.db.pragma('busy_timeout = 5000');
    setPageSize(this.db);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    // Checkpoints (which fsync) run on a worker thread instead of inside this thread's commits. Under a
    // steady stream of commits such a checkpoint never quite catches up, and SQLite only reuses the WAL
    // from its start after a complete one; so this connection still checkpoints itself, rarely (every
    // 16,384 pages of WAL, see infra/page-size.ts), with little left to copy: the WAL stays bounded. A WAL a long
    // read let grow past its limit is truncated on this connection, between batches (through the batch queue), when
    // the thread has copied it: done by the lowest-priority thread, it held the lock the batches wait for while
    // descheduled, and they failed with SQLITE_BUSY.
    if (file !== ':memory:' && options.checkpointer !== false) {
      this.db.pragma('wal_autocheckpoint = 16384');
      this.checkpointer = startCheckpointer(file, CHECKPOINT_INTERVAL_MS, {
        truncate: () => this.exclusive(async () => truncateWal(this.db)),
        walLimitBytes: options.walLimitBytes,
      });
    }
    this.db.exec(SCHEMA);
    // Files made before checkpoints recorded failures and pauses: checked again in a write transaction, since another
    // connection (the projection thread, the operator CLI) may be opening the same file at the same moment.
    const missing = () => {
      const columns = new Set((this.db.prepare('PRAGMA table_info(rm_checkpoints)').all() as Array<{ name: string }>).map((c) => c.name));
      return ADDED_COLUMNS.filter((c) => !columns.has(c));
    };
    if (missing().length > 0) {
      this.db.transaction(() => { for (const column of missing()) this.db.exec(`ALTER TABLE rm_checkpoints ADD COLUMN ${column} TEXT`); }).immediate();
    }
    this.reader = file === ':memory:' ? this.db : new Database(file, { readonly: true });
    this.reader.pragma('busy_timeout = 5000');
  }

  /** Prepared statements are cached by their text: queries are built from a small set of shapes. */
  private prepare(sql: string, db = this.db): Database.Statement {
    const statements = db === this.db ? this.statements : this.readerStatements;
    let statement = statements.get(sql);
    if (!statement) {
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    return statement;
  }

  /**
   * Serialised with the batches: called while another projection's batch awaits inside its open
   * transaction, it would otherwise join that transaction (as a savepoint) and be undone with it.
   */
  register(projection: string, collections: CollectionSpec[]): Promise<void> {
    return this.exclusive(async () => this.registerNow(projection, collections));
  }

  private registerNow(projection: string, collections: CollectionSpec[]): void {
    this.owners.clear();
    this.liveTables.clear();
    this.db.transaction(() => {
      this.prepare(`INSERT INTO rm_checkpoints (projection, slot, position, generation, updated_at)
        VALUES (?, 'live', 0, 1, NULL) ON CONFLICT DO NOTHING`).run(projection);
      for (const c of collections) {
        if (!NAME.test(c.name)) throw new Error(`invalid collection name ${c.name}`);
        for (const index of c.indexes ?? []) for (const f of index) if (!isQueryField(f)) throw new Error(`invalid index field ${f}`);
        this.prepare(`INSERT INTO rm_collections (name, projection, indexes) VALUES (?, ?, ?)
          ON CONFLICT (name) DO UPDATE SET projection = excluded.projection, indexes = excluded.indexes`)
          .run(c.name, projection, JSON.stringify(c.indexes ?? []));
      }
      const live = this.slot(projection, 'live')!;
      this.createTables(projection, live.generation);
    })();
  }

  private collectionsOf(projection: string): Array<{ name: string; indexes: string[][] }> {
    return (this.prepare('SELECT name, indexes FROM rm_collections WHERE projection = ?').all(projection) as Array<{ name: string; indexes: string }>)
      .map((r) => ({ name: r.name, indexes: JSON.parse(r.indexes) as string[][] }));
  }

  private createTables(projection: string, generation: number): void {
    for (const c of this.collectionsOf(projection)) {
      const table = tableName(c.name, generation);
      // A rowid table with a unique id, not a WITHOUT ROWID table keyed by id: a WITHOUT ROWID row is kept whole on its
      // page only up to about a quarter of the page (231 bytes with 1 KiB pages), and a memory's document (~300 bytes) or
      // vector (~550) spilled into an overflow page of its own, mostly empty. A rowid table keeps rows up to 989 bytes
      // whole. Measured (bench/RESULTS.md, twenty-fourth session): 1.7 instead of 2.5 KB of read models per memory, the
      // projection thread's CPU per memory store 66–73 instead of 84–90 µs, memory stores over HTTP +4.5%. Queries plan
      // the same on both (the id's unique index serves the id order and lookups); tables made before keep their layout
      // until a rebuild makes the projection's next generation.
      this.db.exec(`CREATE TABLE IF NOT EXISTS ${table} (
        id TEXT NOT NULL UNIQUE, position INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0, doc TEXT NOT NULL)`);
      // Indexes are named by their place in the spec: one whose fields changed since (a new version of the projection,
      // on a file an earlier one made) is made again, else its queries would scan the table until the next rebuild.
      const existing = new Map((this.prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`)
        .all(table) as Array<{ name: string; sql: string | null }>).map((r) => [r.name, r.sql]));
      c.indexes.forEach((fields, i) => {
        const cols = fields.map((f) => `json_extract(doc, '$.${f}')`).join(', ');
        const sql = `CREATE INDEX ${table}_i${i} ON ${table} (deleted, ${cols}, id)`;
        if (existing.get(`${table}_i${i}`) === sql) return;
        this.db.exec(`DROP INDEX IF EXISTS ${table}_i${i}`);
        this.db.exec(sql);
      });
      for (const name of existing.keys()) {
        const place = new RegExp(`^${table}_i(\\d+)$`).exec(name);
        if (place && Number(place[1]) >= c.indexes.length) this.db.exec(`DROP INDEX ${name}`);
      }
    }
  }

  private dropTables(projection: string, generation: number): void {
    for (const c of this.collectionsOf(projection)) {
      const table = tableName(c.name, generation);
      for (const statements of [this.statements, this.readerStatements]) {
        for (const sql of statements.keys()) if (sql.includes(` ${table} `)) statements.delete(sql);
      }
      this.db.exec(`DROP TABLE IF EXISTS ${table}`);
    }
  }

  private slot(projection: string, slot: 'live' | 'rebuild'): CheckpointInfo | undefined {
    const row = this.prepare('SELECT projection, position, generation, updated_at, failure, paused_by FROM rm_checkpoints WHERE projection = ? AND slot = ?')
      .get(projection, slot) as CheckpointRow | undefined;
    return row && toCheckpoint(row);
  }

  async checkpoint(projection: string): Promise<CheckpointInfo> {
    return this.slot(projection, 'live') ?? { projection, position: 0, generation: 1, updated_at: null };
  }

  async listCheckpoints(): Promise<CheckpointInfo[]> {
    return (this.prepare(`SELECT projection, position, generation, updated_at, failure, paused_by FROM rm_checkpoints WHERE slot = 'live' ORDER BY projection`)
      .all() as CheckpointRow[]).map(toCheckpoint);
  }

  /** Through the batch queue: an UPDATE while another projection's batch is open would join (and share the fate of) its transaction. */
  recordFailure(projection: string, failure: ProjectionFailure | null): Promise<void> {
    return this.exclusive(async () => {
      this.prepare(`UPDATE rm_checkpoints SET failure = ? WHERE projection = ? AND slot = 'live'`)
        .run(failure && JSON.stringify(failure), projection);
    });
  }

  /**
   * Through the batch queue, as recordFailure. One statement, so that what other connections (other processes) recorded
   * for other holders meanwhile stays: a JSON merge patch sets this holder's record or (a null value) removes it.
   */
  async recordPause(projection: string, holder: PauseHolder, since: string | null): Promise<void> {
    checkPauseHolder(holder);
    return this.exclusive(async () => {
      this.prepare(`UPDATE rm_checkpoints SET paused_by = NULLIF(json_patch(coalesce(paused_by, '{}'), json_object(?, json(?))), '{}')
        WHERE projection = ? AND slot = 'live'`)
        .run(holder.id, since === null ? null : JSON.stringify({ host: holder.host, pid: holder.pid, since }), projection);
    });
  }

  /** Serialises batches: one SQLite connection can hold one transaction at a time. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => undefined);
    return run;
  }

  applyBatch(projection: string, expected: { position: number; generation: number }, position: number,
    fn: (writer: ProjectionWriter) => Promise<void>, target?: { rebuild: true }): Promise<boolean> {
    const slotName = target?.rebuild ? 'rebuild' : 'live';
    return this.exclusive(async () => {
      this.db.exec('BEGIN IMMEDIATE');
      const batch: OpenBatch = {
        open: true,
        check: () => {
          if (!batch.open || !this.db.inTransaction) {
            throw new Error(`the batch of ${projection} is over: its transaction ${batch.open ? 'was rolled back by an earlier error' : 'has ended'}; nothing more of it is written`);
          }
        },
      };
      try {
        const stored = this.slot(projection, slotName);
        if (!stored || stored.position !== expected.position || stored.generation !== expected.generation) {
          this.db.exec('ROLLBACK');
          return false;
        }
        const generation = stored.generation;
        await fn(this.writer(projection, generation, batch));
        batch.check();
        this.prepare('UPDATE rm_checkpoints SET position = ?, updated_at = ? WHERE projection = ? AND slot = ?')
          .run(position, new Date().toISOString(), projection, slotName);
        this.db.exec('COMMIT');
        return true;
      } catch (error) {
        if (this.db.inTransaction) this.db.exec('ROLLBACK');
        throw error;
      } finally {
        batch.open = false;
      }
    });
  }

  /**
   * A writer works only inside its own batch's transaction. SQLite rolls a whole transaction back by itself on some
   * errors (SQLITE_FULL, SQLITE_IOERR): a projection going on after one (catching it, or writes started together with
   * Promise.all) would otherwise write, and store the checkpoint, outside any transaction, each statement committed
   * on its own: the checkpoint past events whose documents were rolled back, lost until a rebuild. So would a write
   * made after its batch ended (not awaited), in whatever transaction is open then.
   */
  private writer(projection: string, generation: number, batch: OpenBatch): ProjectionWriter {
    const table = (collection: string) => {
      batch.check();
      const owner = this.projectionOf(collection);
      if (owner !== projection) throw new Error(`projection ${projection} may not write ${collection} (owned by ${owner})`);
      return tableName(collection, generation);
    };
    return {
      get: async <T extends Doc>(collection: string, id: string) => this.getFrom<T>(table(collection), id),
      find: async <T extends Doc>(collection: string, options: FindOptions) => this.findIn<T>(table(collection), options),
      put: async <T extends Doc>(collection: string, doc: T, position: number) => {
        this.prepare(`INSERT INTO ${table(collection)} (id, position, deleted, doc) VALUES (?, ?, 0, ?)
          ON CONFLICT (id) DO UPDATE SET position = excluded.position, deleted = 0, doc = excluded.doc
          WHERE position < excluded.position`).run(doc.id, position, JSON.stringify(doc));
      },
      delete: async (collection: string, id: string, position: number) => {
        this.prepare(`INSERT INTO ${table(collection)} (id, position, deleted, doc) VALUES (?, ?, 1, '{}')
          ON CONFLICT (id) DO UPDATE SET position = excluded.position, deleted = 1, doc = '{}'
          WHERE position < excluded.position`).run(id, position);
      },
    };
  }

  private readonly owners = new Map<string, string>();

  private projectionOf(collection: string): string {
    const known = this.owners.get(collection);
    if (known) return known;
    const row = this.prepare('SELECT projection FROM rm_collections WHERE name = ?').get(collection) as { projection: string } | undefined;
    if (!row) throw new Error(`unknown collection ${collection}`);
    this.owners.set(collection, row.projection);
    return row.projection;
  }

  /** The live table of a collection (resolved on every query: a rebuild in another process may have swapped it). */
  private liveTable(collection: string): string {
    const version = this.prepare('PRAGMA data_version', this.reader).pluck().get() as number;
    if (version !== this.dataVersion) {
      this.liveTables.clear();
      this.dataVersion = version;
    }
    const cached = this.liveTables.get(collection);
    if (cached) return cached;
    const row = this.prepare(`SELECT k.generation AS generation FROM rm_collections c
      JOIN rm_checkpoints k ON k.projection = c.projection AND k.slot = 'live' WHERE c.name = ?`, this.reader).get(collection) as { generation: number } | undefined;
    if (!row) throw new Error(`unknown collection ${collection}`);
    const table = tableName(collection, row.generation);
    this.liveTables.set(collection, table);
    return table;
  }

  private getFrom<T extends Doc>(table: string, id: string, db = this.db): Stored<T> | undefined {
    const row = this.prepare(`SELECT * FROM ${table} WHERE id = ? AND deleted = 0`, db).get(id) as Row | undefined;
    return row ? toDoc<T>(row) : undefined;
  }

  private findIn<T extends Doc>(table: string, options: FindOptions, db = this.db): Page<Stored<T>> {
    const field = options.sort?.field ?? 'id';
    // `+deleted` keeps the planner on the id (the primary key, or the unique index on it) where that is the way: with
    // no filter and id order (no scan and sort per page), and for a filter on ids (`id IN (...)` of 1,000 ids:
    // 10-25 ms instead of a scan of every live document through an index on `deleted`, 140-1,850 ms).
    const onIds = options.where?.id !== undefined;
    const { sql, params } = whereSql(options.where, onIds || (field === 'id' && Object.keys(options.where ?? {}).length === 0));
    if (!isQueryField(field)) throw new Error(`invalid sort field ${field}`);
    const order = options.sort?.order === 'desc' ? 'DESC' : 'ASC';
    const cmp = order === 'DESC' ? '<' : '>';
    const expr = field === 'id' ? 'id' : `json_extract(doc, '$.${field}')`;
    const clauses = [sql];
    if (options.cursor) {
      const [value, id] = decodeCursor(options.cursor);
      if (field === 'id') {
        clauses.push(`id ${cmp} ?`);
        params.push(id);
      } else if (value === null) {
        // SQLite sorts NULL first ascending and last descending, and NULL compares with nothing.
        clauses.push(order === 'ASC' ? `(${expr} IS NOT NULL OR id > ?)` : `(${expr} IS NULL AND id < ?)`);
        params.push(id);
      } else if (order === 'ASC') {
        // The bound before the OR gives the planner a range on the sort field's index: without it, every page
        // walked the index from the start (a page at offset 99k of one scope: 420-700 ms instead of 4-9 ms).
        clauses.push(`${expr} >= ? AND (${expr} > ? OR (${expr} = ? AND id > ?))`);
        params.push(bindable(value), bindable(value), bindable(value), id);
      } else {
        // Descending, NULLs sort last and follow any value: no single range bounds the rest.
        clauses.push(`(${expr} < ? OR (${expr} = ? AND id < ?) OR ${expr} IS NULL)`);
        params.push(bindable(value), bindable(value), id);
      }
    }
    const limit = pageLimit(options.limit);
    params.push(limit + 1);
    const rows = this.prepare(`SELECT * FROM ${table} WHERE ${clauses.join(' AND ')} ORDER BY ${expr} ${order}, id ${order} LIMIT ?`, db)
      .all(...params) as Row[];
    const items = rows.slice(0, limit).map((r) => toDoc<T>(r));
    const last = items.at(-1);
    const next = rows.length > limit && last ? encodeCursor(field === 'id' ? last.id : getPath(last, field), last.id) : null;
    return { items, next_cursor: next };
  }

  /**
   * Reads the live table of `collection`, resolved and read in one read transaction: otherwise another
   * connection (the projection thread, or a rebuild by the CLI) could swap a rebuilt generation in and drop
   * this one between the two, and the read would fail with "no such table". In WAL mode the transaction's
   * snapshot keeps the table it resolved. (An in-memory store reads on its one connection: in a batch, in its transaction.)
   */
  private onLive<T>(collection: string, read: (table: string) => T): T {
    if (this.reader.inTransaction) return read(this.liveTable(collection));
    this.prepare('BEGIN', this.reader).run();
    try {
      return read(this.liveTable(collection));
    } finally {
      this.prepare('COMMIT', this.reader).run();
    }
  }

  async get<T extends Doc>(collection: string, id: string): Promise<Stored<T> | undefined> {
    return this.onLive(collection, (table) => this.getFrom<T>(table, id, this.reader));
  }

  async find<T extends Doc>(collection: string, options: FindOptions = {}): Promise<Page<Stored<T>>> {
    return this.onLive(collection, (table) => this.findIn<T>(table, options, this.reader));
  }

  async count(collection: string, where?: Where): Promise<number> {
    const { sql, params } = whereSql(where);
    return this.onLive(collection, (table) => (this.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE ${sql}`, this.reader).get(...params) as { n: number }).n);
  }

  // Both read the checkpoints, then write: IMMEDIATE takes the write lock first (waiting on the busy
  // timeout). A deferred transaction whose snapshot another connection's commit made stale (a live
  // batch of the projection thread) fails its first write at once with SQLITE_BUSY.
  async startRebuild(projection: string): Promise<CheckpointInfo> {
    return this.exclusive(async () => this.db.transaction(() => {
      const live = this.slot(projection, 'live');
      if (!live) throw new Error(`unknown projection ${projection}`);
      const previous = this.slot(projection, 'rebuild');
      if (previous) this.dropTables(projection, previous.generation);
      const generation = Math.max(live.generation, previous?.generation ?? 0) + 1;
      this.prepare(`INSERT INTO rm_checkpoints (projection, slot, position, generation, updated_at) VALUES (?, 'rebuild', 0, ?, ?)
        ON CONFLICT (projection, slot) DO UPDATE SET position = 0, generation = excluded.generation, updated_at = excluded.updated_at`)
        .run(projection, generation, new Date().toISOString());
      this.createTables(projection, generation);
      return this.slot(projection, 'rebuild')!;
    }).immediate());
  }

  async rebuildCheckpoint(projection: string): Promise<CheckpointInfo | undefined> {
    return this.slot(projection, 'rebuild');
  }

  async finishRebuild(projection: string, options: { generation: number; stale?: Pick<CheckpointInfo, 'position' | 'generation'> }):
    Promise<{ swapped: boolean; live: CheckpointInfo; superseded?: true }> {
    return this.exclusive(async () => this.db.transaction(() => {
      const rebuilt = this.slot(projection, 'rebuild');
      const live = this.slot(projection, 'live');
      // Not the caller's generation (another start superseded it and dropped its tables): neither it nor the other is swapped in.
      if (live && rebuilt?.generation !== options.generation) return { swapped: false, live, superseded: true as const };
      if (!rebuilt || !live) throw new Error(`no rebuild in progress for ${projection}`);
      const stale = options.stale && live.position === options.stale.position && live.generation === options.stale.generation;
      // Checked in the swap's own transaction: a live batch commits either before (and is seen here) or
      // after (and is refused by its guarded checkpoint, so its runner re-reads from the rebuilt one).
      if (live.position > rebuilt.position && !stale) return { swapped: false, live };
      this.prepare(`UPDATE rm_checkpoints SET position = ?, generation = ?, updated_at = ?, failure = NULL WHERE projection = ? AND slot = 'live'`)
        .run(rebuilt.position, rebuilt.generation, new Date().toISOString(), projection);
      this.prepare(`DELETE FROM rm_checkpoints WHERE projection = ? AND slot = 'rebuild'`).run(projection);
      this.dropTables(projection, live.generation);
      this.liveTables.clear();
      return { swapped: true, live: this.slot(projection, 'live')! };
    }).immediate());
  }

  async abandonRebuild(projection: string, generation: number): Promise<void> {
    await this.exclusive(async () => this.db.transaction(() => {
      if (this.slot(projection, 'rebuild')?.generation !== generation || this.slot(projection, 'live')?.generation === generation) return;
      this.prepare(`DELETE FROM rm_checkpoints WHERE projection = ? AND slot = 'rebuild'`).run(projection);
      this.dropTables(projection, generation);
    }).immediate());
  }

  async close(): Promise<void> {
    await this.lock;
    if (this.checkpointer) {
      try {
        truncateWal(this.db); // the checkpointer thread's last checkpoint takes no writers' lock
      } catch { /* best effort, as the thread's */ }
    }
    if (this.reader !== this.db) this.reader.close();
    this.db.close();
    if (this.checkpointer) await stopCheckpointer(this.checkpointer);
  }
}

function toCheckpoint({ failure, paused_by: pausedBy, ...checkpoint }: CheckpointRow): CheckpointInfo {
  return {
    ...checkpoint,
    ...(failure !== null && { failure: JSON.parse(failure) as ProjectionFailure }),
    ...pauseFields(pausedBy === null ? null : JSON.parse(pausedBy) as StoredPauses),
  };
}

function tableName(collection: string, generation: number): string {
  return `rm_${collection}_g${generation}`;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * A value as it compares with what json_extract reads from the stored JSON. A number is stored as JavaScript writes it
 * (the shortest decimal that reads back as the same double), and SQLite reads an integer literal that fits in 64 bits
 * as that integer, exactly: past 2^53 (4585699287789486600) that is not the double bound for it (…592), so equality
 * missed the document, and a cursor on such a value repeated its last document for ever (or skipped its ties).
 * Bound as SQLite reads its JSON text, it compares as MongoDB's doubles do.
 */
function bindable(value: FieldValue): string | number | bigint | null {
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (typeof value === 'number' && Number.isInteger(value) && !Number.isSafeInteger(value) && Math.abs(value) < 1e21) {
    const exact = BigInt(String(value));
    if (exact >= INT64_MIN && exact <= INT64_MAX) return exact;
  }
  return value;
}

function whereSql(where: Where = {}, primaryKeyOrder = false): { sql: string; params: Array<string | number | bigint | null> } {
  const clauses = [primaryKeyOrder ? '+deleted = 0' : 'deleted = 0'];
  const params: Array<string | number | bigint | null> = [];
  for (const [field, condition] of Object.entries(where)) {
    if (!isQueryField(field)) throw new Error(`invalid field ${field}`);
    const expr = field === 'id' ? 'id' : `json_extract(doc, '$.${field}')`;
    if (condition !== null && typeof condition === 'object') {
      // `IN (NULL)` matches nothing in SQL; null matches null and missing, as `field: null` (and MongoDB's $in) does.
      const values = condition.$in.filter((v) => v !== null);
      const alternatives = values.length > 0 ? [`${expr} IN (${values.map(() => '?').join(', ')})`] : [];
      if (values.length < condition.$in.length) alternatives.push(`${expr} IS NULL`);
      clauses.push(alternatives.length === 0 ? '0' : `(${alternatives.join(' OR ')})`);
      params.push(...values.map(bindable));
    } else if (condition === null) {
      clauses.push(`${expr} IS NULL`);
    } else {
      clauses.push(`${expr} = ?`);
      params.push(bindable(condition));
    }
  }
  return { sql: clauses.join(' AND '), params };
}

function getPath(doc: Record<string, unknown>, path: string): FieldValue {
  let value: unknown = doc;
  for (const key of path.split('.')) value = (value as Record<string, unknown> | undefined)?.[key];
  return (value ?? null) as FieldValue;
}

function toDoc<T extends Doc>(row: Row): Stored<T> {
  return { ...(JSON.parse(row.doc) as T), _position: row.position };
}

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { Appender, openWritable, reviveError } from '../../infra/eventstore/embedded-appender.js';
import { StorageFullError } from '../../infra/eventstore/errors.js';
import type { AppendResult } from '../../infra/eventstore/port.js';
import { tempDir } from '../support/temp.js';

/**
 * The disk fills up in the middle of a group commit, not at its COMMIT: a batch larger than the connection's page cache
 * spills pages into the WAL while its statements run, and the write that fails there (SQLITE_FULL) rolls back the
 * whole transaction, not only the savepoint of the append that was running. The appends of that batch must all fail
 * as storage-full with nothing written; before, the appends after the failing one were each committed on their own,
 * outside the batch's transaction, and then reported as failed (an internal error): written, with a gap in the
 * positions, yet refused. A real, small filesystem (tmpfs) is filled with a file; mounting needs root (or
 * CAP_SYS_ADMIN): without it the test says so and skips.
 */
const mountPoint = mkdtempSync(join(tmpdir(), 'cairn-full-batch-'));
const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mountPoint], { encoding: 'utf8' });
t.teardown(() => {
  if (mounted.status === 0) spawnSync('umount', ['-l', mountPoint]);
  rmSync(mountPoint, { recursive: true, force: true });
});

const meta = { correlation_id: 'c', causation_id: 'c', actor: 't', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = (data: Record<string, unknown> = {}) => ({ id: randomUUID(), type: 'Written', data, metadata: meta });

t.test('a disk that fills up in the middle of a group commit: every append of the batch fails as storage-full, none is written',
  { skip: mounted.status === 0 ? false : `cannot mount a tmpfs here (${(mounted.stderr || mounted.error?.message || '').trim()})` }, async (t) => {
    const store = new EmbeddedEventStore(join(mountPoint, 'events.db'));
    t.teardown(() => store.close());
    const first = await store.append('before', [event()], 'no_stream');
    t.equal(first.position, 1);

    const free = () => Number(spawnSync('df', ['-k', '--output=avail', mountPoint], { encoding: 'utf8' }).stdout.split('\n')[1]) * 1024;
    const filler = join(mountPoint, 'filler');
    writeFileSync(filler, Buffer.alloc(Math.max(0, free() - 4 * 1024 * 1024)));

    // The first append goes to the idle writer at once; the next three wait for it and are committed together.
    // The large one (24 MB, past the 16 MB page cache better-sqlite3 gives a connection) spills into the WAL while it
    // is inserted and finds the disk full half-way.
    const settled = (p: Promise<AppendResult>) => p.then((r) => ({ ok: true as const, r }), (error: unknown) => ({ ok: false as const, error }));
    const lead = settled(store.append('lead', [event()], 'no_stream'));
    const small = settled(store.append('small-1', [event()], 'no_stream'));
    const large = settled(store.append('large', [event({ text: 'x'.repeat(24_000_000) })], 'no_stream'));
    const after = settled(store.append('small-2', [event()], 'no_stream'));
    const outcomes = await Promise.all([lead, small, large, after]);
    t.ok(outcomes[0]!.ok, 'the append committed before the large batch is written');

    const batch = outcomes.slice(1);
    for (const [i, outcome] of batch.entries()) {
      t.notOk(outcome.ok, `append ${i + 1} of the batch fails`);
      if (!outcome.ok) t.type(outcome.error, StorageFullError, `append ${i + 1} of the batch fails as storage-full (${String(outcome.error)})`);
    }
    const log = (await store.readAll(0)).map((e) => [e.position, e.stream]);
    t.strictSame(log, [[1, 'before'], [2, 'lead']], 'nothing of the failed batch is in the log');

    rmSync(filler);
    const resumed = await store.append('small-2', [event()], 'no_stream');
    t.equal(resumed.position, 3, 'once space is freed, the next append is written, right after the last one');
  });

/**
 * The same on any machine (no mount needed): the log's size limit (max_page_count, which SQLite also answers with
 * SQLITE_FULL) is reached by the second append of a group commit, on the writer thread's own code.
 */
t.test('a size limit reached in the middle of a group commit: the whole batch fails as storage-full, none of it is written', async (t) => {
  const db = new Database(join(tempDir(t), 'events.db'));
  t.teardown(() => db.close());
  openWritable(db);
  const appender = new Appender(db);
  const serialised = (id: string, text = '') => ({ id, type: 'Written', data: JSON.stringify({ text }), metadata: JSON.stringify(meta) });
  t.equal(appender.commit([{ stream: 'before', events: [serialised('e0')], expected: 'no_stream' }]).head, 1);
  db.pragma(`max_page_count = ${Number(db.pragma('page_count', { simple: true })) + 16}`);

  const result = appender.commit([
    { stream: 'small-1', events: [serialised('e1')], expected: 'no_stream' },
    { stream: 'large', events: [serialised('e2', 'x'.repeat(200_000))], expected: 'no_stream' },
    { stream: 'small-2', events: [serialised('e3')], expected: 'no_stream' },
  ]);
  t.equal(db.inTransaction, false, 'no transaction is left open');
  t.equal(result.head, 0, 'the batch moved the head not at all');
  t.strictSame(result.outcomes.map((o) => !o.ok && reviveError(o.error) instanceof StorageFullError), [true, true, true], 'every append of the batch fails as storage-full');
  t.strictSame(db.prepare('SELECT position, stream FROM events ORDER BY position').raw().all(), [[1, 'before']], 'nothing of the batch is in the log');
});

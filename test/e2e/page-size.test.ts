import Database from 'better-sqlite3';
import { join } from 'node:path';
import t from 'tap';
import { SCHEMA } from '../../infra/eventstore/embedded-appender.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { EventMetadata } from '../../infra/eventstore/port.js';
import { PAGE_SIZE } from '../../infra/page-size.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { tempDir } from '../support/temp.js';

/**
 * The embedded stores make their files with 1 KiB pages (infra/page-size.ts: a commit writes each page it changed in
 * full, so small pages write and fsync less). Files made before, with SQLite's default 4 KiB, keep their page size and
 * go on working: SQLite cannot change the page size of a file in WAL mode, and the setting must not try to.
 */
const meta: EventMetadata = { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2026-11-25T00:00:00.000Z' };
const pageSize = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return db.pragma('page_size', { simple: true }) as number;
  } finally {
    db.close();
  }
};

t.equal(PAGE_SIZE, 1024);

t.test('a new event log and a new read-model file have 1 KiB pages', async (t) => {
  const dir = tempDir(t, 'cairn-pages-');
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  await events.append('s-1', [{ id: crypto.randomUUID(), type: 'A', data: { text: 'x'.repeat(3_000) }, metadata: meta }], 'no_stream');
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  await reads.register('p', [{ name: 'docs' }]);
  t.equal(await reads.applyBatch('p', { position: 0, generation: 1 }, 1, async (w) => { await w.put('docs', { id: 'd', pad: 'y'.repeat(3_000) }, 1); }), true);
  t.equal(pageSize(join(dir, 'events.db')), 1024);
  t.equal(pageSize(join(dir, 'readmodels.db')), 1024);
  // Rows larger than a page (overflow pages) read back whole.
  t.equal(((await events.readStream('s-1'))[0]!.data as { text: string }).text.length, 3_000);
  t.equal((await reads.get<{ id: string; pad: string }>('docs', 'd'))?.pad.length, 3_000);
  await reads.close();
  await events.close();
});

t.test('files made with 4 KiB pages (before this setting) keep them, and are appended to and read as before', async (t) => {
  const dir = tempDir(t, 'cairn-pages-old-');
  const eventsFile = join(dir, 'events.db');
  const readsFile = join(dir, 'readmodels.db');
  // As an earlier version made them: SQLite's default page size, an event already in the log, a read model written.
  const old = new Database(eventsFile);
  old.pragma('journal_mode = WAL');
  old.exec(SCHEMA);
  old.prepare("INSERT INTO events VALUES (1, 'e-old', 's-1', 0, 'A', '{\"n\":0}', ?, '2026-11-24T00:00:00.000Z')").run(JSON.stringify(meta));
  old.prepare("INSERT INTO streams VALUES ('s-1', 0, 1, 1, 1, '2026-11-24T00:00:00.000Z', '2026-11-24T00:00:00.000Z')").run();
  old.close();
  const made = new Database(readsFile);
  made.pragma('journal_mode = WAL');
  made.exec('CREATE TABLE earlier (x)');
  made.close();
  t.equal(pageSize(eventsFile), 4096);
  t.equal(pageSize(readsFile), 4096);

  const events = new EmbeddedEventStore(eventsFile);
  const appended = await events.append('s-1', [{ id: 'e-new', type: 'A', data: { n: 1 }, metadata: meta }], 0);
  t.match(appended, { revision: 1, position: 2 });
  t.same((await events.readStream('s-1')).map((e) => e.data), [{ n: 0 }, { n: 1 }]);
  const reads = new EmbeddedReadStore(readsFile);
  await reads.register('p', [{ name: 'docs', indexes: [['n']] }]);
  t.equal(await reads.applyBatch('p', { position: 0, generation: 1 }, 2, async (w) => { await w.put('docs', { id: 'd', n: 7 }, 2); }), true);
  t.same((await reads.find<{ id: string; n: number }>('docs', { where: { n: 7 } })).items.map((d) => d.id), ['d']);
  await reads.close();
  await events.close();
  t.equal(pageSize(eventsFile), 4096, 'the event log keeps its page size');
  t.equal(pageSize(readsFile), 4096, 'the read-model file keeps its page size');
});

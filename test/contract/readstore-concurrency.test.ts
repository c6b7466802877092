import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';

/**
 * Another connection (the projection thread, the server while `ops projections rebuild` runs) commits
 * live batches all the time. A rebuild's start and swap read the checkpoints and then write: in a
 * deferred SQLite transaction a commit of the other connection in between makes the write fail at
 * once with SQLITE_BUSY (the snapshot is stale; the busy timeout does not apply).
 */
t.test('embedded: startRebuild and finishRebuild while another connection keeps committing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-readstore-busy-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'readmodels.db');
  const store = new EmbeddedReadStore(file, { checkpointer: false });
  t.teardown(() => store.close());
  await store.register('rebuilt', [{ name: 'rebuilt_docs' }]);
  await store.register('busy', [{ name: 'busy_docs' }]);

  // The other connection: live batches of `busy`, one commit after another, until told to stop.
  const stop = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(`
    const { workerData, parentPort } = require('node:worker_threads');
    const Database = require(workerData.sqlite);
    const db = new Database(workerData.file);
    db.pragma('busy_timeout = 5000');
    db.pragma('synchronous = NORMAL');
    const move = db.prepare("UPDATE rm_checkpoints SET position = position + 1, updated_at = ? WHERE projection = 'busy' AND slot = 'live'");
    const commit = db.transaction(() => move.run(new Date().toISOString())).immediate;
    parentPort.postMessage('started');
    let commits = 0;
    while (Atomics.load(workerData.stop, 0) === 0) { commit(); commits++; }
    db.close();
    parentPort.postMessage(commits);
  `, { eval: true, workerData: { file, stop, sqlite: createRequire(import.meta.url).resolve('better-sqlite3') } });
  const messages: unknown[] = [];
  const done = new Promise<number>((resolve, reject) => {
    worker.on('message', (m) => { messages.push(m); if (typeof m === 'number') resolve(m); });
    worker.on('error', reject);
  });
  await new Promise<void>((resolve) => worker.once('message', () => resolve()));

  let failure: unknown;
  let rounds = 0;
  try {
    for (; rounds < 300; rounds++) {
      const { generation } = await store.startRebuild('rebuilt');
      const { swapped } = await store.finishRebuild('rebuilt', { generation });
      if (!swapped) throw new Error(`generation ${generation} was not swapped in`);
    }
  } catch (error) {
    failure = error;
  } finally {
    Atomics.store(stop, 0, 1);
  }
  const commits = await done;
  await worker.terminate();
  t.ok(commits > 0, `the other connection committed meanwhile (${commits} commits)`);
  t.equal(failure, undefined, `every start and swap went through (${rounds} rounds)`);
  t.match(await store.checkpoint('rebuilt'), { generation: 1 + rounds }, 'each round swapped a new generation in');
});

/**
 * A batch's unit of work stays open while its projection awaits (MongoDB round trips; on the embedded
 * store, any awaited I/O in `apply`). A projection registered meanwhile on the same connection (runners
 * start one after another, while the first already applies) must not become part of that batch: when
 * the batch fails and rolls back, the registration would be undone with it.
 */
t.test('embedded: a registration during another projection\'s open batch survives that batch failing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-readstore-register-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const store = new EmbeddedReadStore(join(dir, 'readmodels.db'), { checkpointer: false });
  t.teardown(() => store.close());
  await store.register('first', [{ name: 'first_docs' }]);
  let opened!: () => void;
  const open = new Promise<void>((resolve) => { opened = resolve; });
  const failing = store.applyBatch('first', { position: 0, generation: 1 }, 5, async (w) => {
    await w.put('first_docs', { id: 'x' }, 5);
    opened();
    await new Promise((resolve) => setTimeout(resolve, 50)); // e.g. an embeddings call
    throw new Error('projection bug');
  });
  await open;
  await store.register('second', [{ name: 'second_docs' }]);
  await t.rejects(failing, /projection bug/);
  t.match(await store.checkpoint('first'), { position: 0 }, 'the failed batch left nothing');
  t.equal(await store.get('first_docs', 'x'), undefined);
  t.equal(await store.applyBatch('second', { position: 0, generation: 1 }, 7, async (w) => { await w.put('second_docs', { id: 'y' }, 7); }), true,
    'the projection registered meanwhile has its checkpoint');
  t.match(await store.get('second_docs', 'y'), { id: 'y', _position: 7 }, 'and its table');
});

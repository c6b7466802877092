import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { startCheckpointer } from '../../infra/threads.js';

/**
 * The read models' checkpointer thread runs at the lowest CPU priority (the projection thread's 10, plus 10). It cut a
 * WAL that had grown past its limit back with a TRUNCATE checkpoint, which holds the writers' lock while it copies,
 * fsyncs and truncates; under load the thread could be descheduled for seconds while holding it, and a batch of the
 * projection thread waited out its 5 s busy timeout: `SQLITE_BUSY: database is locked` at its BEGIN IMMEDIATE, an
 * error-level log line and a projection retrying after 1 s. Here the thread runs alone in a process of its own, which
 * is frozen (SIGSTOP) at many moments: the frozen thread must never hold the writers' lock.
 */
const WAL_LIMIT_BYTES = 64 * 1024;

if (process.argv[2] === 'child') {
  // The checkpointer thread as the read store starts it; the writer (the parent) truncates the WAL, not this process.
  startCheckpointer(process.argv[3]!, 1, { walLimitBytes: WAL_LIMIT_BYTES, truncate: () => { process.stdout.write('due\n'); } }).ref();
} else {
  const { default: t } = await import('tap');
  const { tempDir } = await import('../support/temp.js');

  t.test('a checkpointer thread frozen at any moment holds no lock a read-model batch waits for', { skip: process.platform !== 'linux' && 'needs /proc to see the frozen process' }, async (t) => {
    const file = join(tempDir(t, 'cairn-ckpt-lock-'), 'readmodels.db');
    const store = new EmbeddedReadStore(file, { checkpointer: false }); // the projection thread's writer
    await store.register('p', [{ name: 'docs' }]);
    let position = 0;
    let batches = 0;
    const batch = async (docs: number) => {
      batches++;
      const from = position;
      const applied = await store.applyBatch('p', { position: from, generation: 1 }, from + 1, async (writer) => {
        for (let i = 0; i < docs; i++) await writer.put('docs', { id: `d${i}`, body: 'x'.repeat(1000), batch: from + 1 }, from + 1);
      });
      if (applied) position = from + 1;
    };
    await batch(200);

    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'child', file], { stdio: ['ignore', 'pipe', 'inherit'] });
    let due = 0;
    child.stdout.on('data', (chunk: Buffer) => { due += chunk.toString().split('\n').filter((line) => line === 'due').length; });
    t.teardown(async () => {
      child.kill('SIGKILL');
      await store.close();
    });
    const frozen = () => readdirSync(`/proc/${child.pid}/task`)
      .every((task) => /^\d+ \(.*\) [tT] /.test(readFileSync(`/proc/${child.pid}/task/${task}/stat`, 'utf8')));
    const probe = new Database(file);
    t.teardown(() => probe.close());
    probe.pragma('busy_timeout = 0');

    // Once the thread has the file open; until it has found the WAL due for truncation (each batch grows it past the
    // limit again) and 200 freezes have been made.
    const opened = () => readdirSync(`/proc/${child.pid}/fd`).some((fd) => {
      try {
        return readlinkSync(`/proc/${child.pid}/fd/${fd}`) === file;
      } catch {
        return false;
      }
    });
    for (const started = Date.now(); !opened() && Date.now() - started < 30_000;) await new Promise((resolve) => setTimeout(resolve, 20));
    let freezes = 0;
    const held: string[] = [];
    for (const started = Date.now(); (due < 20 || freezes < 200) && Date.now() - started < 30_000 && held.length === 0;) {
      await batch(200);
      await new Promise((resolve) => setTimeout(resolve, freezes % 10));
      child.kill('SIGSTOP');
      while (!frozen()) await new Promise((resolve) => setImmediate(resolve));
      freezes++;
      try {
        probe.exec('BEGIN IMMEDIATE');
        probe.exec('ROLLBACK');
      } catch (error) {
        // Caught holding it: the batch that comes now waits for a thread that does not run.
        const waited = performance.now();
        const outcome = await batch(1).then(() => 'committed', (failure: Error & { code?: string }) => `failed (${failure.code}: ${failure.message})`);
        held.push(`${(error as Error).message}: a batch ${outcome} after ${Math.round(performance.now() - waited)} ms`);
      }
      child.kill('SIGCONT');
    }
    t.ok(due >= 20, `the thread found the WAL (limit ${WAL_LIMIT_BYTES} bytes) due for truncation ${due} times`);
    t.strictSame(held, [], `frozen ${freezes} times, it never held the writers' lock`);
    t.equal(position, batches, `every batch committed (${batches})`);
    t.equal(await store.count('docs', { batch: position }), 200, 'the last one whole');
  });

  t.test('the WAL a long read let grow is cut back by the store\'s own writer, and nothing is lost', async (t) => {
    const file = join(tempDir(t, 'cairn-ckpt-shrink-'), 'readmodels.db');
    const limit = 1024 * 1024;
    const store = new EmbeddedReadStore(file, { walLimitBytes: limit }); // with its checkpointer thread, as servers open it
    t.teardown(() => store.close());
    await store.register('p', [{ name: 'docs' }]);
    let position = 0;
    const batch = async () => {
      const from = position;
      const applied = await store.applyBatch('p', { position: from, generation: 1 }, from + 1, async (writer) => {
        for (let i = 0; i < 200; i++) await writer.put('docs', { id: `d${from}-${i}`, body: 'x'.repeat(1000) }, from + 1);
      });
      if (applied) position = from + 1;
    };

    // A long read (a backup, an operator's sqlite3 shell) holds its snapshot: no checkpoint can pass it, the WAL grows.
    const reader = new Database(file, { readonly: true });
    t.teardown(() => reader.close());
    reader.exec('BEGIN');
    t.equal((reader.prepare('SELECT count(*) AS n FROM rm_docs_g1').get() as { n: number }).n, 0, 'the long read holds its snapshot');
    for (let i = 0; i < 25; i++) await batch();
    const grown = statSync(`${file}-wal`).size;
    t.ok(grown > 4 * limit, `the WAL grew during the read (${grown} bytes)`);
    reader.exec('COMMIT');

    const deadline = Date.now() + 10_000;
    while (statSync(`${file}-wal`).size > limit && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    t.ok(statSync(`${file}-wal`).size <= limit, `the WAL is back under its limit (${statSync(`${file}-wal`).size} bytes)`);
    await batch();
    t.equal(await store.count('docs'), 200 * 26, 'nothing lost, and batches go on');
  });
}

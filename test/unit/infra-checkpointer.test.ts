import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Worker } from 'node:worker_threads';
import { startWorker, truncateWal } from '../../infra/threads.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';

/** The checkpointer thread, as the stores start it. */
const checkpointerThread = (data: { file: string; intervalMs: number; walLimitBytes?: number; logLevel?: string }) =>
  startWorker(import.meta.url, '../../infra/checkpointer', data);

/** Asks it to close, as the stores do; answers 'closed', or 'no answer' after `ms` (its 'truncate' requests are no answer). */
const close = (worker: Worker, ms = 5_000) => new Promise<string>((resolve) => {
  const timer = setTimeout(() => resolve('no answer'), ms);
  worker.on('message', (message: string) => { if (message !== 'truncate') { clearTimeout(timer); resolve(message); } });
  worker.postMessage('close');
});

if (process.argv[2] === 'child') {
  // Run as a process of its own (below), so what the thread logs can be read from its stdout.
  const worker = checkpointerThread({ file: process.argv[3]!, intervalMs: 20 });
  worker.on('error', (error) => { process.stdout.write(`worker error: ${error.message}\n`); });
  process.stdout.write(`${await close(worker)}\n`);
  await worker.terminate();
} else {
  const { default: t } = await import('tap');
  const temp = () => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-checkpointer-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  };

  t.test('the WAL a long read let grow is cut back once the read ends', async (t) => {
    const file = join(temp(), 'grow.db');
    const writer = new Database(file);
    writer.pragma('journal_mode = WAL');
    writer.pragma('wal_autocheckpoint = 0'); // as the stores' writers: checkpoints are the thread's job
    writer.exec('CREATE TABLE t (x BLOB)');
    const checkpointer = checkpointerThread({ file, intervalMs: 10, walLimitBytes: 1024 * 1024, logLevel: 'silent' });
    checkpointer.on('error', (error) => t.fail(`checkpointer failed: ${error.message}`));
    // The writing connection truncates when the thread says the WAL is due, as the stores' do (startCheckpointer).
    checkpointer.on('message', (message: string) => { if (message === 'truncate') truncateWal(writer); });

    // A long read (an export, a rebuild) holds its snapshot: no checkpoint can pass it, the WAL grows.
    const reader = new Database(file, { readonly: true });
    reader.exec('BEGIN');
    t.equal((reader.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 0);
    const insert = writer.prepare('INSERT INTO t VALUES (randomblob(1000))');
    for (let i = 0; i < 3_000; i++) insert.run();
    const grown = statSync(`${file}-wal`).size;
    t.ok(grown > 4 * 1024 * 1024, `the WAL grew during the read (${grown} bytes)`);
    reader.exec('COMMIT');

    const deadline = Date.now() + 5_000;
    while (statSync(`${file}-wal`).size > 1024 * 1024 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    t.ok(statSync(`${file}-wal`).size <= 1024 * 1024, `the WAL is back under its limit (${statSync(`${file}-wal`).size} bytes)`);
    insert.run();
    t.equal((reader.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 3_001, 'nothing lost, and writes go on');
    t.equal(await close(checkpointer), 'closed');
    await checkpointer.terminate();
    reader.close();
    writer.close();
  });

  t.test('a checkpointer that cannot open its file says so, and still answers a close', async (t) => {
    const dir = temp();
    const file = join(dir, 'gone', 'missing.db'); // in a directory that is not there either
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'child', file], {
      stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' },
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString(); });
    child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    clearTimeout(timer);
    const lines = out.split('\n').filter((line) => line !== '');
    t.equal(code, 0, out);
    t.same(lines.filter((line) => !line.startsWith('{')), ['closed'], 'the close is answered; the thread did not die');
    const logged = lines.filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>);
    t.match(logged, [{ level: 50, thread: 'checkpointer', file, msg: /could not open the database/, err: { message: /missing\.db|does not exist|unable to open/i } }], 'the failure is logged');
    t.notOk(existsSync(file), 'no empty database made where none was');
  });

  t.test('a read store whose checkpointer thread has ended still closes (the event log\'s writer stops it the same way)', async (t) => {
    const dir = temp();
    const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
    await (reads as unknown as { checkpointer: Worker }).checkpointer.terminate();
    const closed = await Promise.race([reads.close().then(() => 'closed'), new Promise((r) => setTimeout(r, 5_000, 'hung'))]);
    t.equal(closed, 'closed', 'the read store closes without the thread\'s answer');
  });
}

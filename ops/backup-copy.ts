/**
 * The copying half of `ops backup` (see backup.ts), run as a process of its own so that a stop signal ends a copy
 * at once: VACUUM INTO is one native call, which nothing in the process running it can interrupt (better-sqlite3
 * has no sqlite3_interrupt, and a worker thread inside a native call holds its process open until it returns).
 *
 * Arguments: LOCK, the backup's lock file, then SOURCE TARGET pairs, copied in that order. Each ends fsynced and
 * checked; a failure is one line on stderr and exit code 1.
 */
import Database from 'better-sqlite3';
import { closeSync, fsyncSync, openSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { likeSource } from '../infra/backup-files.js';

/**
 * Ends this process as soon as the backup's own does, however that ended (kill -9 included), so that no copy goes
 * on writing into a directory that another backup may then take: stdin is a pipe whose other end only that process
 * holds, and which the system closes when it ends. A worker watches it: this thread is in VACUUM INTO.
 */
function endWithParent(): void {
  const watch = `const end = () => process.kill(process.pid, 'SIGKILL');
    new (require('node:net').Socket)({ fd: 0, readable: true }).on('end', end).on('error', end).resume();`;
  new Worker(watch, { eval: true, execArgv: [] }).unref();
}

/**
 * A shared lock on the backup's lock file (see lockDirectory in backup.ts), held until this process ends: should
 * the backup's own process die first, another backup still cannot take the directory while this one writes there.
 */
function holdLock(file: string): Database.Database {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  db.exec('BEGIN');
  db.prepare('SELECT COUNT(*) FROM holder').get();
  return db;
}

/**
 * VACUUM INTO on a read connection copies one read transaction's snapshot: the server's writer goes on (WAL), and
 * its commits do not restart the copy, as they restart the online backup API's when made by another connection.
 */
function copy(source: string, target: string): void {
  const db = new Database(source, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    db.prepare('VACUUM INTO ?').run(target);
  } catch (error) {
    throw new Error(`copying ${source} failed: ${(error as Error).message}`);
  } finally {
    db.close();
  }
  // Until then the copy is private: the umask (see below) makes SQLite create it, and its journal, 0600.
  likeSource(source, target);
  const fd = openSync(target, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  const copied = new Database(target, { readonly: true, fileMustExist: true });
  try {
    const answer = (copied.pragma('quick_check') as Array<{ quick_check: string }>).map((row) => row.quick_check);
    if (answer.join() !== 'ok') throw new Error(`the copy of ${source} failed its integrity check: ${answer.slice(0, 3).join('; ')}`);
  } finally {
    copied.close();
  }
}

const [lock, ...pairs] = process.argv.slice(2);
let held: Database.Database | undefined;
try {
  process.umask(0o077);
  endWithParent();
  held = holdLock(lock!);
  for (let i = 0; i + 1 < pairs.length; i += 2) copy(pairs[i]!, pairs[i + 1]!);
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
} finally {
  held?.close();
}

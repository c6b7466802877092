import Database from 'better-sqlite3';
import { SingleBar } from 'cli-progress';
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, chownSync, closeSync, existsSync, fsyncSync, lstatSync, mkdirSync, openSync, readdirSync, readlinkSync, renameSync, rmdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { loadConfig, type Config } from '../infra/config.js';
import { digest, EVENT_LOG, LEFTOVER, likeSource, LOCK, MANIFEST, MANIFEST_VERSION, partial, READ_MODELS, written, type Manifest } from '../infra/backup-files.js';
import { verifyBackupCommand } from './backup-verify.js';
import { count, notice, printJson, printTable } from './output.js';
import { cairnVersion, OpsError, operatorPath, requireEventLog, stopOnSignals } from './runtime.js';

interface Backup {
  dir: string;
  files: Array<{ file: string; bytes: number; sha256: string }>;
  /** The manifest written last (see MANIFEST), and its own SHA-256: recorded apart from the backup, it proves later that the manifest is unchanged. */
  manifest: { file: string; sha256: string };
  /** Read from the copy: its last position, and how many events it holds. */
  head: number;
  events: number;
  elapsed_ms: number;
  /** What a backup into the same directory that did not finish had left there, removed before this one. */
  leftover_removed: string[];
}

export function backupCommands(program: Command): void {
  program.command('backup').description('copy the embedded event log (and the read models) into a new directory, while the server runs')
    .argument('<dir>', 'where the backup goes: a directory that does not exist yet, an empty one, or one a killed backup left')
    .option('--read-models', 'copy the read models too (without it, a server started on the backup rebuilds them from the log)')
    .option('--json', 'print JSON')
    .addHelpText('after', `
The backup is itself a DATA_DIR. To restore: check it with \`ops verify-backup DIR\`, stop the server, copy it
(\`cp -a DIR NEW\`: a server run on the backup itself changes it, and verify-backup no longer passes it), point DATA_DIR
at the copy (or copy its files into place, deleting the -wal and -shm files of the old ones), and start it. Its
files get the permissions of those they copy (run as root, their owner too), and a DIR it creates gets DATA_DIR's.
The embedded event log only: with EVENTSTORE_URL set, back EventStoreDB up with its own tools (with MONGODB_URL,
--read-models is refused).

Last, it writes ${MANIFEST}: each file's name, size and SHA-256, the log's last position, the time and the version
of Cairn. \`ops verify-backup DIR\` compares the files with it; the manifest's own SHA-256 is printed, to be recorded
apart from the backup.

While it runs, the backup holds ${LOCK} in DIR: another backup into DIR is refused, naming its pid. What a backup
that did not finish (kill -9, a crash, a power loss) left in DIR is removed by the next backup into it, which says so.

Exit code: 0 when the backup is written; 1 when it was refused or failed, 130, 143 or 129 when SIGINT, SIGTERM or
SIGHUP stopped it (and then nothing of it is left).`)
    .action(async (dir: string, opts: { readModels?: boolean; json?: boolean }) => {
      // As `projections rebuild`: a bar on a terminal, nothing in scripts and logs.
      const result = await backup(operatorPath(dir), opts.readModels === true, !opts.json && process.stderr.isTTY === true);
      if (opts.json) return printJson(result);
      printTable(result.files, ['file', 'bytes', 'sha256']);
      process.stdout.write(`backup in ${result.dir}: the event log up to position ${result.head} (${count(result.events, 'event')}), `
        + `copied in ${(result.elapsed_ms / 1000).toFixed(1)} s\n`
        + `manifest ${result.manifest.file}: SHA-256 ${result.manifest.sha256}\n`);
    });
  verifyBackupCommand(program);
}

/**
 * Copies the read models before the log: in the backup they are never ahead of its log (a server would refuse
 * them), only behind, and catch up at start. If anything fails or a stop signal comes, what was written goes.
 */
async function backup(target: string, readModels: boolean, progress = false): Promise<Backup> {
  const started = new Date();
  const config = loadConfig();
  refuseServers(config, readModels);
  requireEventLog(config.dataDir);
  if (readModels && !existsSync(join(config.dataDir, READ_MODELS))) {
    throw new OpsError(`no read models in ${config.dataDir} (${READ_MODELS}) to copy; leave out --read-models`);
  }
  const files = readModels ? [READ_MODELS, EVENT_LOG] : [EVENT_LOG];
  const stop = stopOnSignals(`backup into ${target} interrupted; nothing of it is left`);
  try {
    const taken = takeDirectory(target, config.dataDir);
    try {
      await copyDatabases(join(target, LOCK), files.map((file) => [join(config.dataDir, file), join(target, partial(file))]), stop.signal, progress);
      for (const file of files) renameSync(join(target, partial(file)), join(target, file));
      const log = logFacts(join(target, EVENT_LOG));
      const listed: Manifest['files'] = [];
      for (const file of files) listed.push({ file, ...(await digest(join(target, file), stop.signal)) });
      stop.signal.throwIfAborted();
      const manifest = writeManifest(target, {
        manifest_version: MANIFEST_VERSION, cairn_version: cairnVersion(), started_at: started.toISOString(), finished_at: new Date().toISOString(),
        ...log, files: listed,
      }, join(config.dataDir, EVENT_LOG));
      stop.signal.throwIfAborted();
      rmSync(join(target, LOCK));
      fsyncPath(target);
      if (taken.created) fsyncPath(dirname(target));
      return {
        dir: target, files: listed, manifest: { file: MANIFEST, sha256: manifest }, ...log,
        elapsed_ms: Date.now() - started.getTime(), leftover_removed: taken.leftover,
      };
    } catch (error) {
      removeBackup(target, taken.created, files);
      throw stop.signal.aborted ? stop.signal.reason : error;
    } finally {
      taken.release();
    }
  } finally {
    stop.release();
  }
}

/**
 * EventStoreDB holds the log itself: a copy of DATA_DIR would hold none of it. With MongoDB read models the log is
 * still the embedded one, and it is all a backup needs (read models are rebuilt from it); only --read-models is refused.
 */
function refuseServers(config: Config, readModels: boolean): void {
  if (config.eventStoreUrl) {
    throw new OpsError('EVENTSTORE_URL is set: backup copies only the embedded event log in DATA_DIR; back EventStoreDB up with its own tools '
      + '(its file-copy backup); the read models need no backup: they are rebuilt from the log');
  }
  if (config.mongodbUrl && readModels) {
    throw new OpsError('MONGODB_URL is set: the read models are in MongoDB, not in DATA_DIR; leave out --read-models '
      + '(they are rebuilt from the log), or use mongodump');
  }
}

/**
 * The directory, locked for this backup and emptied of what a backup that did not finish left there; created: made
 * here (and so removed on failure). A refusal leaves the directory as it was.
 */
function takeDirectory(dir: string, dataDir: string): { created: boolean; leftover: string[]; release: () => void } {
  const created = prepareDirectory(dir, dataDir);
  let lock: ReturnType<typeof lockDirectory>;
  try {
    lock = lockDirectory(dir);
  } catch (error) {
    if (created) removeIfEmpty(dir);
    throw error;
  }
  try {
    return { created, leftover: removeLeftover(dir, lock.inherited), release: lock.release };
  } catch (error) {
    if (!lock.inherited) rmSync(join(dir, LOCK), { force: true });
    lock.release();
    if (created) removeIfEmpty(dir);
    throw error;
  }
}

/**
 * A new or empty directory, so that the backup is all it holds, or one with a backup's lock file and nothing but
 * what a backup writes (see removeLeftover); true if made here, with DATA_DIR's permissions (and, run as root, its
 * owner: a server restored onto the backup runs as the account that owns DATA_DIR), as its files get their
 * originals' (see backup-copy.ts). Checked before the lock is taken, so that a refusal writes nothing, and again
 * under it.
 */
function prepareDirectory(dir: string, dataDir: string): boolean {
  if (!existsSync(dir)) {
    if (!existsSync(dirname(dir))) throw new OpsError(`cannot create ${dir}: ${dirname(dir)} does not exist`);
    // (existsSync follows a symbolic link: one to a path that does not exist is there, and cannot be made a directory.)
    if (lstatSync(dir, { throwIfNoEntry: false })?.isSymbolicLink()) {
      throw new OpsError(`cannot create ${dir}: it is a symbolic link to ${readlinkSync(dir)}, which does not exist; create that directory, or give another DIR`);
    }
    const { mode, uid, gid } = statSync(dataDir);
    mkdirSync(dir, { mode: 0o700 });
    try {
      chmodSync(dir, (mode & 0o777) | 0o700);
      if (process.getuid?.() === 0) chownSync(dir, uid, gid);
    } catch (error) {
      rmdirSync(dir);
      throw error;
    }
    return true;
  }
  if (!statSync(dir).isDirectory()) throw new OpsError(`${dir} is not a directory`);
  const entries = readdirSync(dir);
  if (entries.length > 0 && !(entries.includes(LOCK) && entries.every((name) => LEFTOVER.has(name)))) throw notEmpty(dir);
  return false;
}

const notEmpty = (dir: string) => new OpsError(`${dir} is not empty: a backup goes into a new or an empty directory`);

/**
 * Under the lock, what the directory holds besides the lock file: nothing, or, when the lock file was there
 * before this backup, what a backup that died left (its holder is gone, or the lock would not have been free):
 * removed, and said so. Anything else may be someone's, and is refused untouched; so is a backup without its lock
 * file (a finished one, or one of a version that wrote none).
 */
function removeLeftover(dir: string, inherited: boolean): string[] {
  const entries = readdirSync(dir).filter((name) => name !== LOCK).sort();
  if (entries.length === 0) return [];
  if (!inherited || !entries.every((name) => LEFTOVER.has(name))) throw notEmpty(dir);
  for (const name of entries) rmSync(join(dir, name));
  notice(`removed what a backup into ${dir} that did not finish (killed, or its machine stopped) left there: ${entries.join(', ')}`);
  return entries;
}

interface Holder { pid: number; host: string; started_at: string; token: string }

/**
 * The lock a backup holds on its directory for as long as a process of it may write there, so that another backup
 * can tell a running backup from the leftover of one that was killed. It is SQLite's lock on the file LOCK (POSIX
 * advisory locks), which the operating system releases when its process ends, however it ends: a lock file left
 * behind is then free, and no pid, which another process may have taken since (after a reboot, say), is trusted.
 *
 * This process and its copying process each hold a shared lock (an open read transaction). A backup takes the
 * directory with the exclusive lock, which it gets only when no process of another backup is alive; it writes
 * who it is into the file, for one refused to name, and from then on holds a shared lock. If another backup took
 * the exclusive lock between the two and wrote itself in, that one holds the directory.
 *
 * A backup removes the lock file when it ends, so one that opened the file just before then gets the lock of a file
 * that is gone: once it has the lock, it checks that the file it opened is still the one in the directory.
 * Nothing else in this process may open the lock file: closing any descriptor of it would drop the lock.
 *
 * inherited: the lock file was there before this backup.
 */
function lockDirectory(dir: string): { inherited: boolean; release: () => void } {
  const path = join(dir, LOCK);
  let made = false;
  for (;;) {
    const opened = fileId(path);
    if (opened === undefined) {
      made = createEmpty(path) || made;
      continue;
    }
    let db: Database.Database | undefined;
    try {
      db = new Database(path, { fileMustExist: true, timeout: 0 });
      db.exec('BEGIN EXCLUSIVE');
      if (fileId(path) !== opened) {
        db.close();
        continue;
      }
      const token = randomUUID();
      db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER, host TEXT, started_at TEXT, token TEXT); DELETE FROM holder');
      db.prepare('INSERT INTO holder VALUES (?, ?, ?, ?)').run(process.pid, hostname(), new Date().toISOString(), token);
      db.exec('COMMIT; BEGIN');
      const holder = readHolder(db);
      if (holder?.token !== token) throw running(dir, holder);
      const held = db;
      return { inherited: !made, release: () => held.close() };
    } catch (error) {
      const busy = (error as { code?: string }).code === 'SQLITE_BUSY';
      const holder = busy ? readHolder(db!) : undefined;
      db?.close();
      if (db === undefined && fileId(path) === undefined) continue;
      if (error instanceof OpsError) throw error;
      throw busy ? running(dir, holder) : new OpsError(`cannot lock ${path}: ${(error as Error).message}`);
    }
  }
}

/** Who holds the lock, as it wrote itself into the file (waiting for one that is writing). */
function readHolder(db: Database.Database): Holder | undefined {
  db.pragma('busy_timeout = 2000');
  try {
    return db.prepare<[], Holder>('SELECT pid, host, started_at, token FROM holder').get();
  } catch {
    return undefined;
  }
}

function running(dir: string, holder: Holder | undefined): OpsError {
  const who = holder ? ` (pid ${holder.pid} on ${holder.host}, started ${holder.started_at})` : '';
  return new OpsError(`another backup is writing into ${dir}${who}: wait for it to end, or stop it`);
}

/** Device and inode: what a file is, whatever its name (of a symbolic link, the link's). */
function fileId(path: string): string | undefined {
  const stats = lstatSync(path, { throwIfNoEntry: false });
  return stats && `${stats.dev}:${stats.ino}`;
}

/** True if this call made the file. */
function createEmpty(path: string): boolean {
  try {
    closeSync(openSync(path, 'wx'));
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}

/**
 * Runs backup-copy.ts on LOCK SOURCE TARGET..., in its own process group: a Ctrl-C reaches this process only,
 * which kills the copy at once (see backup-copy.ts for why it is a process of its own). It gets a pipe for stdin
 * that this process never writes: it ends the copy when the pipe closes, that is when this process ends, however.
 */
async function copyDatabases(lock: string, pairs: string[][], signal: AbortSignal, progress = false): Promise<void> {
  signal.throwIfAborted();
  const fromSources = import.meta.url.endsWith('.ts');
  const script = fileURLToPath(new URL(`./backup-copy.${fromSources ? 'ts' : 'js'}`, import.meta.url));
  const loader = fromSources ? ['--import', import.meta.resolve('tsx')] : [];
  const child = spawn(process.execPath, [...loader, script, lock, ...pairs.flat()], { stdio: ['pipe', 'ignore', 'pipe'], detached: true });
  const kill = () => child.kill('SIGKILL');
  signal.addEventListener('abort', kill, { once: true });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text; });
  const bar = progress ? copyProgress(pairs) : undefined;
  try {
    const [code, ended] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    signal.throwIfAborted();
    if (code !== 0) throw new OpsError(stderr.trim().split('\n').at(-1) || `copying failed: the copying process ${code === null ? `was ended by ${ended}` : `exited with ${code}`}`);
    bar?.done();
  } finally {
    bar?.stop();
    signal.removeEventListener('abort', kill);
  }
}

const MB = 1024 * 1024;

/**
 * A progress bar on stderr for the copies: what the copies hold so far, read from their files' sizes four times a
 * second, against what the originals hold (their files and WALs: about what VACUUM INTO writes, which leaves out free
 * pages and takes in the WAL's newer ones, so "about", and never shown past 99% before the copy ends).
 */
function copyProgress(pairs: string[][]): { done(): void; stop(): void } {
  const size = (path: string) => { try { return statSync(path).size; } catch { return 0; } };
  const total = Math.max(1, pairs.reduce((sum, [source]) => sum + size(source!) + size(`${source}-wal`), 0));
  const copied = () => pairs.reduce((sum, [, target]) => sum + size(target!), 0);
  const bar = new SingleBar({ stream: process.stderr, format: 'copying [{bar}] {percentage}% | {mb} MB of about {total_mb} MB | {duration_formatted}' });
  const show = (value: number) => bar.update(value, { mb: (value / MB).toFixed(1) });
  bar.start(total, 0, { mb: '0.0', total_mb: (total / MB).toFixed(1) });
  const timer = setInterval(() => show(Math.min(copied(), Math.floor(total * 0.99))), 250);
  return {
    done: () => show(total),
    stop: () => {
      clearInterval(timer);
      bar.stop();
    },
  };
}

/**
 * The manifest, durably: written under a name no reader takes for it, fsynced, renamed, and the rename fsynced before
 * the lock goes (so that no crash can leave a backup without its lock and without its manifest). It gets the
 * permissions of the log it describes. Returns its SHA-256.
 */
function writeManifest(dir: string, manifest: Manifest, log: string): string {
  const text = `${JSON.stringify(manifest, null, 2)}\n`;
  const temp = join(dir, partial(MANIFEST));
  const fd = openSync(temp, 'wx', 0o600);
  try {
    writeFileSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  likeSource(log, temp);
  renameSync(temp, join(dir, MANIFEST));
  fsyncPath(dir);
  return createHash('sha256').update(text).digest('hex');
}

/** A rename or a new directory entry is durable once its directory is fsynced. */
function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function logFacts(file: string): { head: number; events: number } {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.prepare<[], { head: number; events: number }>('SELECT COALESCE(MAX(position), 0) AS head, COUNT(*) AS events FROM events').get()!;
  } finally {
    db.close();
  }
}

/**
 * What this backup wrote, lock file included (VACUUM INTO's journals too), and the directory if it made it. Named
 * one by one: whatever else is in the directory is not the backup's.
 */
function removeBackup(dir: string, created: boolean, files: string[]): void {
  for (const name of written(files)) rmSync(join(dir, name), { force: true });
  if (created) removeIfEmpty(dir);
}

function removeIfEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOTEMPTY') throw error;
  }
}

import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { loadConfig, type Config } from '../infra/config.js';
import { count, printJson, printTable } from './output.js';
import { OpsError, requireEventLog, stopOnSignals } from './runtime.js';

const EVENT_LOG = 'events.db';
const READ_MODELS = 'readmodels.db';

/** Where a file is copied before it is checked and renamed: a name no server opens. */
const partial = (file: string) => `${file}.partial`;

interface Backup {
  dir: string;
  files: Array<{ file: string; bytes: number }>;
  /** Read from the copy: its last position, and how many events it holds. */
  head: number;
  events: number;
  elapsed_ms: number;
}

export function backupCommands(program: Command): void {
  program.command('backup').description('copy the embedded event log (and the read models) into a new directory, while the server runs')
    .argument('<dir>', 'where the backup goes: a directory that does not exist yet, or an empty one')
    .option('--read-models', 'copy the read models too (without it, a server started on the backup rebuilds them from the log)')
    .option('--json', 'print JSON')
    .addHelpText('after', `
The backup is itself a DATA_DIR. To restore: stop the server, point DATA_DIR at the backup (or move its files into
place, deleting the -wal and -shm files of the old ones), and start it. The embedded event log only: with
EVENTSTORE_URL set, back EventStoreDB up with its own tools (with MONGODB_URL, --read-models is refused).

Exit code: 0 when the backup is written; 1 when it was refused or failed, 130, 143 or 129 when SIGINT, SIGTERM or
SIGHUP stopped it (and then nothing of it is left).`)
    .action(async (dir: string, opts: { readModels?: boolean; json?: boolean }) => {
      const result = await backup(resolve(dir), opts.readModels === true);
      if (opts.json) return printJson(result);
      printTable(result.files, ['file', 'bytes']);
      process.stdout.write(`backup in ${result.dir}: the event log up to position ${result.head} (${count(result.events, 'event')}), `
        + `copied in ${(result.elapsed_ms / 1000).toFixed(1)} s\n`);
    });
}

/**
 * Copies the read models before the log: in the backup they are never ahead of its log (a server would refuse
 * them), only behind, and catch up at start. If anything fails or a stop signal comes, what was written goes.
 */
async function backup(target: string, readModels: boolean): Promise<Backup> {
  const started = Date.now();
  const config = loadConfig();
  refuseServers(config, readModels);
  requireEventLog(config.dataDir);
  if (readModels && !existsSync(join(config.dataDir, READ_MODELS))) {
    throw new OpsError(`no read models in ${config.dataDir} (${READ_MODELS}) to copy; leave out --read-models`);
  }
  const files = readModels ? [READ_MODELS, EVENT_LOG] : [EVENT_LOG];
  const stop = stopOnSignals(`backup into ${target} interrupted; nothing of it is left`);
  try {
    const created = prepareDirectory(target);
    try {
      await copyDatabases(files.map((file) => [join(config.dataDir, file), join(target, partial(file))]), stop.signal);
      for (const file of files) renameSync(join(target, partial(file)), join(target, file));
      fsyncPath(target);
      if (created) fsyncPath(dirname(target));
      const log = logFacts(join(target, EVENT_LOG));
      stop.signal.throwIfAborted();
      return { dir: target, files: files.map((file) => ({ file, bytes: statSync(join(target, file)).size })), ...log, elapsed_ms: Date.now() - started };
    } catch (error) {
      removeBackup(target, created, files);
      throw stop.signal.aborted ? stop.signal.reason : error;
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

/** A new or empty directory, so that the backup is all it holds; true if made here (and so removed on failure). */
function prepareDirectory(dir: string): boolean {
  if (!existsSync(dir)) {
    if (!existsSync(dirname(dir))) throw new OpsError(`cannot create ${dir}: ${dirname(dir)} does not exist`);
    mkdirSync(dir);
    return true;
  }
  if (!statSync(dir).isDirectory()) throw new OpsError(`${dir} is not a directory`);
  if (readdirSync(dir).length > 0) throw new OpsError(`${dir} is not empty: a backup goes into a new or an empty directory`);
  return false;
}

/**
 * Runs backup-copy.ts on SOURCE TARGET pairs, in its own process group: a Ctrl-C reaches this process only,
 * which kills the copy at once (see backup-copy.ts for why it is a process of its own).
 */
async function copyDatabases(pairs: string[][], signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  const fromSources = import.meta.url.endsWith('.ts');
  const script = fileURLToPath(new URL(`./backup-copy.${fromSources ? 'ts' : 'js'}`, import.meta.url));
  const loader = fromSources ? ['--import', import.meta.resolve('tsx')] : [];
  const child = spawn(process.execPath, [...loader, script, ...pairs.flat()], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  const kill = () => child.kill('SIGKILL');
  signal.addEventListener('abort', kill, { once: true });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text; });
  try {
    const [code, ended] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    signal.throwIfAborted();
    if (code !== 0) throw new OpsError(stderr.trim().split('\n').at(-1) || `copying failed: the copying process ${code === null ? `was ended by ${ended}` : `exited with ${code}`}`);
  } finally {
    signal.removeEventListener('abort', kill);
  }
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

/** What this backup wrote: the directory if it made it, otherwise each of its files (VACUUM INTO's journal too). */
function removeBackup(dir: string, created: boolean, files: string[]): void {
  if (created) return rmSync(dir, { recursive: true, force: true });
  for (const file of files) {
    for (const name of [file, partial(file), `${partial(file)}-journal`]) rmSync(join(dir, name), { force: true });
  }
}

import type { TSchema } from 'typebox';
import { ProblemError } from '../api/http/problem.js';
import { Validator } from '../api/http/validation.js';
import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { InvalidArgumentError } from 'commander';
import type { RequestMeta } from '../commands/bus.js';
import { loadConfig, type Config } from '../infra/config.js';
import type { EventStore } from '../infra/eventstore/port.js';
import type { ReadStore } from '../infra/readstore/port.js';
import { REPEATED_SIGNAL_MS } from '../infra/signals.js';
import { EVENT_LOG, MANIFEST } from '../infra/backup-files.js';
import { shellWord } from './output.js';
import { closeStores, openEventStore, openStores } from '../infra/stores.js';

/**
 * An operator mistake (unknown name, missing project…), an interruption, or what a script must act on (a failing
 * projection): printed as one line, exit code 1 unless given.
 */
export class OpsError extends Error {
  override readonly name = 'OpsError';
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}

/**
 * Checks CLI input against the API's own request schema, so the CLI cannot create what the API would
 * refuse. `options` maps schema fields to the option names shown in the error.
 */
export function validateAsApi(schema: TSchema, value: Record<string, unknown>, options: Record<string, string>): void {
  try {
    new Validator(schema, 'body').parse(value);
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    const problems = (error.extra.errors ?? []).map((e) => {
      const field = e.location.replace(/^body\.?/, '').split('.')[0] ?? '';
      return `${options[field] ?? field}: ${e.message}`;
    });
    throw new OpsError(problems.join('; ') || error.message);
  }
}

export interface Stores {
  events: EventStore;
  reads: ReadStore;
}

/**
 * The server's configuration for one command. Only `create` (bootstrapping a new data dir) may start an embedded
 * log: anywhere else a DATA_DIR without one is a mistyped path, which would otherwise show an empty log and leave
 * new files behind.
 */
function storesConfig(options: { create?: boolean }): Config {
  const config = loadConfig();
  if (!config.eventStoreUrl && !options.create) requireEventLog(config.dataDir);
  if (!config.eventStoreUrl) refuseBackupAsTaken(config.dataDir);
  // Allowed (a new deployment's first project), but said: with DATA_DIR unset or mistyped, the project would go into a
  // log no server reads, and the command would look as if it had worked.
  if (!config.eventStoreUrl && options.create && !hasEventLog(config.dataDir)) {
    process.stderr.write(`note: no event log in ${config.dataDir}; creating a new one (set DATA_DIR to the server's data directory unless this is a new deployment)\n`);
  }
  return config;
}

/**
 * Opens the same stores as the server (DATA_DIR / EVENTSTORE_URL / MONGODB_URL) for one command, and closes them.
 * Most commands only read the log: its writer thread starts only for one that appends.
 */
export async function withStores<T>(fn: (stores: Stores) => Promise<T>, options: { create?: boolean } = {}): Promise<T> {
  const stores = await openStores(storesConfig(options), { appends: false });
  try {
    return await fn(stores);
  } finally {
    await closeStores(stores);
  }
}

/**
 * As withStores, for commands that need the event log only: they keep working while the read store is
 * unreachable or damaged (a MongoDB outage), which is when an operator needs to look at the log.
 */
export async function withEventLog<T>(fn: (events: EventStore) => Promise<T>, options: { create?: boolean } = {}): Promise<T> {
  const events = await openEventStore(storesConfig(options), { appends: false });
  try {
    return await fn(events);
  } finally {
    await events.close();
  }
}

/**
 * A path the operator typed as an argument (a backup's DIR), absolute: a relative one is taken from the directory the
 * command was typed in. `npm run ops -- …` runs the CLI in the package's root, and npm says where it was started in
 * INIT_CWD; `node ops/cli.ts` run directly has no INIT_CWD and its own working directory.
 */
export function operatorPath(path: string): string {
  return resolve(process.env.INIT_CWD || process.cwd(), path);
}

/** Whether DATA_DIR holds the embedded event log. */
const hasEventLog = (dataDir: string) => existsSync(join(dataDir, EVENT_LOG));

/**
 * A backup as `ops backup` wrote it and nothing has opened since: its manifest is there, and its log is still in the
 * rollback-journal mode of the copy (SQLite's header, byte 18: 1; 2 once in WAL mode). Opening the log, even to read
 * it, switches it to WAL mode: events.db changes, and `ops verify-backup` no longer passes the backup, as if it had
 * been tampered with. An auditor reading a backup reads a copy of it.
 */
function refuseBackupAsTaken(dataDir: string): void {
  if (!existsSync(join(dataDir, MANIFEST)) || !hasEventLog(dataDir)) return;
  const header = Buffer.alloc(100);
  const fd = openSync(join(dataDir, EVENT_LOG), 'r');
  try {
    if (readSync(fd, header, 0, header.length, 0) < header.length || header[18] !== 1) return;
  } finally {
    closeSync(fd);
  }
  throw new OpsError(`${dataDir} holds a backup as \`ops backup\` wrote it (${MANIFEST}), not opened since: opening its log, even to read it, `
    + `changes ${EVENT_LOG} (SQLite switches it to WAL mode), and \`ops verify-backup\` would no longer pass it. Use a copy without the `
    + `manifest, which a DATA_DIR does not need (cp -a ${shellWord(dataDir)} NEW && rm NEW/${MANIFEST}; DATA_DIR=NEW)`);
}

/** A DATA_DIR without an embedded event log is a mistyped path (see withStores). */
export function requireEventLog(dataDir: string): void {
  if (!hasEventLog(dataDir)) throw new OpsError(`no event log in ${dataDir} (set DATA_DIR to the server's data directory)`);
}

/**
 * What stops a long command cleanly (a rebuild, a backup), with the exit code a shell reports for a process the
 * signal ended: Ctrl-C, SIGTERM, which `timeout`, service managers and job runners send first, and SIGHUP, which
 * a dropped ssh session sends (carrying on would leave work nobody watches, writing its progress to a terminal
 * that is gone).
 */
const STOP_SIGNALS = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 } as const;
type StopSignal = keyof typeof STOP_SIGNALS;

/**
 * Until `release`, the first stop signal (of `names`, by default all three) aborts `signal` instead of ending the
 * process, with an OpsError that carries `message` and the signal's exit code as the reason. Signals within
 * REPEATED_SIGNAL_MS of it are the same stop delivered twice (to npm and to this process) and are ignored, released
 * or not; one after that ends the process at once.
 */
export function stopOnSignals(message: string, names = Object.keys(STOP_SIGNALS) as StopSignal[]): { signal: AbortSignal; release: () => void } {
  const abort = new AbortController();
  const remove = () => { for (const name of names) process.off(name, stop); };
  function stop(name: StopSignal): void {
    if (abort.signal.aborted) return;
    abort.abort(new OpsError(message, STOP_SIGNALS[name]));
    // Then the signals' default action again (the process ends at once), once repeats of this one are past.
    setTimeout(remove, REPEATED_SIGNAL_MS).unref();
  }
  for (const name of names) process.on(name, stop);
  // Once stopped, the timer above removes the handlers: a command whose clean-up is quicker than npm passing the signal
  // on releases before the repeat comes, which would otherwise end it there, before it says why it stopped.
  return { signal: abort.signal, release: () => { if (!abort.signal.aborted) remove(); } };
}

/**
 * Runs `fn`, an append and the printing of what only this process knows (a new key, shown once), with the stop
 * signals held back: ended between the commit and the printing, the command would leave an active key that nobody
 * has. The first Ctrl-C, SIGTERM or SIGHUP says so on stderr and lets `fn` finish (moments, unless the event store
 * hangs); another one, a second or more later, ends the process at once.
 */
export async function finishDespiteStops<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const stop = stopOnSignals(what);
  stop.signal.addEventListener('abort', () => process.stderr.write(`finishing: ${what}; stop again to end at once\n`), { once: true });
  try {
    return await fn();
  } finally {
    stop.release();
  }
}

/**
 * Who runs this command, for the events' `actor`: `ops:<login>@<host>`. The login is the OS user's, or
 * $USER/$LOGNAME, or the uid where the account has no name (a container's arbitrary uid).
 */
export function opsActor(): string {
  let login: string;
  try {
    login = userInfo().username;
  } catch {
    login = process.env.USER || process.env.LOGNAME || `uid-${process.getuid?.() ?? 'unknown'}`;
  }
  return `ops:${login}@${hostname()}`;
}

/** Metadata of one operator command: a fresh request id serves as correlation, causation and idempotency key. */
export function opsRequestMeta(scope: { project_id?: string; tenant_id?: string } = {}): RequestMeta {
  const requestId = randomUUID();
  return {
    correlation_id: requestId,
    causation_id: requestId,
    actor: opsActor(),
    ...scope,
    request_key: requestId,
    sequence: { next: 0 },
  };
}

/** Option parser for positions and revisions. */
export function nonNegativeInt(raw: string): number {
  return integerAtLeast(raw, 0, 'expected a non-negative integer');
}

/** Option parser for counts and limits. */
export function positiveInt(raw: string): number {
  return integerAtLeast(raw, 1, 'expected a positive integer');
}

/**
 * One message per option whatever is wrong with the value (`--limit -1` must not suggest that 0 would do), but a
 * value too large to hold exactly is named as such: it is a positive integer.
 */
function integerAtLeast(raw: string, min: number, expected: string): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < min) throw new InvalidArgumentError(expected);
  if (!Number.isSafeInteger(value)) throw new InvalidArgumentError(`expected at most ${Number.MAX_SAFE_INTEGER}`);
  return value;
}

/**
 * Option parser for `a,b` lists; repeated options add up. A value that names nothing (`''` from an unset shell
 * variable, a stray `,`) is refused: an empty list would otherwise read as "no filter" or "the default".
 */
export function commaList(raw: string, previous: string[] = []): string[] {
  const names = raw.split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new InvalidArgumentError('expected one or more names, comma-separated');
  return [...previous, ...names];
}

/** package.json's version (`ops --version`, backup manifests): the tools and the server they work on are released together. */
export function cairnVersion(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

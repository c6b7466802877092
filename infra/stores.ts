import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { EVENT_LOG, LOCK, partial } from './backup-files.js';
import { ConfigError, type Config } from './config.js';
import { redactSecrets } from './redact.js';
import { EmbeddedEventStore } from './eventstore/embedded.js';
import type { EventStore } from './eventstore/port.js';
import { EmbeddedReadStore } from './readstore/embedded.js';
import type { ReadStore } from './readstore/port.js';

/**
 * Picks the adapters: EventStoreDB / MongoDB when their URLs are set, the embedded files in DATA_DIR otherwise.
 * `appends: false` for a process part that only reads the log (its embedded writer thread starts only if needed).
 * `checkpointer: false` for a connection that does not write read models (the HTTP thread when the
 * projections run in their own thread): the writing side's checkpointer thread keeps the WAL short.
 */
export async function openStores(
  config: Pick<Config, 'dataDir' | 'eventStoreUrl' | 'eventStoreTimeoutMs' | 'mongodbUrl' | 'mongodbDb'>,
  options: { checkpointer?: boolean; appends?: boolean } = {},
): Promise<{ events: EventStore; reads: ReadStore }> {
  // Before anything is opened or written: a MONGODB_URL the driver refuses must not leave a new, empty log behind.
  if (config.mongodbUrl) await checkMongoUrl(config.mongodbUrl);
  const events = await openEventStore(config, options);
  try {
    const reads = config.mongodbUrl
      ? await (await import('./readstore/mongo.js')).MongoReadStore.connect(config.mongodbUrl, config.mongodbDb)
      : naming(join(config.dataDir, 'readmodels.db'), (file) => new EmbeddedReadStore(file, { checkpointer: options.checkpointer ?? true }));
    return { events, reads };
  } catch (error) {
    // An unusable read store (a damaged file, MongoDB unreachable) leaves no log open behind it (its writer thread).
    await events.close().catch(() => undefined);
    throw error;
  }
}

/**
 * The driver's checks of a MongoDB URL (options and their values, the host list, "mongodb+srv" with a port), made by
 * its client's constructor, which connects to nothing: a setting, not a defect. Whatever it throws there (MongoParseError,
 * MongoInvalidArgumentError, MongoAPIError for `?w=`, MongoRuntimeError for a port out of range) is about the string.
 */
async function checkMongoUrl(url: string): Promise<void> {
  const { MongoClient } = await import('mongodb');
  let client: InstanceType<typeof MongoClient>;
  try {
    client = new MongoClient(url);
  } catch (error) {
    throw new ConfigError(`MONGODB_URL is not a valid connection string: ${redactSecrets((error as Error).message)}`);
  }
  await client.close();
}

/** The event log alone, for what never touches a read model (operator commands that read or append events). */
export async function openEventStore(
  config: Pick<Config, 'dataDir' | 'eventStoreUrl' | 'eventStoreTimeoutMs'>,
  options: { appends?: boolean } = {},
): Promise<EventStore> {
  if (config.eventStoreUrl) {
    const { EsdbEventStore } = await import('./eventstore/esdb.js');
    try {
      return new EsdbEventStore(config.eventStoreUrl, { timeoutMs: config.eventStoreTimeoutMs });
    } catch (error) {
      // The constructor only parses the connection string; the client's error carries the whole string, password
      // included (as `connectionString`): its message alone names the position and what was expected there.
      throw new ConfigError(`EVENTSTORE_URL is not a valid connection string: ${(error as Error).message}`);
    }
  }
  refuseUnfinishedBackup(config.dataDir);
  return naming(join(config.dataDir, EVENT_LOG), (file) => new EmbeddedEventStore(file, { appends: options.appends ?? true }));
}

/**
 * A DATA_DIR that a backup is being written into, or that one killed before it finished left behind (its lock, or
 * the copy of the log not yet renamed): opened, it would begin a new, empty log beside what was meant to be restored.
 */
function refuseUnfinishedBackup(dataDir: string): void {
  const found = [LOCK, partial(EVENT_LOG)].filter((name) => existsSync(join(dataDir, name)));
  if (found.length === 0) return;
  throw new ConfigError(`DATA_DIR ${dataDir} holds a backup that is being written or did not finish (${found.join(', ')}): `
    + 'a server started on it would begin a new, empty event log. Check a backup with `ops verify-backup` before restoring it, and take it again if it is not restorable');
}

/**
 * Opens an embedded store file. SQLite's errors name no file ("file is not a database"): one raised while opening
 * gets the file as `file`, so that the server's start and the operator tools can say which of the two it is.
 */
function naming<T>(file: string, open: (file: string) => T): T {
  try {
    return open(file);
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === 'string' && code.startsWith('SQLITE_')) Object.assign(error as object, { file });
    throw error;
  }
}

/** The store file an error was raised opening (see naming), if any. */
export const storeFileOf = (error: unknown): string | undefined => {
  const file = (error as { file?: unknown } | null)?.file;
  return typeof file === 'string' ? file : undefined;
};

/** Closes both stores, each whatever the other does (a failed start, the end of an operator command). */
export async function closeStores({ events, reads }: { events: EventStore; reads: ReadStore }): Promise<void> {
  await Promise.allSettled([reads.close(), events.close()]);
}

/** The names of what `ops backup` writes into its directory (ops/backup.ts), `ops verify-backup` reads (ops/backup-verify.ts), and a server refuses to start on (stores.ts). */
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, createReadStream, statSync } from 'node:fs';

export const EVENT_LOG = 'events.db';
export const READ_MODELS = 'readmodels.db';

/** Held in the backup's directory while the backup runs (see lockDirectory in backup.ts), and removed when it ends. */
export const LOCK = 'backup.lock';

/**
 * What a backup writes last, once every file is in place: the name, size and SHA-256 of each file (see Manifest). A
 * backup with it and without LOCK finished; backups of versions before it have none.
 */
export const MANIFEST = 'backup-manifest.json';
export const MANIFEST_VERSION = 1;

export interface Manifest {
  manifest_version: number;
  /** package.json's version of the Cairn that took the backup. */
  cairn_version: string;
  started_at: string;
  finished_at: string;
  /** The copied log's last position, and how many events it holds. */
  head: number;
  events: number;
  /** In the order they were copied (the read models first). */
  files: Array<{ file: string; bytes: number; sha256: string }>;
}

/** Where a file is copied before it is checked and renamed: a name no server opens. */
export const partial = (file: string) => `${file}.partial`;

/** What a backup writes into its directory: VACUUM INTO's journals, SQLite's own beside the lock, and the manifest. */
export const written = (files: string[]) => [
  LOCK, `${LOCK}-journal`, MANIFEST, partial(MANIFEST), ...files.flatMap((file) => [file, partial(file), `${partial(file)}-journal`]),
];

/** All that a backup, with or without --read-models, can have left behind when it was killed. */
export const LEFTOVER = new Set(written([READ_MODELS, EVENT_LOG]));

/**
 * A backup's file gets the permissions of the file it copies (and, run as root, its owner): the log holds what clients
 * sent and API key hashes, and a copy readable by more accounts than the original (SQLite creates files 0644 less the
 * umask) would leak it.
 */
export function likeSource(source: string, target: string): void {
  const { mode, uid, gid } = statSync(source);
  chmodSync(target, mode & 0o777);
  if (process.getuid?.() === 0) chownSync(target, uid, gid);
}

/** A file's size and SHA-256, from one read of it in chunks (a log of gigabytes is never held in memory). */
export async function digest(file: string, signal?: AbortSignal): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(file, { signal, highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    bytes += chunk.length;
  }
  return { bytes, sha256: hash.digest('hex') };
}

import Database from 'better-sqlite3';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import type { Command } from 'commander';
import { digest, EVENT_LOG, LEFTOVER, MANIFEST, MANIFEST_VERSION, READ_MODELS, type Manifest } from '../infra/backup-files.js';
import { count, notice, printJson, printTable, quoted } from './output.js';
import { OpsError, operatorPath } from './runtime.js';

/** Exit code when the directory was read but is not a backup a server can be restored from (as `projections status`'s 3). */
const NOT_RESTORABLE_EXIT_CODE = 3;

interface Verified {
  dir: string;
  restorable: boolean;
  /** Each store file as it is: its size and SHA-256, and what was found (ok, damaged, not whole, changed…). */
  files: Array<{ file: string; bytes: number; sha256: string | null; check: string }>;
  /**
   * The backup's manifest (null when it has none: a backup of a version before manifests), its own SHA-256 (to compare
   * with the one `ops backup` printed), and whether every file is the one it lists (false too when it is damaged).
   */
  manifest: { sha256: string; matches: boolean; cairn_version: string | null; finished_at: string | null; head: number | null } | null;
  /** The log's last position and how many events it holds (null without a readable log). */
  head: number | null;
  events: number | null;
  /** The live checkpoint of each read model in the backup's readmodels.db (null without one). */
  read_models: Array<{ projection: string; position: number }> | null;
  /** Why it is not restorable, one line each (empty when it is). */
  problems: string[];
}

export function verifyBackupCommand(program: Command): void {
  program.command('verify-backup').description('check that a directory holds a finished, intact backup a server can be restored from')
    .argument('<dir>', 'the backup: a directory `ops backup` wrote')
    .option('--json', 'print JSON')
    .addHelpText('after', `
Reads DIR and writes nothing there. Checks that the backup finished (no backup.lock or *.partial file of a backup
that is running or was killed), that ${EVENT_LOG} (and ${READ_MODELS}, if there) pass SQLite's full integrity_check,
that the log is whole (positions 1 to its head without a gap, each stream's revisions from 0 without a gap, its
streams index agreeing with its events), that no read model's checkpoint lies past the log's end (a server
would refuse to start on it), and that each file has the size and SHA-256 that ${MANIFEST} lists, and DIR
nothing it does not list. A backup without ${MANIFEST} (taken by an earlier version) is checked without it, and
says so on stderr; a -wal or -shm file beside its stores (a server runs or ran on DIR: no backup holds one) makes it
not restorable. Run it before restoring a backup, and after copying one elsewhere.

Exit code: 0 when the backup is restorable and the one taken; 3 when it is not (after printing the report; each
problem on stderr); 1 when DIR cannot be read.`)
    .action(async (dir: string, opts: { json?: boolean }) => {
      const result = await verifyBackup(operatorPath(dir));
      if (opts.json) printJson(result);
      else {
        printTable(result.files, ['file', 'bytes', 'check']);
        if (result.restorable) {
          process.stdout.write(`backup in ${result.dir}: restorable; the event log up to position ${result.head} (${count(result.events!, 'event')})`
            + `${result.read_models ? `, ${count(result.read_models.length, 'read model')} at or behind it` : ', no read models (rebuilt from the log at start)'}\n`);
          if (result.manifest) {
            process.stdout.write(`every file as backed up (by Cairn ${result.manifest.cairn_version}, finished ${result.manifest.finished_at}); `
              + `manifest ${MANIFEST}: SHA-256 ${result.manifest.sha256}\n`);
          }
        }
      }
      if (!result.manifest) notice(NO_MANIFEST);
      if (!result.restorable) {
        for (const problem of result.problems) notice(`not restorable: ${problem}`);
        throw new OpsError(`${result.dir} is not a restorable backup (${count(result.problems.length, 'problem')})`, NOT_RESTORABLE_EXIT_CODE);
      }
    });
}

/** Said of a backup without a manifest, whatever else is found: what it could not check. */
const NO_MANIFEST = `no checksums: the backup has no ${MANIFEST} (taken by an earlier version of Cairn, or removed since), `
  + 'so its files could not be compared with those backed up; the other checks were made';

/** Opens nothing for writing: a backup checked is the same backup afterwards. */
export async function verifyBackup(dir: string): Promise<Verified> {
  const stats = statSync(dir, { throwIfNoEntry: false });
  if (!stats) throw new OpsError(`${dir} does not exist`);
  if (!stats.isDirectory()) throw new OpsError(`${dir} is not a directory`);
  const entries = readdirSync(dir);
  const problems: string[] = [];
  const unfinished = entries.filter((name) => LEFTOVER.has(name) && name !== EVENT_LOG && name !== READ_MODELS && name !== MANIFEST).sort();
  if (unfinished.length > 0) {
    problems.push(`a backup is writing into it, or did not finish (killed, or its machine stopped): ${unfinished.join(', ')}; take the backup again`);
  }
  const listing = entries.includes(MANIFEST) ? readManifest(join(dir, MANIFEST)) : undefined;
  if (listing?.damage) problems.push(`${MANIFEST} is damaged: ${listing.damage}; the files cannot be compared with those backed up`);
  // With a manifest, such files are named as not listed (compareWithManifest). Without one (a backup of an earlier
  // version), `ops backup` of any version wrote each store as one file: a -wal or -shm beside it means the store was
  // opened in place, by a server that runs or ran there (a live DATA_DIR given for a backup, or a copy of one).
  const inPlace = listing ? [] : entries.filter((name) => [EVENT_LOG, READ_MODELS].some((store) => name === `${store}-wal` || name === `${store}-shm`)).sort();
  if (inPlace.length > 0) {
    problems.push(`${inPlace.map(quoted).join(', ')} ${inPlace.length === 1 ? 'is' : 'are'} not part of a backup: its stores were opened in place `
      + `(a server runs or ran on ${dir}, or it is a copy of a live DATA_DIR); restore from a directory \`ops backup\` wrote`);
  }
  const files: Verified['files'] = [];
  let log: { head: number; events: number } | undefined;
  let readModels: Array<{ projection: string; position: number }> | undefined;
  for (const file of [READ_MODELS, EVENT_LOG]) {
    const path = join(dir, file);
    if (!existsSync(path)) {
      if (file === EVENT_LOG) problems.push(`no event log (${EVENT_LOG})`);
      continue;
    }
    const checked: Verified['files'][number] = { file, bytes: statSync(path).size, sha256: null, check: 'ok' };
    files.push(checked);
    try {
      Object.assign(checked, await digest(path));
    } catch (error) {
      // A directory of the name, a file this account may not read: SQLite cannot open it either (below).
      if (!(error as NodeJS.ErrnoException).code) throw error;
    }
    try {
      const db = new Database(path, { readonly: true, fileMustExist: true });
      try {
        const damage = integrityProblems(db);
        if (damage.length > 0) {
          checked.check = 'damaged';
          problems.push(`${file} is damaged: ${damage.join('; ')}`);
        } else if (file === EVENT_LOG) {
          log = logFacts(db);
          const gaps = logProblems(db, log);
          if (gaps.length > 0) checked.check = 'not whole';
          problems.push(...gaps);
        } else {
          readModels = checkpoints(db);
        }
      } finally {
        db.close();
      }
    } catch (error) {
      // SQLite gives up on some damage (a page of the schema, a file cut short) rather than list it.
      const { code, message } = error as { code?: string; message: string };
      const damaged = code?.startsWith('SQLITE_CORRUPT') === true || code === 'SQLITE_NOTADB';
      checked.check = damaged ? 'damaged' : 'unreadable';
      problems.push(damaged ? `${file} is damaged: ${message}` : `${file} cannot be read: it is not a store of Cairn (${message})`);
    }
  }
  if (log && readModels) {
    const end = log.head;
    const ahead = readModels.filter((cp) => cp.position > end);
    if (ahead.length > 0) {
      files.find((f) => f.file === READ_MODELS)!.check = 'ahead of the log';
      problems.push(`the read models are ahead of the event log: ${ahead.map((a) => `${a.projection} at position ${a.position}`).join(', ')}, `
        + `but the log ends at position ${log.head}; a server would refuse to start on them (delete ${READ_MODELS}: they are rebuilt from the log at start)`);
    }
  }
  let matches = listing !== undefined && listing.damage === undefined;
  if (listing?.manifest) {
    const mismatches = compareWithManifest(listing.manifest, entries.filter((name) => name !== MANIFEST && !unfinished.includes(name)), files, log);
    problems.push(...mismatches);
    matches = mismatches.length === 0;
  }
  const manifest = listing && {
    sha256: listing.sha256, matches,
    cairn_version: listing.manifest?.cairn_version ?? null, finished_at: listing.manifest?.finished_at ?? null, head: listing.manifest?.head ?? null,
  };
  return {
    dir, restorable: problems.length === 0, files, manifest: manifest ?? null,
    head: log?.head ?? null, events: log?.events ?? null, read_models: readModels ?? null, problems,
  };
}

/** Larger than any manifest `ops backup` writes (two files): not read whole into memory. */
const MANIFEST_MAX_BYTES = 64 * 1024;

/** The manifest as `ops backup` wrote it, its SHA-256, or why it is not one (cut short, edited, of a later format). */
function readManifest(path: string): { sha256: string; manifest?: Manifest; damage?: string } {
  let bytes: Buffer;
  try {
    if (statSync(path).size > MANIFEST_MAX_BYTES) return { sha256: '', damage: `larger than ${MANIFEST_MAX_BYTES} bytes: not a manifest of a backup` };
    bytes = readFileSync(path);
  } catch (error) {
    return { sha256: '', damage: `it cannot be read (${(error as Error).message})` };
  }
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    return { sha256, damage: `it is not JSON (${(error as Error).message})` };
  }
  const m = value as Partial<Manifest> | null;
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return { sha256, damage: 'it is not a JSON object' };
  if (m.manifest_version !== MANIFEST_VERSION) {
    return { sha256, damage: `its manifest_version is ${JSON.stringify(m.manifest_version)}, this version of Cairn reads ${MANIFEST_VERSION}` };
  }
  const natural = (n: unknown) => Number.isSafeInteger(n) && (n as number) >= 0;
  const stores = [EVENT_LOG, READ_MODELS];
  const filesValid = Array.isArray(m.files) && m.files.every((f: unknown) => {
    const { file, bytes: size, sha256: hash } = (f ?? {}) as Record<string, unknown>;
    return typeof file === 'string' && stores.includes(file) && natural(size) && typeof hash === 'string' && /^[0-9a-f]{64}$/.test(hash);
  });
  if (!filesValid || new Set(m.files!.map((f) => f.file)).size !== m.files!.length || !m.files!.some((f) => f.file === EVENT_LOG)) {
    return { sha256, damage: `its files are not those of a backup (${EVENT_LOG}, and ${READ_MODELS} if copied, each once, with bytes and sha256)` };
  }
  if (!natural(m.head) || !natural(m.events) || typeof m.cairn_version !== 'string' || typeof m.finished_at !== 'string' || typeof m.started_at !== 'string') {
    return { sha256, damage: 'it lacks head, events, cairn_version, started_at or finished_at' };
  }
  return { sha256, manifest: m as Manifest };
}

/**
 * Each file the manifest lists, there with its size and SHA-256, and nothing else in the directory (a -wal file beside
 * the log would change what a server reads from it; a read-models file the backup did not copy may be ahead of its
 * log): one line per file that differs. Sets the check of each store file that is not the one backed up.
 */
function compareWithManifest(manifest: Manifest, present: string[], files: Verified['files'], log: { head: number } | undefined): string[] {
  const problems: string[] = [];
  for (const listed of manifest.files) {
    const found = files.find((f) => f.file === listed.file);
    if (!found) {
      problems.push(`${listed.file} is missing: the manifest lists it (${count(listed.bytes, 'byte')})`);
      continue;
    }
    const differs = found.bytes !== listed.bytes ? `${count(found.bytes, 'byte')}, the manifest says ${listed.bytes}`
      : found.sha256 !== listed.sha256 ? `its SHA-256 is ${found.sha256 ?? 'unknown (it cannot be read)'}, the manifest says ${listed.sha256}` : undefined;
    if (differs) {
      problems.push(`${listed.file} is not the file backed up: ${differs}`);
      if (found.check === 'ok') found.check = 'changed';
    }
  }
  for (const name of present.filter((name) => !manifest.files.some((f) => f.file === name)).sort()) {
    problems.push(`${quoted(name)} is not part of the backup: its manifest does not list it`);
    const found = files.find((f) => f.file === name);
    if (found?.check === 'ok') found.check = 'not in the manifest';
  }
  if (log && log.head !== manifest.head && problems.length === 0) {
    problems.push(`the event log ends at position ${log.head}, the manifest says ${manifest.head}`);
  }
  return problems;
}

/** SQLite's full check (quick_check leaves out that each index agrees with its table), its first lines. */
function integrityProblems(db: Database.Database): string[] {
  const answer = (db.pragma('integrity_check(10)') as Array<{ integrity_check: string }>).flatMap((row) => row.integrity_check.split('\n'));
  return answer.join() === 'ok' ? [] : answer.filter((line) => !line.startsWith('***')).slice(0, 3);
}

function logFacts(db: Database.Database): { head: number; events: number } {
  return db.prepare<[], { head: number; events: number }>('SELECT COALESCE(MAX(position), 0) AS head, COUNT(*) AS events FROM events').get()!;
}

/**
 * The log as the embedded store writes it: positions 1 to the head, each stream's revisions 0 to its last, and the
 * streams index (which appends check expected revisions against) agreeing with the events.
 */
function logProblems(db: Database.Database, { head, events }: { head: number; events: number }): string[] {
  const problems: string[] = [];
  const first = db.prepare<[], { p: number | null }>('SELECT MIN(position) AS p FROM events').get()!.p;
  if (events !== head || (events > 0 && first !== 1)) {
    problems.push(`the event log has gaps: ${count(events, 'event')} between positions ${first ?? 0} and ${head}`);
  }
  const streams = db.prepare<[], { name: string }>(`
    WITH actual AS (SELECT stream AS name, MAX(revision) AS revision, COUNT(*) AS event_count, MIN(position) AS first_position,
                           MAX(position) AS last_position, MIN(revision) AS first_revision FROM events GROUP BY stream),
         mismatched AS (
           SELECT name FROM actual WHERE first_revision <> 0 OR revision <> event_count - 1
           UNION SELECT name FROM (SELECT name, revision, event_count, first_position, last_position FROM actual
                                   EXCEPT SELECT name, revision, event_count, first_position, last_position FROM streams)
           UNION SELECT name FROM (SELECT name, revision, event_count, first_position, last_position FROM streams
                                   EXCEPT SELECT name, revision, event_count, first_position, last_position FROM actual))
    SELECT name FROM mismatched ORDER BY name`).all();
  if (streams.length > 0) {
    problems.push(`${count(streams.length, 'stream')} of the event log ${streams.length === 1 ? 'does' : 'do'} not agree with its streams index `
      + `or ${streams.length === 1 ? 'has' : 'have'} revisions missing: ${streams.slice(0, 3).map((s) => quoted(s.name)).join(', ')}${streams.length > 3 ? ', …' : ''}`);
  }
  return problems;
}

/** The live checkpoints (a rebuild's slot is not what a server starts from). */
function checkpoints(db: Database.Database): Array<{ projection: string; position: number }> {
  return db.prepare<[], { projection: string; position: number }>("SELECT projection, position FROM rm_checkpoints WHERE slot = 'live' ORDER BY projection").all();
}

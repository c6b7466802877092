import Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { appendFileSync, chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { ROOT as root, startScript } from '../support/processes.js';

/**
 * The checksum manifest of `ops backup`, as an audit-heavy operator relies on it after copying a backup to other
 * media: `ops verify-backup` proves each file is the one backed up, bit for bit, and names every file that is not,
 * also when SQLite's own checks pass; a backup of an earlier version (no manifest) is still checked, and says so.
 */
t.setTimeout(300_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-backup-manifest-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const ops = (dataDir: string, args: string[]) => startScript('ops/cli.ts', args, { DATA_DIR: dataDir }).done;

interface Manifest {
  manifest_version: number; cairn_version: string; started_at: string; finished_at: string; head: number; events: number;
  files: Array<{ file: string; bytes: number; sha256: string }>;
}
interface Taken { dir: string; head: number; events: number; files: Manifest['files']; manifest: { file: string; sha256: string } }
interface Verified {
  restorable: boolean; files: Array<{ file: string; bytes: number; sha256: string | null; check: string }>; problems: string[];
  manifest: { sha256: string; matches: boolean; cairn_version: string | null; finished_at: string | null; head: number | null } | null;
}

const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const contents = (dir: string) => readdirSync(dir).sort().map((name) => [name, sha256(join(dir, name))]);
const metadata = () => ({ correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() });
const notes = (n: number) => Array.from({ length: n }, (_, i) => ({ id: randomUUID(), type: 'ManifestTestNoted', data: { i, text: `note number ${i} of the audit trail` }, metadata: metadata() }));

function integrity(file: string): unknown {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.pragma('integrity_check');
  } finally {
    db.close();
  }
}

const NO_MANIFEST = 'no checksums: the backup has no backup-manifest.json (taken by an earlier version of Cairn, or removed since), '
  + 'so its files could not be compared with those backed up; the other checks were made\n';

t.test('the manifest lists every file with its size and SHA-256; verify names each file that is not the one backed up', async (t) => {
  const dataDir = join(work, 'data');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  for (let s = 0; s < 5; s++) await events.append(`manifest-${s}`, notes(40), 'no_stream');
  await events.close();
  await new EmbeddedReadStore(join(dataDir, 'readmodels.db'), { checkpointer: false }).close();
  chmodSync(join(dataDir, 'events.db'), 0o640);

  const first = join(work, 'first');
  const ran = await ops(dataDir, ['backup', first, '--read-models', '--json']);
  t.equal(ran.code, 0, ran.stderr);
  const taken = JSON.parse(ran.stdout) as Taken;
  t.strictSame(readdirSync(first).sort(), ['backup-manifest.json', 'events.db', 'readmodels.db'], 'the copies and the manifest, nothing else');
  const manifest = JSON.parse(readFileSync(join(first, 'backup-manifest.json'), 'utf8')) as Manifest;
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
  t.match(manifest, { manifest_version: 1, cairn_version: version, head: 200, events: 200 });
  t.ok(Date.parse(manifest.started_at) <= Date.parse(manifest.finished_at), `${manifest.started_at} to ${manifest.finished_at}`);
  t.strictSame(manifest.files, ['readmodels.db', 'events.db'].map((file) => ({ file, bytes: statSync(join(first, file)).size, sha256: sha256(join(first, file)) })),
    'each file, in the order copied, with its size and SHA-256');
  t.strictSame(taken.files, manifest.files, '--json: the same files, sizes and hashes');
  t.strictSame(taken.manifest, { file: 'backup-manifest.json', sha256: sha256(join(first, 'backup-manifest.json')) }, 'and the manifest\'s own SHA-256');
  t.equal((statSync(join(first, 'backup-manifest.json')).mode & 0o777).toString(8), '640', 'the manifest has the log\'s permissions');

  const human = await ops(dataDir, ['backup', join(work, 'human')]);
  t.equal(human.code, 0, human.stderr);
  const listed = JSON.parse(readFileSync(join(work, 'human', 'backup-manifest.json'), 'utf8')) as Manifest;
  const [, bytes, hash, printedDir, manifestHash] = /^FILE +BYTES +SHA256\nevents\.db +(\d+) +([0-9a-f]{64})\nbackup in (.+): the event log up to position 200 \(200 events\), copied in \d+\.\d s\nmanifest backup-manifest\.json: SHA-256 ([0-9a-f]{64})\n$/
    .exec(human.stdout) ?? [];
  t.strictSame([Number(bytes), hash, printedDir, manifestHash], [listed.files[0]!.bytes, listed.files[0]!.sha256, join(work, 'human'), sha256(join(work, 'human', 'backup-manifest.json'))],
    `each file with its size and SHA-256, then the manifest's: ${human.stdout}`);

  // A second backup of a longer log: its events.db is a valid, whole log too, only not the one the first backup took.
  const more = new EmbeddedEventStore(join(dataDir, 'events.db'));
  await more.append('manifest-late', notes(10), 'no_stream');
  await more.close();
  const second = join(work, 'second');
  t.equal((await ops(dataDir, ['backup', second])).code, 0);

  const variant = (name: string, change: (dir: string) => void, of = first) => {
    const dir = join(work, name);
    cpSync(of, dir, { recursive: true });
    change(dir);
    return dir;
  };
  const log = manifest.files[1]!;
  const cases: Array<{ name: string; dir: string; problems: RegExp[]; checks: string[] }> = [
    { name: 'a byte of an event\'s data changed', dir: variant('flipped', (dir) => {
      const file = join(dir, 'events.db');
      const bytes = readFileSync(file);
      const at = bytes.lastIndexOf('audit trail');
      bytes[at] = 'A'.charCodeAt(0);
      writeFileSync(file, bytes);
      t.strictSame(integrity(file), [{ integrity_check: 'ok' }], 'SQLite finds nothing wrong with it');
    }), problems: [new RegExp(`^events\\.db is not the file backed up: its SHA-256 is (?!${log.sha256})[0-9a-f]{64}, the manifest says ${log.sha256}$`)], checks: ['ok', 'changed'] },
    { name: 'a byte appended', dir: variant('appended', (dir) => {
      appendFileSync(join(dir, 'events.db'), 'x');
      t.strictSame(integrity(join(dir, 'events.db')), [{ integrity_check: 'ok' }], 'SQLite finds nothing wrong with it');
    }), problems: [new RegExp(`^events\\.db is not the file backed up: ${log.bytes + 1} bytes, the manifest says ${log.bytes}$`)], checks: ['ok', 'changed'] },
    { name: 'replaced by another backup\'s valid log', dir: variant('replaced', (dir) => cpSync(join(second, 'events.db'), join(dir, 'events.db'))),
      problems: [new RegExp(`^events\\.db is not the file backed up: (its SHA-256 is [0-9a-f]{64}, the manifest says ${log.sha256}|\\d+ bytes, the manifest says ${log.bytes})$`)],
      checks: ['ok', 'changed'] },
    { name: 'a file missing', dir: variant('missing', (dir) => rmSync(join(dir, 'readmodels.db'))),
      problems: [new RegExp(`^readmodels\\.db is missing: the manifest lists it \\(${manifest.files[0]!.bytes} bytes\\)$`)], checks: ['ok'] },
    { name: 'files added', dir: variant('extra', (dir) => { writeFileSync(join(dir, 'events.db-wal'), ''); writeFileSync(join(dir, 'notes.txt'), 'x'); }),
      problems: [/^"events\.db-wal" is not part of the backup: its manifest does not list it$/, /^"notes\.txt" is not part of the backup: its manifest does not list it$/],
      checks: ['ok', 'ok'] },
    // The first backup's read models beside the second's log and manifest: a file the second never copied.
    { name: 'a read-models file the backup did not copy', dir: variant('unlisted-read-models', (dir) => cpSync(join(first, 'readmodels.db'), join(dir, 'readmodels.db')), second),
      problems: [/^"readmodels\.db" is not part of the backup: its manifest does not list it$/], checks: ['not in the manifest', 'ok'] },
    { name: 'the manifest cut short', dir: variant('cut', (dir) => truncateSync(join(dir, 'backup-manifest.json'), 100)),
      problems: [/^backup-manifest\.json is damaged: it is not JSON \(.+\); the files cannot be compared with those backed up$/], checks: ['ok', 'ok'] },
    { name: 'killed after its manifest, before it ended', dir: variant('killed-late', (dir) => writeFileSync(join(dir, 'backup.lock'), '')),
      problems: [/^a backup is writing into it, or did not finish \(killed, or its machine stopped\): backup\.lock; take the backup again$/], checks: ['ok', 'ok'] },
  ];
  const old = variant('older-version', (dir) => rmSync(join(dir, 'backup-manifest.json')));
  const oldDamaged = variant('older-version-damaged', (dir) => { rmSync(join(dir, 'backup-manifest.json')); truncateSync(join(dir, 'events.db'), 20_000); });
  const states = [...cases.map((c) => contents(c.dir)), contents(old)];
  const [good, goodHuman, ...runs] = await Promise.all([
    ops(dataDir, ['verify-backup', first, '--json']), ops(dataDir, ['verify-backup', first]),
    ...cases.map((c) => ops(dataDir, ['verify-backup', c.dir, '--json'])),
    ops(dataDir, ['verify-backup', old, '--json']), ops(dataDir, ['verify-backup', old]), ops(dataDir, ['verify-backup', oldDamaged]),
  ]);

  t.equal(good!.code, 0, good!.stderr);
  t.equal(good!.stderr, '');
  const report = JSON.parse(good!.stdout) as Verified;
  t.strictSame(report.manifest, { sha256: taken.manifest.sha256, matches: true, cairn_version: version, finished_at: manifest.finished_at, head: 200 });
  t.strictSame(report.files.map((f) => ({ file: f.file, bytes: f.bytes, sha256: f.sha256 })), manifest.files, '--json: each file\'s size and SHA-256 as found');
  t.equal(goodHuman!.code, 0, goodHuman!.stderr);
  t.match(goodHuman!.stdout, new RegExp(`\\nevery file as backed up \\(by Cairn ${version.replaceAll('.', '\\.')}, finished ${manifest.finished_at}\\); `
    + `manifest backup-manifest\\.json: SHA-256 ${taken.manifest.sha256}\\n$`));

  cases.forEach((c, i) => {
    const run = runs[i]!;
    t.equal(run.code, 3, `${c.name}: exit code 3 (${run.stderr})`);
    const verified = JSON.parse(run.stdout) as Verified;
    t.equal(verified.restorable, false, c.name);
    t.equal(verified.problems.length, c.problems.length, `${c.name}: ${verified.problems.join(' | ')}`);
    c.problems.forEach((problem, j) => t.match(verified.problems[j], problem, c.name));
    t.strictSame(verified.files.map((f) => f.check), c.checks, `${c.name}: each file's check`);
    if (!c.name.startsWith('killed')) t.equal(verified.manifest?.matches, false, `${c.name}: the manifest does not match`);
    t.equal(run.stderr, `${verified.problems.map((p) => `not restorable: ${p}\n`).join('')}error: ${c.dir} is not a restorable backup (${c.problems.length} problem${c.problems.length === 1 ? '' : 's'})\n`);
    t.strictSame(contents(c.dir), states[i], `${c.name}: verifying wrote nothing`);
  });

  // A backup of the version before manifests: checked as before, exit code 0, and it says what it could not check.
  const [oldJson, oldHuman, oldBad] = runs.slice(cases.length);
  t.equal(oldJson!.code, 0, oldJson!.stderr);
  t.equal(oldJson!.stderr, NO_MANIFEST);
  t.match(JSON.parse(oldJson!.stdout), { restorable: true, manifest: null, head: 200, problems: [] });
  t.equal(oldHuman!.code, 0);
  t.match(oldHuman!.stdout, /\nbackup in .*older-version: restorable; the event log up to position 200 \(200 events\), 0 read models at or behind it\n$/);
  t.equal(oldHuman!.stderr, NO_MANIFEST);
  t.equal(oldBad!.code, 3, 'without a manifest, a damaged file still fails');
  t.match(oldBad!.stderr, new RegExp(`^${NO_MANIFEST.replace(/[.()]/g, '\\$&')}not restorable: events\\.db is damaged: `));
  t.strictSame(contents(old), states[cases.length], 'verifying wrote nothing');
});

t.test('what a backup killed after writing its manifest left is removed by the next backup into the directory', async (t) => {
  const dataDir = join(work, 'killed-data');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  await events.append('manifest-killed', notes(3), 'no_stream');
  await events.close();
  const dir = join(work, 'killed-late-backup');
  mkdirSync(dir);
  // Killed between the manifest's rename and the removal of its lock: its files are all there, and its lock.
  for (const name of ['backup.lock', 'events.db', 'backup-manifest.json', 'backup-manifest.json.partial']) writeFileSync(join(dir, name), '');
  const run = await ops(dataDir, ['backup', dir, '--json']);
  t.equal(run.code, 0, run.stderr);
  t.equal(run.stderr, `removed what a backup into ${dir} that did not finish (killed, or its machine stopped) left there: `
    + 'backup-manifest.json, backup-manifest.json.partial, events.db\n');
  t.strictSame(readdirSync(dir).sort(), ['backup-manifest.json', 'events.db']);
  const verified = await ops(dataDir, ['verify-backup', dir]);
  t.equal(verified.code, 0, verified.stderr);
});

t.test('a DIR that is a symbolic link to a path that does not exist is refused in one line naming it, nothing written', async (t) => {
  const dataDir = join(work, 'link-data');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  await events.append('manifest-link', notes(1), 'no_stream');
  await events.close();
  const link = join(work, 'link');
  symlinkSync(join(work, 'mounted-elsewhere'), link);
  const run = await ops(dataDir, ['backup', link]);
  t.equal(run.code, 1);
  t.equal(run.stdout, '');
  t.equal(run.stderr, `error: cannot create ${link}: it is a symbolic link to ${join(work, 'mounted-elsewhere')}, which does not exist; create that directory, or give another DIR\n`);
  t.notOk(existsSync(join(work, 'mounted-elsewhere')), 'nothing made');
});

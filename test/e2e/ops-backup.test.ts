import Database from 'better-sqlite3';
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { startTestCairn, TEST_JWT_SECRET } from '../support/cairn.js';
import { ROOT as root, startScript, type Run } from '../support/processes.js';
import { within } from '../support/settling.js';

/** `ops backup` run as operators run it, against embedded stores in temp directories. */
// Many processes started in turn (each `ops` run imports the sources afresh): 76 s alone in CI, past 120 s under load.
t.setTimeout(300_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-backup-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const start = startScript;

const backup = (dataDir: string, args: string[], extraEnv: NodeJS.ProcessEnv = {}) => start('ops/cli.ts', ['backup', ...args], { DATA_DIR: dataDir, ...extraEnv });

interface Backup { dir: string; files: Array<{ file: string; bytes: number; sha256: string }>; head: number; events: number }

const metadata = () => ({ correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() });
const pings = (n: number) => Array.from({ length: n }, (_, i) => ({ id: randomUUID(), type: 'BackupTestPinged', data: { i }, metadata: metadata() }));

/** A data dir with a short log and (unless `readModels` is false) a read-models file, no process using them. */
async function dataDirWithLog(name: string, readModels = true): Promise<string> {
  const dir = join(work, name);
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  await events.append('backup-seed', pings(3), 'no_stream');
  await events.close();
  if (readModels) await new EmbeddedReadStore(join(dir, 'readmodels.db'), { checkpointer: false }).close();
  return dir;
}

/**
 * Holds the log of `dataDir` exclusively until closed: a backup then copies the read models and waits to read the
 * log (for its busy timeout, 5 s, then fails), a backup in progress with a partial copy in its directory.
 */
function holdLog(dataDir: string): Database.Database {
  const lock = new Database(join(dataDir, 'events.db'));
  lock.pragma('locking_mode = EXCLUSIVE');
  lock.exec('BEGIN EXCLUSIVE');
  return lock;
}

function query<T>(file: string, sql: string, ...params: unknown[]): T[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.prepare(sql).all(...params) as T[];
  } finally {
    db.close();
  }
}

const sha256Of = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

const EVENTS = 'SELECT position, id, stream, revision, type, data, metadata, recorded_at FROM events WHERE position <= ? ORDER BY position';

/** Polls (a file to appear, for instance) every few milliseconds. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 3));
}

/** The pids of the copying processes of backups into `dir` (backup-copy.ts, which has the backup's files as arguments). */
function copying(dir: string): number[] {
  return execFileSync('ps', ['-A', '-o', 'pid=,args='], { encoding: 'utf8' }).split('\n')
    .filter((line) => line.includes('backup-copy') && line.includes(dir)).map((line) => Number.parseInt(line, 10));
}

const scope = { agent: 'ava', user: 'sam' };

t.test('a backup taken while the server appends: a prefix of the live log, checked, and a DATA_DIR a server runs on', async (t) => {
  const dataDir = join(work, 'live');
  const app = await startTestCairn({}, { dataDir });
  let stopped = false;
  t.teardown(() => (stopped ? undefined : app.stop()));
  const stored = await app.memory('/v1/memories', { method: 'POST', json: { scope, text: 'Sam plays the cello' } });
  t.equal(stored.status, 200);
  const storedAt = stored.headers.get('x-event-position')!;
  for (let s = 0; s < 10; s++) await app.events.append(`backup-bulk-${s}`, pings(500), 'no_stream');

  // The server's own writer keeps appending, one event per commit, until both backups are done.
  let appending = true;
  const appender = (async () => {
    for (let i = 0; appending; i++) await app.events.append(`backup-live-${i}`, pings(1), 'no_stream');
  })();
  const before = await app.events.headPosition();
  const [logOnly, withReadModels] = await Promise.all([
    backup(dataDir, [join(work, 'log-only')]).done,
    backup(dataDir, [join(work, 'with-read-models'), '--read-models', '--json']).done,
  ]);
  appending = false;
  await appender;
  const live = join(dataDir, 'events.db');

  // The same facts for people as with --json: each file with its size, then where, up to which position, how long.
  const [, bytes, sha256, dir, head, events] = /^FILE +BYTES +SHA256\nevents\.db +(\d+) +([0-9a-f]{64})\nbackup in (.+): the event log up to position (\d+) \((\d+) events?\), copied in \d+\.\d s\nmanifest backup-manifest\.json: SHA-256 [0-9a-f]{64}\n$/
    .exec(logOnly.stdout) ?? [];
  t.ok(dir, logOnly.stdout);
  const printed: Backup = { dir: dir!, files: [{ file: 'events.db', bytes: Number(bytes), sha256: sha256! }], head: Number(head), events: Number(events) };
  const copies: Array<[Run, Backup, string[]]> = [
    [logOnly, printed, ['events.db']],
    [withReadModels, JSON.parse(withReadModels.stdout) as Backup, ['readmodels.db', 'events.db']],
  ];
  t.match(JSON.parse(withReadModels.stdout), { elapsed_ms: Number }, '--json: the time taken too');
  // (t.match would take [] for any array.)
  t.strictSame(JSON.parse(withReadModels.stdout).leftover_removed, [], '--json: no leftover removed');
  for (const [run, result, files] of copies) {
    t.equal(run.code, 0, run.stderr);
    t.equal(run.stderr, '');
    const copy = join(result.dir, 'events.db');
    t.strictSame(readdirSync(result.dir).sort(), [...files, 'backup-manifest.json'].sort(), 'the backup is these files and its manifest, nothing else (no partial copy, no journal)');
    t.strictSame(result.files, files.map((file) => ({ file, bytes: statSync(join(result.dir, file)).size, sha256: sha256Of(join(result.dir, file)) })),
      'each file with its size and SHA-256, read models first');
    t.strictSame(query(copy, 'SELECT MAX(position) AS head, COUNT(*) AS events FROM events'), [{ head: result.head, events: result.events }], 'head and count are the copy\'s');
    t.ok(result.head > before, `taken while the server appended: the copy ends at ${result.head}, the log was at ${before} when the backup started`);

    t.strictSame(query(copy, EVENTS, result.head), query(live, EVENTS, result.head), 'the same events, ids and positions as the live log up to the copy\'s head');
    t.strictSame(query(copy, 'SELECT name, revision, last_position FROM streams ORDER BY name'),
      query(copy, 'SELECT stream AS name, MAX(revision) AS revision, MAX(position) AS last_position FROM events GROUP BY stream ORDER BY stream'),
      'its streams table is of the same snapshot as its events');
    for (const file of files) t.strictSame(query(join(result.dir, file), 'PRAGMA integrity_check'), [{ integrity_check: 'ok' }], `${file} passes integrity_check`);

    if (files.includes('readmodels.db')) {
      const checkpoints = query<{ projection: string; slot: string; position: number }>(join(result.dir, 'readmodels.db'), 'SELECT projection, slot, position FROM rm_checkpoints');
      t.ok(checkpoints.some((c) => c.position >= Number(storedAt)), 'the read models hold what the server had projected');
      t.strictSame(checkpoints.filter((c) => c.position > result.head), [], `no checkpoint is past the copy's log head (${result.head})`);
    }
  }

  stopped = true;
  await app.stop();
  // `DATA_DIR=<backup> npm start`: the memory stored before the backup is found, whether the read models were
  // copied or are rebuilt from the log at start.
  await Promise.all(copies.map(async ([, { dir }]) => {
    const server = start('api/main.ts', [], { DATA_DIR: dir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1', AUTH_JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info' });
    t.teardown(() => { server.child.kill('SIGKILL'); });
    await until(() => server.out.stdout.includes('cairn started') || server.child.exitCode !== null);
    const memoryUrl = (JSON.parse(server.out.stdout.split('\n').find((line) => line.includes('cairn started'))!) as { memory: string }).memory;
    const res = await fetch(`${memoryUrl}/v1/search`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Min-Position': storedAt }, body: JSON.stringify({ scope, query: 'cello' }),
    });
    t.equal(res.status, 200, dir);
    t.equal(((await res.json()) as { results: Array<{ text: string }> }).results[0]?.text, 'Sam plays the cello', `found on ${dir}`);
    server.child.kill('SIGTERM');
    await once(server.child, 'close');
  }));
});

t.test('refused, with nothing written: a DIR that is not empty, a DATA_DIR without a log, EventStoreDB or MongoDB', async (t) => {
  const dataDir = await dataDirWithLog('refusals');
  const logOnly = await dataDirWithLog('refusals-no-read-models', false);
  const full = join(work, 'full');
  mkdirSync(full);
  writeFileSync(join(full, 'notes.txt'), 'keep me');
  const file = join(work, 'a-file');
  writeFileSync(file, '');
  // What a killed backup leaves (see below), beside a file that is not a backup's.
  const mixed = join(work, 'leftover-and-notes');
  mkdirSync(mixed);
  for (const name of ['backup.lock', 'events.db.partial', 'notes.txt']) writeFileSync(join(mixed, name), '');
  const fresh = (name: string) => join(work, `refused-${name}`);

  const cases: Array<{ name: string; dataDir?: string; args: string[]; env?: NodeJS.ProcessEnv; stderr: RegExp; untouched: string }> = [
    { name: 'not empty', args: [full], stderr: /^error: .*full is not empty: a backup goes into a new or an empty directory\n$/, untouched: full },
    { name: 'a leftover and more', args: [mixed], stderr: /^error: .*leftover-and-notes is not empty: a backup goes into a new or an empty directory\n$/, untouched: mixed },
    { name: 'a file', args: [file], stderr: /^error: .*a-file is not a directory\n$/, untouched: file },
    { name: 'no parent', args: [join(fresh('parent'), 'backup')], stderr: /^error: cannot create .*refused-parent\/backup: .*refused-parent does not exist\n$/, untouched: fresh('parent') },
    { name: 'no log', dataDir: join(work, 'typo'), args: [fresh('typo')], stderr: /^error: no event log in .*typo \(set DATA_DIR/, untouched: fresh('typo') },
    { name: 'no read models', dataDir: logOnly, args: [fresh('no-read-models'), '--read-models'], stderr: /^error: no read models in .*\(readmodels\.db\) to copy; leave out --read-models\n$/, untouched: fresh('no-read-models') },
    { name: 'EventStoreDB', env: { EVENTSTORE_URL: 'esdb://localhost:2113?tls=false' }, args: [fresh('esdb')],
      stderr: /^error: EVENTSTORE_URL is set: backup copies only the embedded event log in DATA_DIR; .*its file-copy backup.*rebuilt from the log\n$/, untouched: fresh('esdb') },
    { name: 'MongoDB read models', env: { MONGODB_URL: 'mongodb://localhost:27017' }, args: [fresh('mongo'), '--read-models'],
      stderr: /^error: MONGODB_URL is set: the read models are in MongoDB, not in DATA_DIR; leave out --read-models/, untouched: fresh('mongo') },
  ];
  const before = (path: string) => (existsSync(path) ? (statSync(path).isDirectory() ? readdirSync(path) : 'a file') : 'absent');
  const states = cases.map((c) => before(c.untouched));
  const [help, ...runs] = await Promise.all([
    backup(dataDir, ['--help']).done,
    ...cases.map((c) => backup(c.dataDir ?? dataDir, c.args, c.env).done),
  ]);
  t.equal(help.code, 0);
  t.match(help.stdout, /Usage: ops backup \[options\] <dir>[\s\S]*--read-models[\s\S]*To restore: check it with `ops verify-backup DIR`, stop the server/);
  runs.forEach((run, i) => {
    const c = cases[i]!;
    t.equal(run.code, 1, c.name);
    t.equal(run.stdout, '', `${c.name}: no output`);
    t.match(run.stderr, c.stderr, `${c.name}: one line naming the reason`);
    t.strictSame(before(c.untouched), states[i], `${c.name}: nothing written`);
  });
  t.notOk(existsSync(join(work, 'typo')), 'the mistyped DATA_DIR is not created');
});

t.test('stopped (SIGTERM, SIGINT) or failing during the copy: what was written is removed', async (t) => {
  const dataDir = await dataDirWithLog('locked');
  const lock = holdLog(dataDir);
  t.teardown(() => lock.close());
  const existing = join(work, 'stopped-existing');
  mkdirSync(existing);

  const cases = [
    { dir: join(work, 'stopped-new'), signal: 'SIGTERM', code: 143, after: 'absent' },
    { dir: existing, signal: 'SIGINT', code: 130, after: 'empty' },
    { dir: join(work, 'failed-new'), code: 1, after: 'absent' },
  ] as const;
  await Promise.all(cases.map(async (c) => {
    const run = backup(dataDir, [c.dir, '--read-models']);
    if ('signal' in c) {
      t.teardown(() => { run.child.kill('SIGKILL'); for (const pid of copying(c.dir)) process.kill(pid, 'SIGKILL'); });
      await until(() => existsSync(join(c.dir, 'readmodels.db.partial')) || run.child.exitCode !== null);
      // Frozen in the middle of its copy, the copying process would never end by itself (nor its wait for the log):
      // the signal ends the copy only by killing it. No race with a 5 s busy timeout, however loaded the machine.
      const [copier] = copying(c.dir);
      t.ok(copier, `${c.signal}: the copy runs in a process of its own`);
      if (copier !== undefined) process.kill(copier, 'SIGSTOP');
      const sent = Date.now();
      run.child.kill(c.signal);
      // (The bound only turns a hang into a failure.)
      const ended = await within(run.done, 30_000);
      t.ok(ended, `${c.signal} ended the frozen copy (in ${Date.now() - sent} ms), not waiting for it to end by itself`);
      if (!ended) run.child.kill('SIGKILL');
      t.strictSame(copying(c.dir), [], `${c.signal}: no copying process is left`);
    }
    const { code, stdout, stderr } = await run.done;
    t.equal(code, c.code, `${'signal' in c ? c.signal : 'failure'}: ${stderr}`);
    t.equal(stdout, '');
    if ('signal' in c) {
      t.match(stderr, /^error: backup into .* interrupted; nothing of it is left\n$/);
    } else {
      t.match(stderr, /^error: copying .*locked\/events\.db failed: database is locked\n$/);
    }
    if (c.after === 'absent') t.notOk(existsSync(c.dir), `${c.dir}: made by the backup, removed`);
    else t.strictSame(readdirSync(c.dir), [], `${c.dir}: there before, left empty`);
  }));
});

t.test('killed with kill -9 in the middle of its copy: the next backup into the directory removes what it left, and is written', async (t) => {
  // A log of 94 MB: its copy takes long enough (a few hundred ms) to be killed in the middle of it.
  const dataDir = join(work, 'large');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  const padding = 'x'.repeat(4000);
  await Promise.all(Array.from({ length: 100 }, (_, s) => events.append(`backup-large-${s}`,
    pings(200).map((event) => ({ ...event, data: { ...event.data, padding } })), 'no_stream')));
  await events.close();
  const dir = join(work, 'killed');
  const copy = join(dir, 'events.db.partial');

  const killed = backup(dataDir, [dir]);
  // The copying process runs in slices of a few milliseconds (SIGCONT … SIGSTOP) until its copy has begun, and is
  // killed frozen: on a busy machine, a copy let run while this process waits for the CPU could reach its end first.
  await until(() => copying(dir).length > 0 || killed.child.exitCode !== null);
  const [copier] = copying(dir);
  t.ok(copier, 'the copy runs in a process of its own');
  if (copier !== undefined) {
    process.kill(copier, 'SIGSTOP');
    while ((statSync(copy, { throwIfNoEntry: false })?.size ?? 0) === 0) {
      process.kill(copier, 'SIGCONT');
      await new Promise((resolve) => setTimeout(resolve, 2));
      process.kill(copier, 'SIGSTOP');
    }
  }
  killed.child.kill('SIGKILL');
  t.equal((await killed.done).code, null, 'killed before it was done');
  // Its copying process, resumed, reads the end of its pipe from the killed one, and ends too.
  if (copier !== undefined) process.kill(copier, 'SIGCONT');
  await until(() => copying(dir).length === 0);
  const left = readdirSync(dir).sort();
  const copied = statSync(copy).size;
  t.ok(left.includes('backup.lock'), `left: ${left.join(', ')}`);

  const again = await backup(dataDir, [dir, '--json']).done;
  t.equal(again.code, 0, again.stderr);
  const removed = left.filter((name) => name !== 'backup.lock');
  t.equal(again.stderr, `removed what a backup into ${dir} that did not finish (killed, or its machine stopped) left there: ${removed.join(', ')}\n`,
    'says what it removed');
  const result = JSON.parse(again.stdout) as Backup & { leftover_removed: string[] };
  t.strictSame(result.leftover_removed, removed, '--json: what it removed');
  t.strictSame(readdirSync(dir).sort(), ['backup-manifest.json', 'events.db'], 'the backup and nothing else');
  t.ok(copied < result.files[0]!.bytes, `killed in the middle of the copy: ${copied} of ${result.files[0]!.bytes} bytes were copied`);
  t.strictSame(query(join(dir, 'events.db'), 'PRAGMA integrity_check'), [{ integrity_check: 'ok' }]);
  const all = 'SELECT MAX(position) AS head, COUNT(*) AS events, SUM(LENGTH(data)) AS bytes FROM events';
  t.strictSame(query(join(dir, 'events.db'), all), query(join(dataDir, 'events.db'), all), 'all the events of the log');
  t.match(result, { head: 20000, events: 20000 });
});

t.test('a backup into a directory another backup is writing into is refused, naming its pid; killed, that one leaves its directory to the next', async (t) => {
  const dataDir = await dataDirWithLog('concurrent');
  const lock = holdLog(dataDir);
  t.teardown(() => lock.close());
  const dir = join(work, 'concurrent-backup');

  const first = backup(dataDir, [dir, '--read-models']);
  await until(() => existsSync(join(dir, 'readmodels.db.partial')) || first.child.exitCode !== null);
  const partialAt = Date.now();
  // Its copying process, stopped at once: it has waited for the log for at most the time since its first copy
  // began, and would have all but that of its 5 s busy timeout left to wait should it outlive its backup.
  const [copier] = copying(dir);
  t.ok(copier, 'the copy runs in a process of its own');
  process.kill(copier!, 'SIGSTOP');
  const frozenAt = Date.now();
  // What the frozen copy has written (the copy's target, and its rollback journal when frozen in the middle of a write).
  const files = () => readdirSync(dir).sort().map((name) => { const { size, mtimeMs } = statSync(join(dir, name)); return { name, size, mtimeMs }; });
  const frozen = files();
  t.strictSame(frozen.map((f) => f.name).filter((name) => !name.endsWith('-journal')), ['backup.lock', 'readmodels.db.partial'], 'the running backup\'s lock and copy');
  t.teardown(() => { for (const pid of copying(dir)) process.kill(pid, 'SIGKILL'); });
  const refused = await backup(dataDir, [dir, '--json']).done;
  t.equal(refused.code, 1);
  t.equal(refused.stdout, '');
  t.match(refused.stderr, new RegExp(`^error: another backup is writing into ${dir} \\(pid ${first.child.pid} on ${hostname()}, started [-0-9T:.]+Z\\): `
    + 'wait for it to end, or stop it\n$'));
  t.strictSame(files(), frozen, 'the running backup\'s files are untouched');

  // Its copying process holds the lock too: stopped while the backup is killed, it still keeps the directory.
  first.child.kill('SIGKILL');
  await first.done;
  const whileStopped = await backup(dataDir, [dir]).done;
  t.equal(whileStopped.code, 1);
  t.match(whileStopped.stderr, /^error: another backup is writing into /);
  // Resumed, it finds its backup gone and ends at once, not when its wait for the log does. That wait has at least
  // 4.9 s (SQLite may give up one 100 ms step early) less what passed before it was stopped still to go: the bound
  // stays a second under it, so it rules that out however long the machine took to stop it.
  const leftToWait = 4900 - (frozenAt - partialAt);
  const resumed = Date.now();
  process.kill(copier!, 'SIGCONT');
  await until(() => copying(dir).length === 0);
  const endedIn = Date.now() - resumed;
  t.ok(endedIn < leftToWait - 1000, `the copy ended ${endedIn} ms after it was resumed, not after the ${leftToWait} ms its wait for the log had left`);

  lock.close();
  const next = await backup(dataDir, [dir, '--read-models']).done;
  t.equal(next.code, 0, next.stderr);
  // With its rollback journal when the copy was frozen in the middle of a write (see `frozen` above).
  t.match(next.stderr, new RegExp(`^removed what a backup into ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} that did not finish \\(killed, or its machine stopped\\) left there: readmodels\\.db\\.partial(, readmodels\\.db\\.partial-journal)?\n$`));
  t.match(next.stdout, /^FILE +BYTES +SHA256\nreadmodels\.db +\d+ +[0-9a-f]{64}\nevents\.db +\d+ +[0-9a-f]{64}\nbackup in .*: the event log up to position 3 \(3 events\)/);
  t.strictSame(readdirSync(dir).sort(), ['backup-manifest.json', 'events.db', 'readmodels.db']);
});

import Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, chownSync, cpSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { startTestCairn, TEST_JWT_SECRET } from '../support/cairn.js';
import { ROOT as root, startScript } from '../support/processes.js';

/**
 * `ops backup` as an audit-heavy operator relies on it: a backup taken under concurrent HTTP writers is checked by
 * `ops verify-backup`, restored, and holds every acknowledged write once; a damaged, partial or mismatched backup
 * is named as not restorable; and the copies are no more readable than the files they copy.
 */
t.setTimeout(300_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-backup-verify-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const start = startScript;

const ops = (dataDir: string, args: string[]) => start('ops/cli.ts', args, { DATA_DIR: dataDir }).done;

interface Verified {
  dir: string; restorable: boolean; files: Array<{ file: string; bytes: number; check: string }>;
  head: number | null; events: number | null; read_models: Array<{ projection: string; position: number }> | null; problems: string[];
}

function query<T>(file: string, sql: string): T[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.prepare(sql).all() as T[];
  } finally {
    db.close();
  }
}

function write(file: string, sql: string): void {
  const db = new Database(file, { fileMustExist: true });
  try {
    db.exec(sql);
  } finally {
    db.close();
  }
}

/** Every file of a directory with its SHA-256: what verifying must leave as it was. */
const contents = (dir: string) => readdirSync(dir).sort().map((name) => [name, createHash('sha256').update(readFileSync(join(dir, name))).digest('hex')]);

const metadata = () => ({ correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() });

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

t.test('a backup taken while 8 clients write: verified, restored, and every acknowledged write is there once', async (t) => {
  const dataDir = join(work, 'live');
  const app = await startTestCairn({}, { dataDir });
  let stopped = false;
  t.teardown(() => (stopped ? undefined : app.stop()));
  const acked: Array<{ writer: number; text: string; position: number }> = [];
  let writing = true;
  let backupStartedAt = Infinity;
  const ackedBeforeBackup: string[] = [];
  const writers = Array.from({ length: 8 }, async (_, writer) => {
    for (let i = 0; writing; i++) {
      const text = `writer ${writer} note ${i}`;
      const res = await app.memory('/v1/memories', { method: 'POST', json: { scope: { agent: 'audit', user: `w${writer}` }, text } });
      if (res.status !== 200) throw new Error(`store answered ${res.status}: ${await res.text()}`);
      acked.push({ writer, text, position: Number(res.headers.get('x-event-position')) });
      if (Date.now() < backupStartedAt) ackedBeforeBackup.push(text);
    }
  });
  await until(() => acked.length >= 200);
  const dir = join(work, 'under-load');
  backupStartedAt = Date.now();
  const taken = await ops(dataDir, ['backup', dir, '--read-models', '--json']);
  writing = false;
  await Promise.all(writers);
  stopped = true;
  await app.stop();
  t.equal(taken.code, 0, taken.stderr);
  const { head } = JSON.parse(taken.stdout) as { head: number };
  t.ok(acked.some((a) => a.position > head), `the clients wrote on after the copy's snapshot (head ${head}, ${acked.length} writes)`);

  const before = contents(dir);
  const verified = await ops(dataDir, ['verify-backup', dir, '--json']);
  t.equal(verified.code, 0, verified.stderr);
  t.equal(verified.stderr, '');
  const report = JSON.parse(verified.stdout) as Verified;
  t.match(report, { dir, restorable: true, head, events: head, problems: [] });
  t.strictSame(report.files.map((f) => [f.file, f.check]), [['readmodels.db', 'ok'], ['events.db', 'ok']]);
  t.ok(report.read_models!.length > 0 && report.read_models!.every((cp) => cp.position <= head), 'read models at or behind the log');
  t.strictSame(contents(dir), before, 'verifying wrote nothing into the backup');
  const human = await ops(dataDir, ['verify-backup', dir]);
  t.equal(human.code, 0, human.stderr);
  t.match(human.stdout, new RegExp(`^FILE +BYTES +CHECK\\nreadmodels\\.db +\\d+ +ok\\nevents\\.db +\\d+ +ok\\nbackup in ${dir}: restorable; the event log up to position ${head} \\(${head} events\\), \\d+ read models at or behind it\\n`
    + `every file as backed up \\(by Cairn [^,]+, finished [-0-9T:.]+Z\\); manifest backup-manifest\\.json: SHA-256 [0-9a-f]{64}\\n$`));

  // Restored as documented: DATA_DIR pointed at the backup. Each scope holds exactly the writes acknowledged at
  // positions up to the copy's head (those acknowledged before the backup began among them), each once.
  const server = start('api/main.ts', [], { DATA_DIR: dir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1', AUTH_JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info' });
  t.teardown(() => { server.child.kill('SIGKILL'); });
  await until(() => server.out.stdout.includes('cairn started') || server.child.exitCode !== null);
  const memoryUrl = (JSON.parse(server.out.stdout.split('\n').find((line) => line.includes('cairn started'))!) as { memory: string }).memory;
  const restored: string[] = [];
  for (let writer = 0; writer < 8; writer++) {
    const res = await fetch(`${memoryUrl}/v1/export?agent=audit&user=w${writer}`, { headers: { 'X-Min-Position': String(head) } });
    t.equal(res.status, 200);
    const { memories } = (await res.json()) as { memories: Array<{ text: string }> };
    const expected = acked.filter((a) => a.writer === writer && a.position <= head).map((a) => a.text).sort();
    t.strictSame(memories.map((m) => m.text).sort(), expected, `scope w${writer}: ${expected.length} memories`);
    restored.push(...memories.map((m) => m.text));
  }
  t.ok(ackedBeforeBackup.length >= 200 && ackedBeforeBackup.every((text) => restored.includes(text)), 'every write acknowledged before the backup began is restored');
  server.child.kill('SIGTERM');
  await once(server.child, 'close');
});

t.test('not restorable, exit code 3, each problem named, nothing written: unfinished, damaged, with gaps, read models ahead', async (t) => {
  const dataDir = join(work, 'small');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  for (let s = 0; s < 20; s++) {
    await events.append(`verify-${s}`, Array.from({ length: 20 }, (_, i) => ({ id: randomUUID(), type: 'VerifyTestPinged', data: { i, padding: 'x'.repeat(500) }, metadata: metadata() })), 'no_stream');
  }
  await events.close();
  await new EmbeddedReadStore(join(dataDir, 'readmodels.db'), { checkpointer: false }).close();
  const good = join(work, 'good');
  const taken = await ops(dataDir, ['backup', good, '--read-models']);
  t.equal(taken.code, 0, taken.stderr);
  const variant = (name: string, change: (dir: string) => void) => {
    const dir = join(work, name);
    cpSync(good, dir, { recursive: true });
    change(dir);
    return dir;
  };
  // Each change also makes the file another than the one backed up, which the manifest shows (ops-backup-manifest.test.ts).
  const changed = (file: string) => new RegExp(`^${file.replace('.', '\\.')} is not the file backed up: (\\d+ bytes|its SHA-256 is [0-9a-f]{64}), the manifest says ([0-9a-f]{64}|\\d+)$`);
  const cases: Array<{ name: string; dir: string; problems: RegExp[]; checks?: string[] }> = [
    { name: 'unfinished', dir: variant('unfinished', (dir) => { rmSync(join(dir, 'events.db')); for (const f of ['backup.lock', 'events.db.partial']) writeFileSync(join(dir, f), ''); }),
      problems: [/^a backup is writing into it, or did not finish \(killed, or its machine stopped\): backup\.lock, events\.db\.partial; take the backup again$/, /^no event log \(events\.db\)$/,
        /^events\.db is missing: the manifest lists it \(\d+ bytes\)$/],
      checks: ['ok'] },
    { name: 'a page overwritten', dir: variant('damaged', (dir) => {
      const fd = openSync(join(dir, 'events.db'), 'r+');
      writeSync(fd, Buffer.alloc(64, 0xff), 0, 64, 3 * 4096 + 8);
      closeSync(fd);
    }), problems: [/^events\.db is damaged: .+/, changed('events.db')], checks: ['ok', 'damaged'] },
    { name: 'cut short', dir: variant('cut-short', (dir) => truncateSync(join(dir, 'events.db'), 20_000)),
      problems: [/^events\.db is damaged: .+/, changed('events.db')], checks: ['ok', 'damaged'] },
    { name: 'another database', dir: variant('another', (dir) => cpSync(join(dir, 'readmodels.db'), join(dir, 'events.db'))),
      problems: [/^events\.db cannot be read: it is not a store of Cairn \(no such table: events\)$/, changed('events.db')], checks: ['ok', 'unreadable'] },
    { name: 'an event missing', dir: variant('gap', (dir) => write(join(dir, 'events.db'), 'DELETE FROM events WHERE position = 7')),
      problems: [/^the event log has gaps: 399 events between positions 1 and 400$/, /^1 stream of the event log does not agree with its streams index or has revisions missing: "verify-0"$/,
        changed('events.db')],
      checks: ['ok', 'not whole'] },
    { name: 'read models of a longer log', dir: variant('ahead', (dir) => write(join(dir, 'readmodels.db'),
      "INSERT INTO rm_checkpoints (projection, slot, position, generation) VALUES ('memories', 'live', 401, 1), ('agents', 'live', 400, 1)")),
    problems: [/^the read models are ahead of the event log: memories at position 401, but the log ends at position 400; a server would refuse to start on them/,
      changed('readmodels.db')],
    checks: ['ahead of the log', 'ok'] },
  ];
  const states = cases.map((c) => contents(c.dir));
  const runs = await Promise.all([...cases.map((c) => ops(dataDir, ['verify-backup', c.dir, '--json'])), ops(dataDir, ['verify-backup', join(work, 'absent')]), ops(dataDir, ['verify-backup', good])]);
  cases.forEach((c, i) => {
    const run = runs[i]!;
    t.equal(run.code, 3, `${c.name}: ${run.stderr}`);
    const report = JSON.parse(run.stdout) as Verified;
    t.equal(report.restorable, false, c.name);
    t.equal(report.problems.length, c.problems.length, `${c.name}: ${report.problems.join(' | ')}`);
    c.problems.forEach((problem, j) => t.match(report.problems[j], problem, c.name));
    if (c.checks) t.strictSame(report.files.map((f) => f.check), c.checks, `${c.name}: each file's check`);
    t.equal(run.stderr, `${report.problems.map((p) => `not restorable: ${p}\n`).join('')}error: ${c.dir} is not a restorable backup (${c.problems.length} problem${c.problems.length === 1 ? '' : 's'})\n`);
    t.strictSame(contents(c.dir), states[i], `${c.name}: nothing written`);
  });
  const [absent, fine] = runs.slice(cases.length);
  t.equal(absent!.code, 1);
  t.match(absent!.stderr, /^error: .*absent does not exist\n$/);
  t.equal(fine!.code, 0, fine!.stderr);
});

t.test('the copies are no more readable than the files they copy, and (run as root) have their owner', async (t) => {
  const dataDir = join(work, 'private');
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  await events.append('private-0', [{ id: randomUUID(), type: 'VerifyTestPinged', data: {}, metadata: metadata() }], 'no_stream');
  await events.close();
  await new EmbeddedReadStore(join(dataDir, 'readmodels.db'), { checkpointer: false }).close();
  chmodSync(dataDir, 0o750);
  chmodSync(join(dataDir, 'events.db'), 0o640);
  chmodSync(join(dataDir, 'readmodels.db'), 0o600);
  const root = process.getuid?.() === 0;
  // The account a service runs as: another than the operator's, which only root can arrange.
  const owner = 4321;
  if (root) for (const path of [dataDir, join(dataDir, 'events.db'), join(dataDir, 'readmodels.db')]) chownSync(path, owner, owner);
  const made = join(work, 'private-backup');
  const existing = join(work, 'private-existing');
  mkdirSync(existing, { mode: 0o755 });
  chmodSync(existing, 0o755);
  const runs = await Promise.all([ops(dataDir, ['backup', made, '--read-models']), ops(dataDir, ['backup', existing, '--read-models'])]);
  for (const run of runs) t.equal(run.code, 0, run.stderr);
  const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);
  t.equal(mode(made), '750', 'a directory the backup makes has DATA_DIR\'s permissions');
  t.equal(mode(existing), '755', 'a directory that was there keeps its own');
  for (const dir of [made, existing]) {
    t.equal(mode(join(dir, 'events.db')), '640', `${dir}: events.db as the log`);
    t.equal(mode(join(dir, 'readmodels.db')), '600', `${dir}: readmodels.db as the read models`);
    if (root) for (const file of ['events.db', 'readmodels.db']) t.equal(statSync(join(dir, file)).uid, owner, `${dir}: ${file} owned by DATA_DIR's owner`);
  }
  if (root) t.equal(statSync(made).uid, owner, 'and the directory it made');
});

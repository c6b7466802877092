import t from 'tap';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { loadConfig } from '../../infra/config.js';
import { createLogger } from '../../infra/logger.js';
import { openStores } from '../../infra/stores.js';
import { allProjections } from '../../projections/index.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';
import { startScript } from '../support/processes.js';
import { tempDir } from '../support/temp.js';

// The event log restored from an older backup under a running server (SQLite's online backup API writing the backup into
// the live events.db, as `sqlite3 events.db ".restore backup.db"` does), then mended with `ops projections rebuild` from
// another process while the server runs: the server must take the rebuilt generations up by itself and apply every
// event written since the restore, once, without a restart.

const scope = { agent: 'ava', user: 'sam' };

async function store(app: TestCairn, text: string): Promise<number> {
  const res = await app.memory('/v1/memories', { method: 'POST', json: { scope, text } });
  if (res.status !== 200) throw new Error(`store: ${res.status} ${await res.text()}`);
  return Number(res.headers.get('X-Event-Position'));
}

async function exported(app: TestCairn, minPosition: number): Promise<string[]> {
  const res = await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`, { headers: { 'X-Min-Position': String(minPosition) } });
  if (res.status !== 200) throw new Error(`export: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { memories: Array<{ text: string }> }).memories.map((m) => m.text);
}

async function searched(app: TestCairn, query: string, minPosition: number, mode = 'hybrid'): Promise<string[]> {
  const res = await app.memory('/v1/search', { method: 'POST', json: { scope, query, mode, limit: 10 }, headers: { 'X-Min-Position': String(minPosition) } });
  if (res.status !== 200) throw new Error(`search: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { results: Array<{ text: string }> }).results.map((m) => m.text);
}

interface Ready { status: number; body: { detail?: string; projections: Array<{ projection: string; position: number; ready: boolean }> } }
async function readyz(app: TestCairn): Promise<Ready> {
  const res = await app.memory('/readyz');
  return { status: res.status, body: (await res.json()) as Ready['body'] };
}

/** Polls /readyz until `until` holds, for at most `ms` (the runner takes a rebuilt generation up within a second or so). */
async function readyzUntil(app: TestCairn, until: (r: Ready) => boolean, ms = 10_000): Promise<Ready> {
  const end = Date.now() + ms;
  for (;;) {
    const r = await readyz(app);
    if (until(r) || Date.now() > end) return r;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Runs one of Cairn's entry points as a process, to its end (as operators run it: see startScript). */
const run = (script: string, args: string[], env: NodeJS.ProcessEnv) => startScript(script, args, env).done;

/** Waits (bounded) until every live read model's stored checkpoint, as `ops projections status` reads it, is at `position`. */
async function checkpointsAt(dataDir: string, position: number): Promise<void> {
  const db = new Database(join(dataDir, 'readmodels.db'), { readonly: true });
  try {
    const behind = db.prepare("SELECT projection FROM rm_checkpoints WHERE slot = 'live' AND position < ?").pluck();
    await until(`every live checkpoint is stored at ${position}`, () => behind.all(position).length === 0, 10_000);
  } finally {
    db.close();
  }
}

/** A consistent copy of the log (what `ops backup` makes), taken while the server runs. */
function backupLog(from: string, to: string): void {
  const db = new Database(from, { readonly: true });
  db.exec(`VACUUM INTO '${to.replaceAll("'", "''")}'`);
  db.close();
}

/** Writes the backup into the live log through SQLite's online backup API (locks and WAL respected: the server's connections see the restored log). */
async function restoreLogUnder(backup: string, live: string): Promise<void> {
  const source = new Database(backup, { readonly: true });
  try {
    await source.backup(live);
  } finally {
    source.close();
  }
}

/**
 * Where the embedded event store's in-memory tail still held the lost events (the projection thread's store, which
 * reads announced commits into it; the HTTP thread's when nothing was appended since the restore), a runner resuming
 * from the rebuilt checkpoint was served them from there: the store now checks its tail against the log.
 */
const cases = [
  { thread: 'true', writeBefore: false },
  { thread: 'true', writeBefore: true },
  { thread: 'false', writeBefore: false },
  // The write before the rebuild, at a position the HTTP thread's tail held, restarts that tail.
  { thread: 'false', writeBefore: true },
];
for (const { thread, writeBefore } of cases) {
  t.test(`PROJECTIONS_THREAD=${thread}: a log restored under a running server, ${writeBefore ? 'written to, then ' : ''}mended by \`ops projections rebuild\` from another process, without a restart`, async (t) => {
    const dataDir = tempDir(t, 'cairn-restored-running-');
    const backup = join(tempDir(t, 'cairn-restored-running-backup-'), 'events.db');
    const app = await startTestCairn({ PROJECTIONS_THREAD: thread }, { dataDir });
    t.teardown(() => app.stop());

    t.equal(await store(app, 'Sam plays the cello'), 1);
    backupLog(join(dataDir, 'events.db'), backup);
    await store(app, 'Sam moved to Lisbon');
    const lost = await store(app, 'Sam is allergic to peanuts');
    t.equal(lost, 3);
    t.same(await exported(app, lost), ['Sam plays the cello', 'Sam moved to Lisbon', 'Sam is allergic to peanuts']);
    t.same(await searched(app, 'peanuts', lost, 'lexical'), ['Sam is allergic to peanuts'], 'in the in-process index too');

    // Every runner has stored its checkpoint at 3: those that read no memory event store theirs lazily, within about a
    // second. Restored before that, a runner that had read past 3 would store 3 a moment after the status below,
    // ahead of the log but not among the read models it lists (and rebuilt).
    await checkpointsAt(dataDir, lost);
    // The older log goes in under the running server: its read models are now ahead of it.
    await restoreLogUnder(backup, join(dataDir, 'events.db'));
    const notReady = await readyzUntil(app, (r) => r.status === 503);
    t.equal(notReady.status, 503, 'not ready: read models past the end of the log');
    t.match(notReady.body.detail, /memories is at position 3, past the end of the event log \(1\)/);

    // (c) Written to before the rebuild: position 2, which the stale read models had seen with other content.
    const expected = ['Sam plays the cello'];
    if (writeBefore) {
      t.equal(await store(app, 'Sam has a cat named Miso'), 2, 'appended right after the restored log\'s end');
      expected.push('Sam has a cat named Miso');
    }

    const status = await run('ops/cli.ts', ['projections', 'status', '--json'], { DATA_DIR: dataDir });
    t.equal(status.code, 3, '`ops projections status` exits 3: read models ahead of the log');
    const ahead = (JSON.parse(status.stdout) as Array<{ projection: string; ahead: boolean }>).filter((s) => s.ahead).map((s) => s.projection);
    t.ok(ahead.includes('memories') && ahead.includes('memory-vectors'), `the memory read models are ahead (ahead: ${ahead.join(', ')})`);
    // `memories` through the CLI, the others (the same code) in a store connection of this test's own: fewer processes.
    const rebuilt = await run('ops/cli.ts', ['projections', 'rebuild', 'memories', '--json'], { DATA_DIR: dataDir });
    t.equal(rebuilt.code, 0, `ops projections rebuild memories: ${rebuilt.stderr}`);
    const config = loadConfig({ DATA_DIR: dataDir });
    const { events, reads } = await openStores(config);
    for (const projection of allProjections(config, {}, createLogger('silent')).filter((p) => p.name !== 'memories' && ahead.includes(p.name))) {
      await rebuildProjection(events, reads, projection);
    }
    await reads.close();
    await events.close();
    const after = await run('ops/cli.ts', ['projections', 'status', '--json'], { DATA_DIR: dataDir });
    t.equal(after.code, 0, `none ahead, failing or paused after the rebuilds: ${after.stderr}`);

    // Ready again without a restart: the running server took the rebuilt generations up.
    const ready = await readyzUntil(app, (r) => r.status === 200);
    t.equal(ready.status, 200, `ready again: ${ready.body.detail ?? ''}`);

    // Writes after the rebuild, at positions the stale read models had seen too (up to 3), and past them: each read
    // with its X-Min-Position finds the restored log and every write since, once, and nothing of the lost ones.
    for (const text of ['Sam drinks green tea', 'Sam runs on Sundays', 'Sam speaks Portuguese']) {
      const position = await store(app, text);
      expected.push(text);
      t.equal(position, expected.length, `${text}: appended at ${expected.length}`);
      t.same(await exported(app, position), expected, `export at ${position}: the restored log and each write since, once`);
      for (const mode of ['lexical', 'semantic', 'hybrid']) {
        const found = await searched(app, text, position, mode);
        t.equal(found[0], text, `${mode} at ${position}: the latest write is found first`);
        t.notOk(found.some((f) => /Lisbon|peanuts/.test(f)), `${mode} at ${position}: the lost memories are not found`);
      }
      t.same(await searched(app, 'Lisbon peanuts', position, 'lexical'), [], 'no lost word in the lexical index');
    }
    t.equal((await readyz(app)).status, 200, 'still ready');
  });
}

t.test('a lost text sent again after the restore is stored again, not answered from the state the command bus had cached', async (t) => {
  const dataDir = tempDir(t, 'cairn-restored-running-');
  const backup = join(tempDir(t, 'cairn-restored-running-backup-'), 'events.db');
  const app = await startTestCairn({ PROJECTIONS_THREAD: 'false' }, { dataDir });
  t.teardown(() => app.stop());
  await store(app, 'Sam plays the cello');
  backupLog(join(dataDir, 'events.db'), backup);
  t.equal(await store(app, 'Sam is allergic to peanuts'), 2);
  await restoreLogUnder(backup, join(dataDir, 'events.db'));
  t.equal(await app.events.headPosition(), 1, 'the restored log ends before it');
  // The bus's cached state of the scope still holds the lost memory: deciding on it, the store would change nothing.
  const again = await store(app, 'Sam is allergic to peanuts');
  const log = await app.events.readAll(0, { limit: 10 });
  t.strictSame(log.map((e) => [e.position, e.type, (e.data as { text?: string }).text]), [
    [1, 'MemoryStored', 'Sam plays the cello'],
    [2, 'MemoryStored', 'Sam is allergic to peanuts'],
  ], 'the store is in the log again');
  t.equal(again, 2, 'answered with the position of its new event');
});

import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { loadConfig } from '../../infra/config.js';
import { createLogger } from '../../infra/logger.js';
import { openStores } from '../../infra/stores.js';
import { ReadModelsAheadError } from '../../projections/ahead.js';
import { allProjections } from '../../projections/index.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { projectionStatus } from '../../projections/runner.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';

const scope = { agent: 'ava', user: 'sam' };

async function store(app: TestCairn, text: string): Promise<void> {
  const res = await app.memory('/v1/memories', { method: 'POST', json: { scope, text } });
  if (res.status !== 200) throw new Error(`store: ${res.status} ${await res.text()}`);
}

async function exported(app: TestCairn): Promise<string[]> {
  const res = await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`);
  return ((await res.json()) as { memories: Array<{ text: string }> }).memories.map((m) => m.text);
}

async function searched(app: TestCairn, query: string): Promise<string[]> {
  const res = await app.memory('/v1/search', { method: 'POST', json: { scope, query, mode: 'hybrid' } });
  return ((await res.json()) as { results: Array<{ text: string }> }).results.map((m) => m.text);
}

/** Runs one of Cairn's entry points as a process, to its end. */
async function run(script: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL(`../../${script}`, import.meta.url)), ...args], {
    env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
  child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const [code] = (await once(child, 'exit')) as [number];
  return { code, stdout, stderr };
}

/** A consistent copy of a SQLite file (what `ops backup` makes), taken while nothing writes to it. */
function copyLog(from: string, to: string): void {
  const db = new Database(from, { readonly: true });
  db.exec(`VACUUM INTO '${to.replaceAll("'", "''")}'`);
  db.close();
}

t.test('read models ahead of a restored (older) log: the server refuses to start, and a rebuild mends them', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-restored-'));
  const backup = join(mkdtempSync(join(tmpdir(), 'cairn-restored-backup-')), 'events.db');
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

  let app = await startTestCairn({}, { dataDir });
  await store(app, 'Sam plays the cello');
  await app.stop();
  copyLog(join(dataDir, 'events.db'), backup);

  app = await startTestCairn({}, { dataDir });
  await store(app, 'Sam moved to Lisbon');
  await store(app, 'Sam is allergic to peanuts');
  t.same(await exported(app), ['Sam plays the cello', 'Sam moved to Lisbon', 'Sam is allergic to peanuts']);
  await app.stop();

  // The operator restores the older log and keeps the newer read models.
  for (const suffix of ['', '-wal', '-shm']) rmSync(join(dataDir, `events.db${suffix}`), { force: true });
  copyFileSync(backup, join(dataDir, 'events.db'));

  // Started on them, every read model would take the next appends' positions as applied: a memory stored now
  // would be acknowledged and never found. The server refuses, naming what is ahead and what to do.
  const refused = await startTestCairn({}, { dataDir }).then(async (started) => {
    await started.stop();
    return undefined;
  }, (error: unknown) => error);
  t.type(refused, ReadModelsAheadError);
  const error = refused as ReadModelsAheadError;
  t.equal(error.end, 1, 'the restored log ends at its one event');
  t.match(error.ahead.find((a) => a.projection === 'memories'), { position: 3 });
  t.match(error.message, /memories at position 3/);
  t.match(error.message, /projections rebuild NAME/);
  t.ok(error.message.includes(`every process using ${join(dataDir, 'readmodels.db')}, delete it`), 'or, on the embedded store, where the read models are');

  // Run as a server is: one line on stderr, exit code 1.
  const server = await run('api/main.ts', [], { DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', LOG_LEVEL: 'info' });
  t.equal(server.code, 1, 'the server exits with code 1');
  t.equal(server.stderr, `cairn: cannot start: ${error.message}\n`, 'one line on stderr');
  const status = await run('ops/cli.ts', ['projections', 'status'], { DATA_DIR: dataDir });
  t.equal(status.code, 3, '`ops projections status` exits with 3, as for a failing projection');
  t.match(status.stdout, /memories\s+3\s+1\s+AHEAD of the log/);
  t.match(status.stderr, /ahead of the event log \(built from another or a longer log; rebuild\): .*memories/);

  // What `ops projections rebuild` does, for each of them.
  const config = loadConfig({ DATA_DIR: dataDir });
  const projections = allProjections(config, {}, createLogger('silent'));
  const { events, reads } = await openStores(config);
  const statuses = await projectionStatus(events, reads);
  t.match(statuses.find((s) => s.projection === 'memories'), { position: 3, head: 1, ahead: true });
  for (const name of error.ahead.map((a) => a.projection)) {
    const rebuilt = await rebuildProjection(events, reads, projections.find((p) => p.name === name)!);
    t.ok(rebuilt.position <= 1, `${name} rebuilt from this log (at ${rebuilt.position})`);
  }
  t.same((await projectionStatus(events, reads)).filter((s) => s.ahead), [], 'none ahead any more');
  await reads.close();
  await events.close();

  app = await startTestCairn({}, { dataDir });
  t.teardown(() => app.stop());
  await store(app, 'Sam has a cat named Miso');
  t.same(await exported(app), ['Sam plays the cello', 'Sam has a cat named Miso'], 'the restored log and the write after it, nothing of the lost ones');
  t.equal((await searched(app, 'cat Miso'))[0], 'Sam has a cat named Miso', 'the write after the restore is found');
  t.notOk((await searched(app, 'Lisbon peanuts')).some((text) => /Lisbon|peanuts/.test(text)), 'the lost memories are not found');
});

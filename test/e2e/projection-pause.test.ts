import t, { type Test } from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { configDocId } from '../../projections/config/projection.js';
import type { Projection } from '../../projections/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';
import { bearer, projectWithKey, startTestCairn, type TestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';

/** ProjectionHost.pause / resume: one projection held back while the others go on, in either place the runners run. */

/** Writes a config value and waits until `witness` (a projection that is not paused) has passed it. */
async function putConfig(app: TestCairn, projectId: string, key: string, name: string, value: unknown) {
  const put = await app.platform(`/projects/${projectId}/config/${name}`, { method: 'PUT', headers: bearer(key), json: value });
  const position = Number(put.headers.get('x-event-position'));
  await app.projections.waitFor('agents', position, 10_000);
  return position;
}

async function pauseAndResume(t: Test, app: TestCairn) {
  const { projectId, key } = await projectWithKey(app);
  const before = app.projections.position('project-config');
  await app.projections.pause('project-config');
  await app.projections.pause('project-config'); // a second pause does nothing
  const position = await putConfig(app, projectId, key, 'theme', 'dark');
  t.equal(await app.reads.get('config_values', configDocId(projectId, 'theme')), undefined, 'a paused projection applies nothing');
  t.ok(app.projections.position('project-config') < position, 'and reports no position past it');
  t.ok(app.projections.position('project-config') >= before, 'nor one before where it was');

  let answered = false;
  const read = app.platform(`/projects/${projectId}/config/theme`, { headers: { ...bearer(key), 'X-Min-Position': String(position) } })
    .finally(() => { answered = true; });
  await until('the read waits', () => answered || app.pendingWaits() > 0);
  t.notOk(answered, 'a read of its read model waits');
  await app.projections.resume('project-config');
  await app.projections.resume('project-config'); // a second resume does nothing
  const res = await read;
  t.equal(res.status, 200, 'and is answered once it is resumed');
  t.same(await res.json(), 'dark');
  await t.rejects(app.projections.pause('no-such-projection'), /unknown projection/);
  return { projectId, key };
}

t.test('pausing a projection in the projection thread (the default)', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  t.equal(app.projections.mode, 'thread');
  const { projectId, key } = await pauseAndResume(t, app);

  // A thread started to replace one that exited keeps the projection paused.
  await app.projections.pause('project-config');
  const first = app.projections.thread!;
  await first.terminate();
  await until('a new thread runs', () => app.projections.thread !== undefined && app.projections.thread !== first
    && app.projections.health().thread.state === 'running', 10_000);
  const position = await putConfig(app, projectId, key, 'later', 1);
  t.equal(await app.reads.get('config_values', configDocId(projectId, 'later')), undefined, 'still paused in the new thread');
  t.ok(app.projections.position('project-config') < position);
  await app.projections.resume('project-config');
  await app.projections.waitFor('project-config', position, 10_000);
  t.match(await app.reads.get('config_values', configDocId(projectId, 'later')), { value: 1 }, 'resumed there');
});

t.test('pausing a projection in the HTTP thread (PROJECTIONS_THREAD=false)', async (t) => {
  const app = await startTestCairn({ PROJECTIONS_THREAD: 'false' });
  t.teardown(() => app.stop());
  t.equal(app.projections.mode, 'inline');
  await pauseAndResume(t, app);
});

t.test('stopping the server does not wait for a paused projection and clears its pause; one left by a killed server is cleared at the next start', async (t) => {
  for (const PROJECTIONS_THREAD of ['true', 'false']) {
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-pause-stop-'));
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    // A stop waits (at most this long) for the projections to apply what was written: not for a paused one.
    const env = { PROJECTIONS_THREAD, CONSISTENCY_TIMEOUT_MS: '15000' };
    const app = await startTestCairn(env, { dataDir });
    const { projectId, key } = await projectWithKey(app);
    await app.projections.pause('project-config');
    const position = await putConfig(app, projectId, key, 'theme', 'dark');
    t.ok(app.projections.position('project-config') < position, `PROJECTIONS_THREAD=${PROJECTIONS_THREAD}: behind what was written`);
    t.match(await app.reads.checkpoint('project-config'), { paused_at: String }, 'recorded beside its checkpoint');
    const started = performance.now();
    await app.stop();
    const took = performance.now() - started;
    t.ok(took < 5000, `stopped in ${Math.round(took)} ms, not after CONSISTENCY_TIMEOUT_MS (15 s)`);

    const reads = new EmbeddedReadStore(join(dataDir, 'readmodels.db'), { checkpointer: false });
    t.notOk('paused_at' in (await reads.checkpoint('project-config')), 'a stopped server holds nothing paused');
    t.ok((await reads.checkpoint('project-config')).position < position, 'and the paused projection applied nothing meanwhile');
    // What a server of this machine killed while it held the projection paused leaves behind.
    await reads.recordPause('project-config', { host: hostname(), pid: exitedPid(), id: 'killed' }, '2026-01-01T00:00:00.000Z');
    await reads.close();
    const next = await startTestCairn(env, { dataDir });
    t.notOk('paused_at' in (await next.reads.checkpoint('project-config')), 'cleared by the next server to start');
    t.equal(next.projections.health().projections.find((p) => p.projection === 'project-config')!.paused_at, null);
    await next.projections.waitFor('project-config', position, 10_000);
    t.match(await next.reads.get('config_values', configDocId(projectId, 'theme')), { value: 'dark' }, 'which applies it');
    await next.stop();
  }
});

t.test('two servers on one DATA_DIR: each clears only its own pause records, and ops names who holds a pause', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-pause-two-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  // One in each mode: the host's records are the same in both.
  const a = await startTestCairn({}, { dataDir });
  let running = true;
  t.teardown(() => (running ? a.stop() : undefined));
  const holders = async () => (await a.reads.checkpoint('project-config')).paused_by ?? [];
  await a.projections.pause('project-config');
  const [held] = await holders();
  t.match(held, { host: hostname(), pid: process.pid, id: String, since: a.projections.health().projections.find((p) => p.projection === 'project-config')!.paused_at });

  const b = await startTestCairn({ PROJECTIONS_THREAD: 'false' }, { dataDir });
  t.same(await holders(), [held], 'a server starting on the same DATA_DIR keeps the record of a server that runs');
  await b.projections.pause('project-config');
  const both = await holders();
  t.equal(both.length, 2, 'each holds a record of its own');
  t.ok(both.some((r) => r.id === held!.id));
  await b.projections.resume('project-config');
  t.same(await holders(), [held], 'resuming clears only its own');
  await b.projections.pause('project-config');
  await b.stop();
  t.same(await holders(), [held], 'and so does stopping');

  // The operator CLI (another process) says who holds it.
  const json = await opsStatus(dataDir, true);
  t.equal(json.code, 3, `exit code 3: paused ${json.stderr}`);
  t.match(JSON.parse(json.stdout).find((r: { projection: string }) => r.projection === 'project-config'), { paused_at: held!.since, paused_by: [held] });
  const table = await opsStatus(dataDir, false);
  t.match(table.stdout.split('\n').find((l) => l.startsWith('project-config')), `since ${held!.since} by ${hostname()}:${process.pid}`);

  // Left behind: by a server of this machine whose process has exited, and by one on another machine (which may run).
  const since = '2026-01-01T00:00:00.000Z';
  await a.reads.recordPause('project-config', { host: hostname(), pid: exitedPid(), id: 'exited' }, since);
  await a.reads.recordPause('project-config', { host: 'cairn-elsewhere.example', pid: process.pid, id: 'elsewhere' }, since);
  const c = await startTestCairn({}, { dataDir });
  t.same((await holders()).map((r) => r.id).sort(), ['elsewhere', held!.id].sort(),
    'a server starting clears the record of an exited process of its machine, not those of a running one or of another machine');
  await c.stop();
  await a.stop();
  running = false;
  const reads = new EmbeddedReadStore(join(dataDir, 'readmodels.db'), { checkpointer: false });
  t.teardown(() => reads.close());
  t.match((await reads.checkpoint('project-config')).paused_by, [{ host: 'cairn-elsewhere.example', id: 'elsewhere' }], 'the other machine\'s stays');
  t.equal((await reads.checkpoint('project-config')).paused_by?.length, 1);
  const kept = await opsStatus(dataDir, false);
  t.equal(kept.code, 3);
  t.match(kept.stdout.split('\n').find((l) => l.startsWith('project-config')), `since ${since} by cairn-elsewhere.example:${process.pid}`, 'named by ops');
});

/** The id of a process that has exited (not reused this soon). */
function exitedPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid!;
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

async function opsStatus(dataDir: string, json: boolean): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  delete env.EVENTSTORE_URL;
  delete env.MONGODB_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'ops/cli.ts', 'projections', 'status', ...(json ? ['--json'] : [])],
    { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const [code] = await once(child, 'close') as [number];
  return { code, stdout, stderr };
}

t.test('a stopped host refuses to pause or resume', async (t) => {
  for (const PROJECTIONS_THREAD of ['true', 'false']) {
    const app = await startTestCairn({ PROJECTIONS_THREAD });
    await app.stop();
    await t.rejects(app.projections.resume('project-config'), /stopped/, `PROJECTIONS_THREAD=${PROJECTIONS_THREAD}`);
  }
});

t.test('a runner\'s pauses, resumes and stop take effect in the order called', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-pause-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  const projection = (name: string): Projection => ({
    name, collections: [{ name: `${name}_docs` }], canHandle: ['Wanted'],
    async apply(e, w) { await w.put(`${name}_docs`, { id: e.id }, e.position); },
  });
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
  const wanted = () => events.append(randomUUID(), [{ id: randomUUID(), type: 'Wanted', data: {}, metadata }], 'no_stream');
  const runner = new ProjectionRunner(projection('held'), events, reads);
  const witness = new ProjectionRunner(projection('witness'), events, reads);
  await runner.start();
  await witness.start();

  // Not awaited one by one: a resume that started its runner while the pause before it was still stopping it
  // would leave it stopped although resumed, or running although paused again.
  void runner.pause();
  await runner.resume();
  const applied = await wanted();
  await runner.waitFor(applied.position, 5000);
  t.pass('resumed after the pause: the event is applied');

  await runner.pause();
  void runner.resume();
  await runner.pause();
  const held = await wanted();
  await witness.waitFor(held.position, 5000);
  t.ok(runner.isPaused, 'paused again');
  t.ok(runner.currentPosition < held.position, 'paused: the event is not applied');
  t.ok((await reads.checkpoint('held')).position < held.position);

  void runner.resume();
  await runner.stop(); // after the resume: nothing keeps running
  const second = await wanted();
  await witness.waitFor(second.position, 5000);
  t.ok(runner.currentPosition < second.position, 'stopped after the resume');
  await witness.stop();
});

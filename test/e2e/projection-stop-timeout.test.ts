import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { THREAD_STOP_TIMEOUT_MS } from '../../projections/host.js';
import { bearer, caughtUp, projectWithKey, startTestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';

/**
 * The stop's fallback: a projection thread that does not stop within THREAD_STOP_TIMEOUT_MS is ended. A batch waiting on
 * a model provider no longer gets there (the runner's signal ends the call: projection-stop.test.ts); a thread whose
 * event loop is held does. Here another connection (an operator's `sqlite3` session left in a transaction, another
 * process) holds the read models' write lock: every write of the thread waits out SQLite's 5 s busy timeout
 * synchronously, its event loop held meanwhile, and its stop is not even read. Terminating it from outside then aborted
 * the whole process (`FATAL ERROR: v8::ToLocalChecked Empty MaybeLocal`, SIGABRT: better-sqlite3 throwing SQLITE_BUSY
 * into a terminating thread), this test's with it; it now ends itself at its next store call.
 */

/** SQLite's busy timeout on the read store's connections (infra/readstore/embedded.ts): the longest a write holds the thread. */
const BUSY_TIMEOUT_MS = 5000;

t.test('a projection thread that does not stop in time is ended without taking the process with it, and what it had not committed is applied at the next start', async (t) => {
  const env = { CONSISTENCY_TIMEOUT_MS: '500' };
  const { lines, log } = capturingLogger();
  const app = await startTestCairn(env, { log });
  t.teardown(() => rmSync(app.dataDir, { recursive: true, force: true }));
  t.equal(app.projections.mode, 'thread');
  const { projectId, key } = await projectWithKey(app);
  const auth = bearer(key);
  const before = await app.platform(`/projects/${projectId}/config/before`, { method: 'PUT', headers: auth, json: 1 });
  t.equal(before.status, 200);
  // Waited for with a bound a busy machine cannot miss: the 0.5 s above bounds the stop's wait, not this one.
  await caughtUp(app, ['project-config']);
  t.equal((await app.platform(`/projects/${projectId}/config/before`, { headers: { ...auth, 'X-Min-Position': before.headers.get('x-event-position')! } })).status, 200);

  const locker = new Database(join(app.dataDir, 'readmodels.db'));
  t.teardown(() => { if (locker.open) locker.close(); });
  locker.exec('BEGIN IMMEDIATE');
  // Acknowledged (the log is another file), not applied: the thread's batches wait for the lock.
  const scope = { agent: 'a', user: 'u' };
  const put = await app.platform(`/projects/${projectId}/config/during`, { method: 'PUT', headers: auth, json: 2 });
  t.equal(put.status, 200);
  const stored = await app.memory('/v1/memories', { method: 'POST', json: { scope, text: 'I take my coffee black' } });
  t.equal(stored.status, 200);
  const head = await app.events.headPosition();

  const started = performance.now();
  await app.stop({ keepData: true });
  const took = performance.now() - started;
  // The read-model wait (0.5 s), THREAD_STOP_TIMEOUT_MS, then the thread ends once its SQLite call returns (at most the
  // busy timeout): bounded, not waiting for the lock to be released.
  t.ok(took >= THREAD_STOP_TIMEOUT_MS, `the thread was given THREAD_STOP_TIMEOUT_MS (stopped after ${Math.round(took)} ms)`);
  t.ok(took < 500 + THREAD_STOP_TIMEOUT_MS + BUSY_TIMEOUT_MS + 3000, `stopped in ${Math.round(took)} ms, though the lock is still held`);
  t.ok(lines.some((l) => l.level === 40 && l.msg.startsWith('the projection thread did not stop in time')), 'the fallback is logged as a warning');
  t.notOk(lines.some((l) => l.msg.includes('terminating it')), 'the thread ended by itself, at a store call: not terminated');
  t.notOk(lines.some((l) => l.level >= 50), 'and no error: a thread terminated on stop is not one that died');
  t.equal(app.projections.thread, undefined, 'no projection thread is left');
  await t.rejects(app.reads.listCheckpoints(), /not open/, 'the stores are closed');
  locker.exec('ROLLBACK');
  locker.close();

  // Nothing half-written: what the terminated thread had not committed is not in the read models.
  const reads = new EmbeddedReadStore(join(app.dataDir, 'readmodels.db'), { checkpointer: false });
  const behind = (await reads.listCheckpoints()).filter((cp) => cp.position < head).map((cp) => cp.projection);
  await reads.close();
  t.ok(behind.includes('project-config') && behind.includes('memories'), `left behind the log: ${behind.join(', ')}`);

  // The next start applies it; nothing acknowledged was lost.
  const again = await startTestCairn(env, { dataDir: app.dataDir });
  t.teardown(() => again.stop());
  const got = await again.platform(`/projects/${projectId}/config/during`, { headers: { ...auth, 'X-Min-Position': put.headers.get('x-event-position')! } });
  t.equal(got.status, 200, 'the config value written before the stop is there after the next start');
  t.same(await got.json(), 2);
  const found = await again.memory('/v1/search', { method: 'POST', json: { scope, query: 'coffee' } });
  t.equal(found.status, 200);
  t.same((await found.json()).results.map((r: { text: string }) => r.text), ['I take my coffee black'], 'and the memory, once');
  for (const name of again.projections.names) await t.resolves(again.projections.waitFor(name, head, 5000), `${name} caught up with the log`);
});

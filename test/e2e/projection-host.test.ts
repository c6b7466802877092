import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t, { type Test } from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { EventStoreTimeoutError } from '../../infra/eventstore/errors.js';
import { bearer, projectWithKey, startTestCairn, type TestCairn } from '../support/cairn.js';

/** What every read path needs from the projections, in either place they can run. */
async function exercise(t: Test, app: TestCairn) {
  const { projectId, key, keyId, session } = await projectWithKey(app);
  const auth = bearer(key);
  const put = await app.platform(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: auth, json: 'dark' });
  t.equal(put.status, 200);
  const got = await app.platform(`/projects/${projectId}/config/theme`, { headers: { ...auth, 'X-Min-Position': put.headers.get('x-event-position')! } });
  t.same(await got.json(), 'dark', 'read-your-writes through the read model');

  const scope = { agent: 'a', user: 'u' };
  for (const text of ['I take my coffee black', 'hiking in the alps every summer']) {
    t.equal((await app.memory('/v1/memories', { method: 'POST', json: { scope, text } })).status, 200);
  }
  for (const mode of ['lexical', 'semantic', 'hybrid']) {
    const res = await app.memory('/v1/search', { method: 'POST', json: { scope, query: 'coffee', mode, limit: 1 } });
    t.equal((await res.json()).results[0]?.text, 'I take my coffee black', `${mode}: the index beside the read model has the new memory`);
  }

  // The key cache follows the api-keys projection: a revoked key is refused on the very next request.
  t.equal((await app.platform(`/projects/${projectId}/config`, { headers: auth })).status, 200);
  const revoked = await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  t.equal(revoked.status, 200);
  t.equal((await app.platform(`/projects/${projectId}/config`, { headers: auth })).status, 401);
}

t.test('projections in their own thread (the default)', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  t.equal(app.projections.mode, 'thread');
  t.ok(app.projections.thread, 'a worker thread runs them');
  await exercise(t, app);
});

t.test('projections in the HTTP thread (PROJECTIONS_THREAD=false)', async (t) => {
  const app = await startTestCairn({ PROJECTIONS_THREAD: 'false' });
  t.teardown(() => app.stop());
  t.equal(app.projections.mode, 'inline');
  t.equal(app.projections.thread, undefined);
  await exercise(t, app);
});

t.test('a projection thread that dies is replaced, and the read models carry on from their checkpoints', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { projectId, key } = await projectWithKey(app);
  const auth = bearer(key);
  const first = app.projections.thread!;
  await first.terminate();
  // Written while no projection thread runs: the next one picks it up from the log.
  const put = await app.platform(`/projects/${projectId}/config/after`, { method: 'PUT', headers: auth, json: 1 });
  t.equal(put.status, 200);
  const got = await app.platform(`/projects/${projectId}/config/after`, { headers: { ...auth, 'X-Min-Position': put.headers.get('x-event-position')! } });
  t.equal(got.status, 200, 'answered once the new thread caught up (within CONSISTENCY_TIMEOUT_MS)');
  t.same(await got.json(), 1);
  t.not(app.projections.thread, first, 'a new thread');
  t.ok(app.projections.thread);
});

t.test('a replacement projection thread that fails to start is tried again, not given up on', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { projectId, key } = await projectWithKey(app);
  const auth = bearer(key);
  // Another connection holds the read models' write lock (as a long operator transaction, or MongoDB
  // briefly unreachable, would): the replacement thread cannot register its projections and fails.
  const locker = new Database(join(app.dataDir, 'readmodels.db'));
  t.teardown(() => locker.close());
  locker.exec('BEGIN IMMEDIATE');
  const first = app.projections.thread!;
  await first.terminate();
  let second = app.projections.thread;
  while (!second || second === first) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    second = app.projections.thread;
  }
  await new Promise((resolve) => second.once('exit', resolve)); // SQLITE_BUSY after the 5 s busy timeout
  locker.exec('ROLLBACK');
  const put = await app.platform(`/projects/${projectId}/config/later`, { method: 'PUT', headers: auth, json: 2 });
  t.equal(put.status, 200);
  const got = await app.platform(`/projects/${projectId}/config/later`, { headers: { ...auth, 'X-Min-Position': put.headers.get('x-event-position')! } });
  t.equal(got.status, 200, 'a third thread started and caught up');
  t.same(await got.json(), 2);
  t.ok(app.projections.thread);
});

/** Nice values of this process's threads (Linux: field 19 of /proc/self/task/<tid>/stat). */
function threadNiceValues(): number[] {
  return readdirSync('/proc/self/task').flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      return [Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])];
    } catch {
      return []; // the thread ended meanwhile
    }
  });
}

t.test('the projection thread runs at a lower priority (PROJECTIONS_NICE, 0–19)', { skip: existsSync('/proc/thread-self') ? false : 'no /proc/thread-self here' }, async (t) => {
  t.notOk(threadNiceValues().includes(7), 'no thread at nice 7 before');
  const app = await startTestCairn({ PROJECTIONS_NICE: '7' });
  t.teardown(() => app.stop());
  await exercise(t, app);
  // The projection thread, and threads it starts itself (the TypeScript loader's, under tsx), which inherit its priority.
  t.ok(threadNiceValues().includes(7), 'the projection thread runs at nice 7');
  const self = readlinkSync('/proc/thread-self').split('/').pop();
  const http = readFileSync(`/proc/self/task/${self}/stat`, 'utf8');
  t.equal(Number(http.slice(http.lastIndexOf(')') + 2).split(' ')[16]), 0, 'the HTTP thread keeps its priority');
  await app.stop();
  t.notOk(threadNiceValues().includes(7), 'gone with the server');

  const edge = await startTestCairn({ PROJECTIONS_NICE: '19' });
  await edge.stop();
  await t.rejects(startTestCairn({ PROJECTIONS_NICE: '20' }), /PROJECTIONS_NICE must be an integer from 0 to 19/);
  await t.rejects(startTestCairn({ PROJECTIONS_NICE: '-1' }), /PROJECTIONS_NICE must be an integer from 0 to 19, written in decimal digits, got "-1"/);
});

t.test('PROJECTIONS_THREAD takes only true or false', async (t) => {
  await t.rejects(startTestCairn({ PROJECTIONS_THREAD: 'maybe' }), /PROJECTIONS_THREAD must be true or false/);
});

t.test('a graceful stop lets every read model apply what was written before it', async (t) => {
  // The stop waits for the read models up to CONSISTENCY_TIMEOUT_MS: under load on a shared machine, applying the
  // 8,000 events below took longer than the default 5 s.
  const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '60000' });
  const scope = { agent: 'drain', user: 'u' };
  await Promise.all(Array.from({ length: 20 }, (_, i) => app.memory('/v1/memories', { method: 'POST', json: { scope, text: `memory ${i}` } })));
  // Then a large write straight to the log, and stop at once: the read models are well behind it then.
  const now = new Date().toISOString();
  await app.events.append('memory-drain/bulk', Array.from({ length: 8000 }, (_, i) => ({
    id: randomUUID(), type: 'MemoryStored',
    data: { agent: 'drain', user: 'bulk', memory_id: `m_${i}`, text: `bulk memory ${i}`, session: null, created_at: now },
    metadata: { correlation_id: randomUUID(), causation_id: randomUUID(), actor: 'test', occurred_at: now },
  })), 'no_stream');
  const head = await app.events.headPosition();
  await app.stop({ keepData: true });
  t.teardown(() => rmSync(app.dataDir, { recursive: true, force: true }));
  const reads = new EmbeddedReadStore(join(app.dataDir, 'readmodels.db'));
  t.teardown(() => reads.close());
  for (const cp of await reads.listCheckpoints()) t.equal(cp.position, head, `${cp.projection} stored the head as its checkpoint`);
});

t.test('a graceful stop closes the stores although the event store does not answer (EVENTSTORE_TIMEOUT_MS)', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => rmSync(app.dataDir, { recursive: true, force: true }));
  // As the EventStoreDB adapter does once EVENTSTORE_TIMEOUT_MS has passed without an answer.
  app.events.headPosition = async () => { throw new EventStoreTimeoutError('headPosition', undefined, 300); };
  await app.stop({ keepData: true });
  await t.rejects(app.reads.listCheckpoints(), /not open/, 'the read store is closed');
  await t.rejects(app.events.readStream('any'), /not open/, 'and the event store');
});

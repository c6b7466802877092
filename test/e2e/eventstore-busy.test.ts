import Database from 'better-sqlite3';
import { join } from 'node:path';
import t from 'tap';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

/**
 * The embedded log locked by another process for longer than its busy timeout (5 s): an operator's `sqlite3` session
 * that began a write transaction and left it open. A write is refused with a 503 the client can retry (nothing of it
 * was written), not a 500, and writes succeed again once the lock is released.
 */
t.test('a write while another process holds the log\'s write lock is a 503 with Retry-After, nothing written; then it works again', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { projectId, key } = await projectWithKey(app, 'tenant-busy');
  const put = (value: number) => app.platform(`/projects/${projectId}/config/level`, { method: 'PUT', headers: bearer(key), json: value });
  t.equal((await put(1)).status, 200);

  const operator = new Database(join(app.dataDir, 'events.db'));
  t.teardown(() => { if (operator.open) operator.close(); });
  operator.exec('BEGIN EXCLUSIVE'); // as `sqlite3 events.db` then `BEGIN EXCLUSIVE;` would
  const head = await app.events.headPosition();
  const started = performance.now();
  const refused = await put(2);
  const waited = performance.now() - started;
  t.equal(refused.status, 503, `refused after ${Math.round(waited)} ms (the busy timeout is 5 s)`);
  t.equal(refused.headers.get('retry-after'), '1');
  t.match(await refused.json(), { type: 'https://cairn.dev/problems/event-store-unavailable', detail: /locked by another process.*nothing of this request was written/ });
  t.equal(await app.events.headPosition(), head, 'nothing was written');

  operator.exec('ROLLBACK');
  operator.close();
  const again = await put(3);
  t.equal(again.status, 200, 'the lock released: writes succeed again');
  const read = await app.platform(`/projects/${projectId}/config/level`, { headers: { ...bearer(key), 'X-Min-Position': again.headers.get('x-event-position')! } });
  t.equal(await read.json(), 3);
});

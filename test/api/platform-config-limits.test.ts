import t from 'tap';
import { MAX_CONFIG_BYTES, MAX_CONFIG_KEYS } from '../../domain/config/decider.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

/**
 * GET /config answers a project's whole configuration in one document: without bounds a key holder could grow it (a
 * thousand values of 1 MiB) until building that answer exhausts the server's memory. A project holds at most
 * MAX_CONFIG_KEYS keys and MAX_CONFIG_BYTES of values (each counted as its JSON text, UTF-8); each is tested at its edge.
 */
const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '30000' });
t.teardown(() => app.stop());

t.equal(MAX_CONFIG_KEYS, 1000);
t.equal(MAX_CONFIG_BYTES, 16 * 1024 * 1024);

t.test('keys: the 1,000th is stored, the 1,001st is 409 and writes nothing; a replaced or freed key is fine', async (t) => {
  const { projectId, key } = await projectWithKey(app, 'tenant-config-keys');
  const put = (k: string, value: unknown) => app.platform(`/projects/${projectId}/config/${k}`, { method: 'PUT', headers: bearer(key), json: value });
  for (let i = 0; i < MAX_CONFIG_KEYS - 1; i++) {
    const res = await put(`k${i}`, i);
    if (res.status !== 200) t.fail(`k${i}: ${res.status}`);
  }
  const last = await put('k999', 999);
  t.equal(last.status, 200, 'the 1,000th key');
  const over = await put('k1000', 1000);
  t.equal(over.status, 409, 'the 1,001st key');
  t.match(await over.json(), { type: 'https://cairn.dev/problems/conflict', detail: /holds 1000 keys, the most it may hold \(1000\): delete one before adding k1000/ });
  t.equal((await put('k5', 'replaced')).status, 200, 'a key that exists can still be set');
  const read = await app.platform(`/projects/${projectId}/config/k1000`, { headers: { ...bearer(key), 'X-Min-Position': last.headers.get('x-event-position')! } });
  t.equal(read.status, 404, 'the refused key was not stored');
  const all = await app.platform(`/projects/${projectId}/config`, { headers: bearer(key) });
  t.equal(Object.keys(await all.json() as object).length, MAX_CONFIG_KEYS);
  t.equal((await app.platform(`/projects/${projectId}/config/k0`, { method: 'DELETE', headers: bearer(key) })).status, 204);
  t.equal((await put('k1000', 1000)).status, 200, 'once one is deleted, another can be added');

  // A repeat (same Idempotency-Key) answers what the first request did, whatever the configuration holds since.
  const first = await app.platform(`/projects/${projectId}/config/k1`, { method: 'DELETE', headers: bearer(key) });
  t.equal(first.status, 204);
  const keyed = { ...bearer(key), 'Idempotency-Key': 'limits-repeat-1' };
  const added = await app.platform(`/projects/${projectId}/config/fresh`, { method: 'PUT', headers: keyed, json: 'x' });
  t.equal(added.status, 200, 'the 1,000th key again, sent with an Idempotency-Key');
  t.equal((await app.platform(`/projects/${projectId}/config/fresh`, { method: 'DELETE', headers: bearer(key) })).status, 204);
  t.equal((await put('other', 'y')).status, 200, 'another key takes its place');
  const repeated = await app.platform(`/projects/${projectId}/config/fresh`, { method: 'PUT', headers: keyed, json: 'x' });
  t.equal(repeated.status, 200, 'the repeat is not refused by the limit it would now pass');
  t.equal(repeated.headers.get('x-event-position'), added.headers.get('x-event-position'), 'it answers the first one\'s position: nothing is written');
});

t.test('bytes: 16 MiB of values exactly is stored, one byte more is 409; a replaced value counts only its new size', async (t) => {
  const { projectId, key } = await projectWithKey(app, 'tenant-config-bytes');
  const put = (k: string, value: unknown) => app.platform(`/projects/${projectId}/config/${k}`, { method: 'PUT', headers: bearer(key), json: value });
  // A string of n characters is n + 2 bytes of JSON text: each of these values is 1 MiB exactly (the body limit too).
  const mib = (c: string) => c.repeat(1024 * 1024 - 2);
  for (let i = 0; i < 16; i++) t.equal((await put(`v${i}`, mib(String.fromCharCode(97 + i)))).status, 200, `value ${i + 1} of 1 MiB`);
  const over = await put('one-more', 1);
  t.equal(over.status, 409, '16 MiB + 1 byte');
  t.match(await over.json(), { type: 'https://cairn.dev/problems/conflict', detail: `the project's configuration would hold ${MAX_CONFIG_BYTES + 1} bytes of values, more than the ${MAX_CONFIG_BYTES} it may hold (each value counted as its JSON text, UTF-8)` });
  // Replacing a 1 MiB value by a smaller one frees the difference: 'é' is two bytes, so this value is 1 MiB - 2 bytes.
  t.equal((await put('v0', 'é'.repeat(512 * 1024 - 2))).status, 200, 'a value replaced by a smaller one');
  t.equal((await put('one-more', 1)).status, 200, 'one byte fits again');
  t.equal((await put('two', 2)).status, 200, 'and a second');
  t.equal((await put('three', 3)).status, 409, 'but not a third: the limit counts UTF-8 bytes');
});

import { request } from 'node:http';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { configDecider } from '../../domain/config/decider.js';
import { DomainError } from '../../domain/shared/decider.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

// Read-your-writes waits get a bound a busy CI machine cannot miss; the bound itself is tested on an app of its own.
const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '30000' });
t.teardown(() => app.stop());
const { projectId, key } = await projectWithKey(app);
const other = await projectWithKey(app, 'tenant-b');
const auth = bearer(key);
const path = (k = '') => `/projects/${projectId}/config${k ? `/${k}` : ''}`;

async function put(k: string, value: unknown) {
  const res = await app.platform(path(k), { method: 'PUT', headers: auth, json: value });
  return { res, position: res.headers.get('x-event-position') };
}

t.test('any JSON value round-trips, read-your-writes through X-Min-Position', async (t) => {
  const values: Array<[string, unknown]> = [['str', 'abc'], ['num', 42.5], ['nul', null], ['bool', false], ['obj', { a: [1, { b: 'c' }] }], ['arr', [1, 2]]];
  let last = '';
  for (const [k, v] of values) {
    const { res, position } = await put(k, v);
    t.equal(res.status, 200);
    t.strictSame(await res.json(), { success: true });
    t.match(position, /^\d+$/);
    last = position!;
    const got = await app.platform(path(k), { headers: { ...auth, 'X-Min-Position': position! } });
    t.equal(got.status, 200);
    t.equal(got.headers.get('content-type'), 'application/json; charset=utf-8');
    t.strictSame(await got.json(), v, `${k} round-trips`);
  }
  const all = await app.platform(`${path()}?min_position=${last}`, { headers: auth });
  t.strictSame(await all.json(), Object.fromEntries(values));
});

t.test('values nest at most 64 levels deep: exactly 64 is stored and projected, 65 and far deeper are 400', async (t) => {
  const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
  const raw = (k: string, body: string) => app.platform(path(k), { method: 'PUT', headers: { ...auth, 'Content-Type': 'application/json' }, body });
  const ok = await raw('deep64', nested(64));
  t.equal(ok.status, 200);
  const read = await app.platform(path('deep64'), { headers: { ...auth, 'X-Min-Position': ok.headers.get('x-event-position')! } });
  t.equal(read.status, 200, 'the read model applied it');
  t.equal(JSON.stringify(await read.json()), nested(64));
  for (const depth of [65, 100_000]) {
    const res = await raw(`deep${depth}`, nested(depth));
    t.equal(res.status, 400, `${depth} levels`);
    t.equal(res.headers.get('content-type'), 'application/problem+json');
    t.match(await res.json(), { status: 400, errors: [{ location: 'body', message: /at most 64 levels/ }] });
  }
  const agents = await app.platform('/agents', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: `{"name":${nested(100_000)}}` });
  t.equal(agents.status, 400, 'on every JSON body');
  t.equal(agents.headers.get('content-type'), 'application/problem+json');
  // Nothing deep reached the log: the read model keeps up with a later write.
  const after = await put('after-deep', 1);
  t.equal((await app.platform(path('after-deep'), { headers: { ...auth, 'X-Min-Position': after.position! } })).status, 200);
});

t.test('delete', async (t) => {
  const { position } = await put('gone', 1);
  const del = await app.platform(path('gone'), { method: 'DELETE', headers: auth });
  t.equal(del.status, 204);
  t.equal(await del.text(), '');
  const pos = del.headers.get('x-event-position')!;
  t.ok(Number(pos) > Number(position));
  t.equal((await app.platform(path('gone'), { headers: { ...auth, 'X-Min-Position': pos } })).status, 404);
  const again = await app.platform(path('gone'), { method: 'DELETE', headers: auth });
  t.equal(again.status, 404);
  t.equal(again.headers.get('content-type'), 'application/problem+json');
});

t.test('keys: 256 characters of the allowed set', async (t) => {
  t.equal((await put('k'.repeat(256), 1)).res.status, 200);
  const long = await put('k'.repeat(257), 1);
  t.equal(long.res.status, 400);
  t.match(await long.res.json(), { title: 'Bad Request', errors: [{ location: 'path.key' }] });
  t.equal((await put('a%20b', 1)).res.status, 400, 'space is not allowed');
  t.equal((await put('app.theme:dark-mode_v2', 1)).res.status, 200);
  // URL clients resolve "." and ".." (also written %2E) as path segments: such a key could be set by a raw
  // HTTP client but never read or deleted through an ordinary one. Sent as is, they are refused.
  const raw = (k: string) => new Promise<number>((resolve, reject) => {
    const url = new URL(app.platformUrl);
    const req = request({ host: url.hostname, port: url.port, method: 'PUT', path: `/api/v1${path(k)}`, headers: { ...auth, 'Content-Type': 'application/json' } },
      (res) => { res.resume(); res.on('end', () => resolve(res.statusCode!)); });
    req.on('error', reject);
    req.end('1');
  });
  t.equal(await raw('..'), 400, '..');
  t.equal(await raw('.'), 400, '.');
  t.equal(await raw('%2E%2E'), 400, '%2E%2E');
  t.equal((await put('...', 1)).res.status, 200, '"..." is a key like any other');
  t.equal((await put('.a', 1)).res.status, 200);
});

t.test('a key named __proto__ is an entry of the map like any other', async (t) => {
  const { position } = await put('__proto__', { polluted: true });
  const all = await app.platform(path(), { headers: { ...auth, 'X-Min-Position': position! } });
  const text = await all.text();
  t.match(text, /"__proto__":\{"polluted":true\}/, 'listed');
  t.strictSame((await (await app.platform(path('__proto__'), { headers: auth })).json()), { polluted: true });
});

t.test('bodies: JSON only, 1 MiB, one value', async (t) => {
  const raw = (body: string, type = 'application/json') => app.platform(path('raw'), { method: 'PUT', headers: { ...auth, 'Content-Type': type }, body });
  // A JSON string whose encoding is exactly 1 MiB, then one byte more.
  const exact = JSON.stringify('x'.repeat(1024 * 1024 - 2));
  t.equal(Buffer.byteLength(exact), 1024 * 1024);
  t.equal((await raw(exact)).status, 200, 'exactly 1 MiB is accepted');
  const over = await raw(JSON.stringify('x'.repeat(1024 * 1024 - 1)));
  t.equal(over.status, 400, 'one byte more is not');
  t.match(await over.json(), { detail: /exceeds 1048576 bytes/ });
  const malformed = await raw('{"a": ');
  t.equal(malformed.status, 400);
  t.match(await malformed.json(), { detail: /malformed JSON/ });
  t.equal((await raw('{"a":1}{"b":2}')).status, 400, 'trailing JSON');
  t.equal((await raw('1 2')).status, 400, 'two values');
  t.equal((await raw('')).status, 400, 'empty body');
  const text = await raw('"x"', 'text/plain');
  t.equal(text.status, 400);
  t.match(await text.json(), { errors: [{ location: 'header.Content-Type' }] });
  t.equal((await raw('"x"', 'application/merge-patch+json')).status, 200, '+json types are JSON');
  const poisoned = await raw('{"theme": "dark", "__proto__": {"isAdmin": true}}');
  t.equal(poisoned.status, 400, 'a __proto__ key is refused, also inside a free-form value');
  t.match(await poisoned.json(), { detail: /__proto__ key \(prototype poisoning\)/, errors: [{ location: 'body' }] });
  for (const value of [null, 0, false, 'scalar']) t.equal((await raw(JSON.stringify(value))).status, 200, `scalar ${JSON.stringify(value)}`);
  // A name twice in one object: JSON.parse would keep the last; a proxy or log reader may keep the first.
  for (const [body, location, name] of [
    ['{"theme": "dark", "theme": "light"}', 'body.theme', 'theme'],
    ['{"a": {"b": 1, "c": {"x": [1, {"d": 0, "\\u0064": 1}]}}}', 'body.a.c.x.1.d', 'd'],
    ['[{"k": "{\\"k\\": 1, \\"k\\": 2}"}, {"k": 1, "j": 2, "k": 3}]', 'body.1.k', 'k'],
    ['{"x\\\\": "\\\\\\\\", "x\\\\": 1}', 'body.x\\', 'x\\'],
  ]) {
    const twice = await raw(body!);
    t.equal(twice.status, 400, `a duplicate name: ${body}`);
    t.match(await twice.json(), { type: 'https://cairn.dev/problems/validation', errors: [{ location, value: name }] }, `names ${location}`);
  }
  for (const body of ['{"a": {"b": 1}, "b": {"a": 2}}', '[{"k": 1}, {"k": 2}]', '{"k": "\\"k\\": 1, \\"k\\": 2"}', '{"k\\"": 1, "k": 2}']) {
    t.equal((await raw(body)).status, 200, `the same name in different objects, or only inside strings: ${body}`);
  }
  const gz = await app.platform(path('zipped'), { method: 'PUT', headers: { ...auth, 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' }, body: gzipSync(JSON.stringify({ a: [1, 2] })) });
  t.equal(gz.status, 200, 'gzip body');
  t.strictSame(await (await app.platform(path('zipped'), { headers: { ...auth, 'X-Min-Position': gz.headers.get('x-event-position')! } })).json(), { a: [1, 2] });
});

t.test('another project\'s key sees nothing', async (t) => {
  await put('secret', 's');
  const as = bearer(other.key);
  t.equal((await app.platform(path(), { headers: as })).status, 404);
  t.equal((await app.platform(path('secret'), { headers: as })).status, 404);
  t.equal((await app.platform(path('secret'), { method: 'PUT', headers: as, json: 'x' })).status, 404);
  t.equal((await app.platform(path('secret'), { method: 'DELETE', headers: as })).status, 404);
  t.strictSame(await (await app.platform(`/projects/${other.projectId}/config`, { headers: as })).json(), {}, 'its own config is empty');
  t.equal((await app.platform(`/projects/not-a-uuid/config`, { headers: as })).status, 400);
});

t.test('consistency tokens', async (t) => {
  const quick = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '300' });
  t.teardown(() => quick.stop());
  const own = await projectWithKey(quick);
  const at = { ...bearer(own.key) };
  const configOf = `/projects/${own.projectId}/config`;
  const bad = await quick.platform(configOf, { headers: { ...at, 'X-Min-Position': 'abc' } });
  t.equal(bad.status, 400);
  const head = await quick.events.headPosition();
  const started = Date.now();
  const future = await quick.platform(configOf, { headers: { ...at, 'X-Min-Position': String(head + 1000) } });
  t.equal(future.status, 503, 'a position the read model cannot reach in time');
  t.equal(future.headers.get('retry-after'), '1');
  t.ok(Date.now() - started >= 250, 'it waited (bounded by CONSISTENCY_TIMEOUT_MS)');
  t.equal((await quick.platform(configOf, { headers: { ...at, 'X-Min-Position': String(head) } })).status, 200);
});

t.test('Idempotency-Key: a repeated PUT or DELETE answers with the first one\'s position, also after later changes', async (t) => {
  const call = (method: string, k: string, idem: string, value?: unknown) =>
    app.platform(path(k), { method, headers: { ...auth, 'Idempotency-Key': idem }, ...(value !== undefined ? { json: value } : {}) });
  const first = await call('PUT', 'idem', 'put-idem-0001', 'v1');
  t.equal(first.status, 200);
  await put('other', 'later change'); // the stream moves on
  const repeat = await call('PUT', 'idem', 'put-idem-0001', 'v1');
  t.equal(repeat.status, 200);
  t.equal(repeat.headers.get('x-event-position'), first.headers.get('x-event-position'), 'a repeated PUT: the first position');

  const deleted = await call('DELETE', 'idem', 'delete-idem-0001');
  t.equal(deleted.status, 204);
  await put('other', 'another later change');
  const deletedAgain = await call('DELETE', 'idem', 'delete-idem-0001');
  t.equal(deletedAgain.status, 204, 'a retried DELETE is not a 404');
  t.equal(deletedAgain.headers.get('x-event-position'), deleted.headers.get('x-event-position'));
  const gone = await app.platform(path('idem'), { headers: { ...auth, 'X-Min-Position': deletedAgain.headers.get('x-event-position')! } });
  t.equal(gone.status, 404);
  t.equal((await call('DELETE', 'idem', 'delete-idem-0002')).status, 404, 'a new request to delete what is gone is still 404');

  // Changed by others and changed back: the repeat still answers with its own first position.
  const set = await call('PUT', 'back', 'put-idem-0002', 'same');
  await put('back', 'different');
  const again = await put('back', 'same');
  const repeatBack = await call('PUT', 'back', 'put-idem-0002', 'same');
  t.equal(repeatBack.headers.get('x-event-position'), set.headers.get('x-event-position'), 'not the position of the later, equal change');
  t.not(repeatBack.headers.get('x-event-position'), again.position);
  // Deleted, set again and deleted by others: the first deletion's repeat is neither a 404 nor a new deletion.
  const del = await call('DELETE', 'back', 'delete-idem-0003');
  await put('back', 'revived');
  t.equal((await call('DELETE', 'back', 'delete-idem-0004')).status, 204);
  const delAgain = await call('DELETE', 'back', 'delete-idem-0003');
  t.equal(delAgain.status, 204);
  t.equal(delAgain.headers.get('x-event-position'), del.headers.get('x-event-position'));
});

t.test('a number beyond a 64-bit float (JSON.parse reads it as Infinity) is a 400 naming where, not a value stored as null', async (t) => {
  const raw = (k: string, body: string) => app.platform(path(k), { method: 'PUT', headers: { ...auth, 'Content-Type': 'application/json' }, body });
  for (const [k, body, location] of [
    ['huge', '1e400', 'body'],
    ['huge-negative', '-1e999', 'body'],
    ['huge-nested', '{"limits": {"max": [1, 2, 1e309]}, "ok": 1}', 'body.limits.max.2'],
    ['huge-in-array', '[{"a": 0}, {"b": -2e308}]', 'body.1.b'],
  ] as const) {
    const res = await raw(k, body);
    t.equal(res.status, 400, body);
    t.equal(res.headers.get('content-type'), 'application/problem+json');
    t.match(await res.json(), { type: 'https://cairn.dev/problems/validation', errors: [{ location, message: /64-bit float/ }] }, `names ${location}`);
  }
  // The largest double and the smallest subnormal are numbers like any other (1e-400 underflows to 0, as a double does).
  const edge = { max: 1.7976931348623157e308, min: -1.7976931348623157e308, tiny: 5e-324 };
  const ok = await put('huge', edge);
  t.equal(ok.res.status, 200, 'the largest finite doubles are stored');
  const read = await app.platform(path('huge'), { headers: { ...auth, 'X-Min-Position': ok.position! } });
  t.strictSame(await read.json(), edge, 'and read back as sent');
  for (const k of ['huge-negative', 'huge-nested', 'huge-in-array']) {
    t.equal((await app.platform(path(k), { headers: { ...auth, 'X-Min-Position': ok.position! } })).status, 404, `${k}: nothing was stored`);
  }
});

t.test('a lone surrogate in a string or a key of the value is a 400 naming where (MongoDB would store U+FFFD, and two such keys as one)', async (t) => {
  const raw = (k: string, body: string) => app.platform(path(k), { method: 'PUT', headers: { ...auth, 'Content-Type': 'application/json' }, body });
  for (const [k, body, location, message] of [
    ['lone', '"a\\ud800"', 'body', /well-formed Unicode \(no unpaired/],
    ['lone-nested', '{"names": ["ok", "\\udc00x"]}', 'body.names.1', /well-formed Unicode \(no unpaired/],
    ['lone-key', '{"a": {"\\ud800": 1, "\\udc00": 2}}', 'body.a.\ud800', /well-formed Unicode key/],
  ] as const) {
    const res = await raw(k, body);
    t.equal(res.status, 400, body);
    t.match(await res.json(), { type: 'https://cairn.dev/problems/validation', errors: [{ location, message }] }, `names ${JSON.stringify(location)}`);
  }
  const paired = { emoji: '🌙', ['𝄞']: 'clef' };
  const ok = await put('paired', paired);
  t.equal(ok.res.status, 200, 'surrogate pairs (astral characters) are well-formed');
  for (const k of ['lone', 'lone-nested', 'lone-key']) {
    t.equal((await app.platform(path(k), { headers: { ...auth, 'X-Min-Position': ok.position! } })).status, 404, `${k}: nothing was stored`);
  }
  t.throws(() => configDecider.decide({ type: 'SetConfigValue', data: { project_id: 'p1', key: 'k', value: { list: ['\ud800'] } } }, configDecider.initialState(),
    { now: '2030-01-01T00:00:00.000Z', actor: 'test', request_key: 'r1', request_hash: 'h1' }), { kind: 'invalid', message: /not well-formed Unicode \(an unpaired surrogate\) \(at value\.list\.0\)/ } as never, 'the decider refuses it too');
});

t.test('the config decider refuses a value that has no JSON text, whoever sends the command', async (t) => {
  const ctx = { now: '2030-01-01T00:00:00.000Z', actor: 'test', request_key: 'r1', request_hash: 'h1' };
  for (const value of [Infinity, { a: [1, -Infinity] }, [NaN]]) {
    let refusal: unknown;
    try {
      configDecider.decide({ type: 'SetConfigValue', data: { project_id: 'p1', key: 'k', value } }, configDecider.initialState(), ctx);
    } catch (error) {
      refusal = error;
    }
    t.ok(refusal instanceof DomainError, 'a domain refusal');
    t.match(refusal, { kind: 'invalid', message: /64-bit float/ }, String(value));
  }
  t.equal(configDecider.decide({ type: 'SetConfigValue', data: { project_id: 'p1', key: 'k', value: { a: [Number.MAX_VALUE] } } }, configDecider.initialState(), ctx).length, 1, 'the largest double is a value');
});

import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { OpenApiConformance } from '../support/openapi-conformance.js';

/**
 * The checker every API test's responses go through (test/support/cairn.ts) must be able to fail: each
 * kind of mismatch it claims to catch is shown caught here, on responses built to differ from the
 * memory service's published document in exactly one way.
 */

const app = await startTestCairn();
t.teardown(() => app.stop());
const doc = await (await app.memory('/docs/openapi.json')).json() as any;
const checker = OpenApiConformance.of(doc, 'memory-unit');
const url = (path: string) => `${app.memoryUrl}${path}`;

const memory = { id: 'm_1', text: 'tea', session: null, created_at: '2026-11-23T10:00:00.000Z', updated_at: '2026-11-23T10:00:00.000Z' };
const json = (body: unknown, status = 200, type = 'application/json', headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': type, ...headers } });
const problem = (slug: string, status: number) => json({ type: `https://cairn.dev/problems/${slug}`, title: 'x', status, detail: 'x' }, status, 'application/problem+json');

t.test('real responses of the service pass', async (t) => {
  const stored = await app.memory('/v1/memories', { method: 'POST', json: { scope: { agent: 'a', user: 'u' }, text: 'green tea' } });
  t.same(await checker.violations('POST', url('/v1/memories'), stored), []);
  const invalid = await app.memory('/v1/memories', { method: 'POST', json: { scope: { agent: 'a', user: 'u' }, text: ' ' } });
  t.equal(invalid.status, 400);
  t.same(await checker.violations('POST', url('/v1/memories'), invalid), []);
  const unknown = await app.memory('/v1/nothing');
  t.same(await checker.violations('GET', url('/v1/nothing'), unknown), []);
  const wrongMethod = await app.memory('/v1/memories');
  t.equal(wrongMethod.status, 405);
  t.same(await checker.violations('GET', url('/v1/memories'), wrongMethod), []);
  t.same(await checker.violations('POST', url('/v1/memories'), json(memory, 200, 'application/json', { 'x-event-position': '1' })), [], 'the built response used below is valid as it stands');
});

t.test('each kind of mismatch is reported', async (t) => {
  const cases: Array<[string, string, string, Response, RegExp]> = [
    ['a member missing', 'POST', '/v1/memories', json({ ...memory, created_at: undefined }), /must have required property 'created_at'/],
    ['a member of the wrong type', 'POST', '/v1/memories', json({ ...memory, session: 7 }), /\/session must be string/],
    ['a malformed date-time', 'POST', '/v1/memories', json({ ...memory, updated_at: '23.11.2026' }), /must match format "date-time"/],
    ['an undocumented status', 'POST', '/v1/memories', problem('validation', 418), /status 418 is not documented for POST \/v1\/memories/],
    ['an undocumented content type', 'POST', '/v1/memories', json(memory, 200, 'text/plain'), /Content-Type text\/plain is not one of application\/json/],
    ['a body that is not JSON', 'POST', '/v1/memories', new Response('{"id":', { status: 200, headers: { 'content-type': 'application/json' } }), /the body is not JSON/],
    ['a problem type outside the catalogue', 'POST', '/v1/memories', problem('no-such-type', 400), /not in the document's catalogue/],
    ['a problem type with a status it is not catalogued with', 'POST', '/v1/memories', problem('not-found', 400), /catalogued with 404, not 400/],
    ['a problem whose status member differs', 'POST', '/v1/memories', json({ type: 'https://cairn.dev/problems/validation', title: 'x', status: 422, detail: 'x' }, 400, 'application/problem+json'), /status member is 422/],
    ['a success off every operation', 'GET', '/v1/nothing', json({}), /no operation GET \/v1\/nothing in the document/],
  ];
  for (const [name, method, path, res, expected] of cases) {
    const found = await checker.violations(method, url(path), res);
    t.match(found.join('\n'), expected, name);
  }
});

t.test('a header the document marks required is checked', async (t) => {
  const strict = structuredClone(doc);
  strict.paths['/v1/memories'].post.responses['200'].headers['X-Event-Position'].required = true;
  const checkStrict = OpenApiConformance.of(strict, 'memory-unit-strict');
  t.match((await checkStrict.violations('POST', url('/v1/memories'), json(memory))).join('\n'), /required header X-Event-Position is missing/);
  t.same(await checkStrict.violations('POST', url('/v1/memories'), json(memory, 200, 'application/json', { 'X-Event-Position': '3' })), []);
});

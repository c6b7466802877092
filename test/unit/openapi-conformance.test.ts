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
  // HEAD is answered on every GET route, as the GET operation without its body.
  const head = await app.memory('/healthz', { method: 'HEAD' });
  t.equal(head.status, 200);
  t.same(await checker.violations('HEAD', url('/healthz'), head), [], 'HEAD /healthz is checked as GET /healthz');
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
    ['a header a client acts on, not documented for the response', 'POST', '/v1/memories', json(memory, 200, 'application/json', { 'Retry-After': '1' }), /header retry-after is sent but not documented for this response/],
    ['a Location nowhere documented', 'POST', '/v1/memories', json(memory, 200, 'application/json', { Location: '/v1/memories/m_1' }), /header location is sent but not documented/],
    ['a documented header whose value breaks its schema', 'POST', '/v1/memories', json(memory, 200, 'application/json', { 'X-Event-Position': 'abc' }), /header X-Event-Position: "abc" does not match its documented schema/],
    ['a Retry-After that is not a number of seconds', 'POST', '/v1/search', json({ type: 'https://cairn.dev/problems/not-caught-up', title: 'x', status: 503, detail: 'x' }, 503, 'application/problem+json', { 'Retry-After': 'soon' }), /header Retry-After: "soon" does not match/],
    ['a 405 without Allow', 'GET', '/v1/memories', problem('method-not-allowed', 405), /required header Allow is missing/],
    ['an Allow that is not a list of methods', 'GET', '/v1/memories', json({ type: 'https://cairn.dev/problems/method-not-allowed', title: 'x', status: 405, detail: 'x' }, 405, 'application/problem+json', { Allow: 'post' }), /header Allow: "post" does not match/],
    ['a 401 off the operations without WWW-Authenticate', 'GET', '/v1/nothing', problem('unauthorized', 401), /required header WWW-Authenticate is missing/],
    ['a HEAD status the GET operation does not document', 'HEAD', '/healthz', new Response(null, { status: 418 }), /status 418 is not documented for HEAD \/healthz/],
  ];
  for (const [name, method, path, res, expected] of cases) {
    const found = await checker.violations(method, url(path), res);
    t.match(found.join('\n'), expected, name);
  }
});

t.test('given the request, a success to a request the document calls invalid is reported', async (t) => {
  const stored = json(memory, 200, 'application/json', { 'X-Event-Position': '4' });
  t.same(await checker.violations('POST', url('/v1/memories'), stored.clone(), { json: { scope: { agent: 'a', user: 'u' }, text: 'tea' } }), [], 'a valid request');
  t.match((await checker.violations('POST', url('/v1/memories'), stored.clone(), { json: { scope: { agent: 'a', user: 'u' }, text: 'tea', tags: [] } })).join('\n'),
    /accepted a request the document calls invalid: body must NOT have additional properties/, 'an unknown field');
  t.match((await checker.violations('POST', url('/v1/search'), json({ results: [] }), { json: { scope: { agent: 'a', user: 'u' }, query: 'tea', limit: 101 } })).join('\n'),
    /body\.limit must be <= 100/, 'a limit past its maximum');
  t.match((await checker.violations('GET', url('/v1/export?agent=a'), json({ scope: { agent: 'a', user: 'u' }, personality: '', memories: [] }), {})).join('\n'),
    /query parameter user is required/, 'a required query parameter missing');
  t.match((await checker.violations('GET', url(`/v1/export?agent=a&user=${'u'.repeat(129)}`), json({ scope: { agent: 'a', user: 'u' }, personality: '', memories: [] }), {})).join('\n'),
    /query parameter user: must match pattern/, 'a query parameter past its pattern');
  const refused = problem('validation', 400);
  t.same(await checker.violations('POST', url('/v1/memories'), refused, { json: { text: 'no scope' } }), [], 'a refusal of an invalid request is as documented');
});

t.test('a header the document marks required is checked', async (t) => {
  const strict = structuredClone(doc);
  strict.paths['/v1/memories'].post.responses['200'].headers['X-Event-Position'].required = true;
  const checkStrict = OpenApiConformance.of(strict, 'memory-unit-strict');
  t.match((await checkStrict.violations('POST', url('/v1/memories'), json(memory))).join('\n'), /required header X-Event-Position is missing/);
  t.same(await checkStrict.violations('POST', url('/v1/memories'), json(memory, 200, 'application/json', { 'X-Event-Position': '3' })), []);
});

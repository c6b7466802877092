import t from 'tap';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

/**
 * Found by fuzzing: a query sent with an empty `min_position` (`?min_position=`) was answered 200 as if it had none,
 * while the OpenAPI document gives the parameter the pattern ^[0-9]{1,16}$ (so a client generated from it, and the
 * document's conformance check, call it invalid) and a command refuses the same parameter with 400. An empty
 * consistency token is a malformed one (a client that meant to send a position did not): 400 naming it.
 */
const app = await startTestCairn();
t.teardown(() => app.stop());
const { key } = await projectWithKey(app);

t.test('an empty min_position is refused with 400 on the queries of both services', async (t) => {
  const calls: Array<[string, Promise<Response>]> = [
    ['GET /api/v1/agents', app.platform('/agents?min_position=', { headers: bearer(key) })],
    ['GET /api/v1/projects', app.platform('/projects?min_position=', { headers: bearer(key) })],
    ['POST /v1/search', app.memory('/v1/search?min_position=', { method: 'POST', json: { scope: { agent: 'a', user: 'u' }, query: 'x' } })],
    ['GET /v1/export', app.memory('/v1/export?agent=a&user=u&min_position=', {})],
  ];
  for (const [what, pending] of calls) {
    const res = await pending;
    t.equal(res.status, 400, `${what}: 400`);
    t.match(res.headers.get('content-type'), /^application\/problem\+json/, `${what}: a problem`);
    t.match(await res.json(), { errors: [{ location: 'query.min_position' }] }, `${what}: the problem names min_position`);
  }
});

t.test('an empty X-Min-Position header is refused with 400 on queries too, and still ignored on commands', async (t) => {
  for (const [what, pending] of [
    ['GET /api/v1/agents', app.platform('/agents', { headers: { ...bearer(key), 'X-Min-Position': '' } })],
    ['POST /v1/search', app.memory('/v1/search', { method: 'POST', headers: { 'X-Min-Position': '' }, json: { scope: { agent: 'a', user: 'u' }, query: 'x' } })],
  ] as const) {
    const res = await pending;
    t.equal(res.status, 400, `${what}: 400`);
    t.match(await res.json(), { errors: [{ location: 'header.X-Min-Position', value: '' }] }, `${what}: the problem names the header`);
  }
  const stored = await app.memory('/v1/memories', { method: 'POST', headers: { 'X-Min-Position': '' }, json: { scope: { agent: 'a', user: 'u' }, text: 'a command ignores the header' } });
  t.equal(stored.status, 200, 'a command: the header is ignored, as any X-Min-Position on a command');
});

t.test('an absent or valid consistency token is still accepted', async (t) => {
  t.equal((await app.platform('/agents', { headers: bearer(key) })).status, 200);
  t.equal((await app.platform('/agents?min_position=0', { headers: { ...bearer(key), 'X-Min-Position': '0' } })).status, 200);
  t.equal((await app.memory('/v1/search?min_position=0', { method: 'POST', json: { scope: { agent: 'a', user: 'u' }, query: 'x' } })).status, 200);
});

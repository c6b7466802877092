import t, { type Test } from 'tap';
import { request } from 'node:http';
import { SignJWT, UnsecuredJWT } from 'jose';
import { API_KEY_SCOPES } from '../../api/platform/keys/schemas.js';
import { apiKeyStream } from '../../domain/apikeys/decider.js';
import { bearer, projectWithKey, sessionToken, startTestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';

const KEY_SHAPE = /^sk_[0-9A-Za-z]{43}_[0-9A-Za-z]{6}$/;
let now = Date.parse('2026-06-01T12:00:00Z');
const app = await startTestCairn({}, { clock: () => new Date(now) });
t.teardown(() => app.stop());

t.test('sessions: only valid, signed, unexpired tokens with a tenant', async (t) => {
  const list = (token: string) => app.platform('/projects', { headers: bearer(token) });
  t.equal((await list(await sessionToken())).status, 200);
  const none = new UnsecuredJWT({ tenant_id: 'tenant-a' }).setSubject('u').setExpirationTime('10m').encode();
  t.equal((await list(none)).status, 401, 'alg none is rejected');
  t.equal((await list(await sessionToken({}, { secret: 'another-secret-of-at-least-32-bytes!!' }))).status, 401, 'wrong signature');
  t.equal((await list(await sessionToken({}, { alg: 'HS512' }))).status, 401, 'signed with the secret, but not with HS256');
  const expired = await new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setExpirationTime(Math.floor(Date.now() / 1000) - 60).sign(new TextEncoder().encode('test-secret-for-hs256-at-least-32-bytes!'));
  t.equal((await list(expired)).status, 401, 'expired');
  const secret = new TextEncoder().encode('test-secret-for-hs256-at-least-32-bytes!');
  const inSeconds = (s: number) => Math.floor(Date.now() / 1000) + s;
  const fromTheFuture = await new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(3600)).setExpirationTime(inSeconds(7200)).sign(secret);
  t.equal((await list(fromTheFuture)).status, 401, 'issued in the future (iat an hour ahead)');
  const skewed = await new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(30)).setExpirationTime(inSeconds(600)).sign(secret);
  t.equal((await list(skewed)).status, 200, 'an identity provider clock a little fast is tolerated');
  // At most 60 s ahead, 2 s either side of the edge for the time the request takes.
  const issuedIn = (s: number) => new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(s)).setExpirationTime(inSeconds(600)).sign(secret);
  t.equal((await list(await issuedIn(58))).status, 200, 'iat just under 60 s ahead');
  const tooFar = await list(await issuedIn(62));
  t.equal(tooFar.status, 401, 'iat just over 60 s ahead');
  t.match(await tooFar.json(), { type: 'https://cairn.dev/problems/unauthorized', status: 401 });
  const notYet = await new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setNotBefore(inSeconds(600)).setExpirationTime(inSeconds(900)).sign(secret);
  t.equal((await list(notYet)).status, 401, 'not valid before (nbf) a later time');
  // AUTH_SESSION_MAX_AGE (default 24 h), 2 s either side of the edge for the time the request takes.
  const day = 86_400;
  const issuedAgo = (age: number) => new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(-age)).setExpirationTime(inSeconds(600)).sign(secret);
  t.equal((await list(await issuedAgo(day - 2))).status, 200, 'a session just under the maximum age');
  t.equal((await list(await issuedAgo(day + 2))).status, 401, 'a session just over the maximum age, although unexpired');
  const lastingFor = (lifetime: number) => new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setExpirationTime(inSeconds(lifetime)).sign(secret);
  t.equal((await list(await lastingFor(day))).status, 200, 'without iat: valid for the maximum age from now');
  t.equal((await list(await lastingFor(day + 120))).status, 401, 'without iat: valid for longer than the maximum age from now');
  // The same 60 s allowance for a fast identity-provider clock as for iat, 2 s either side of its edge.
  t.equal((await list(await lastingFor(day + 58))).status, 200, 'exp just under the maximum age and 60 s ahead');
  t.equal((await list(await lastingFor(day + 62))).status, 401, 'exp just over the maximum age and 60 s ahead');
  const numericSub = await new SignJWT({ tenant_id: 'tenant-a', sub: 42 } as Record<string, unknown>).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('5m').sign(secret);
  t.equal((await list(numericSub)).status, 401, 'sub of the wrong type');
  const noTenant = await new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject('u').setExpirationTime('5m')
    .sign(new TextEncoder().encode('test-secret-for-hs256-at-least-32-bytes!'));
  const res = await list(noTenant);
  t.equal(res.status, 401, 'no tenant claim');
  t.match(await res.json(), { detail: /tenant_id/ });
  const missing = await app.platform('/projects');
  t.equal(missing.status, 401);
  t.equal(missing.headers.get('www-authenticate'), 'Bearer');
  t.equal(missing.headers.get('content-type'), 'application/problem+json');
});

t.test('nbf gets the 60 s allowance for a fast identity-provider clock that iat gets; exp gets none', async (t) => {
  const secret = new TextEncoder().encode('test-secret-for-hs256-at-least-32-bytes!');
  const list = async (token: string) => (await app.platform('/projects', { headers: bearer(token) })).status;
  const inSeconds = (s: number) => Math.floor(Date.now() / 1000) + s;
  // Providers such as Entra ID set nbf to iat: a token used at once, from a provider whose clock runs ahead.
  const issuedAhead = (s: number) => new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(s)).setNotBefore(inSeconds(s)).setExpirationTime(inSeconds(s + 600)).sign(secret);
  t.equal(await list(await issuedAhead(5)), 200, 'nbf = iat, 5 s ahead');
  // 2 s either side of the edge for the time the request takes.
  t.equal(await list(await issuedAhead(58)), 200, 'nbf = iat, just under 60 s ahead');
  t.equal(await list(await issuedAhead(62)), 401, 'nbf = iat, just over 60 s ahead');
  const expiredAgo = (s: number) => new SignJWT({ tenant_id: 'tenant-a' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u')
    .setIssuedAt(inSeconds(-600)).setExpirationTime(inSeconds(-s)).sign(secret);
  t.equal(await list(await expiredAgo(2)), 401, 'expired 2 s ago: no allowance');
  t.equal(await list(await expiredAgo(30)), 401, 'expired 30 s ago');
});

t.test('a tenant claim that is present but not a string is refused as such, not as missing', async (t) => {
  const secret = new TextEncoder().encode('test-secret-for-hs256-at-least-32-bytes!');
  for (const [tenant, said] of [[42, 'a number'], [['t1'], 'an array'], [{ id: 't1' }, 'an object'], [true, 'a boolean'], ['', 'empty'], [null, 'null']] as const) {
    const token = await new SignJWT({ tenant_id: tenant } as Record<string, unknown>).setProtectedHeader({ alg: 'HS256' }).setSubject('u').setExpirationTime('5m').sign(secret);
    const res = await app.platform('/projects', { headers: bearer(token) });
    t.equal(res.status, 401, JSON.stringify(tenant));
    t.match(await res.json(), { type: 'https://cairn.dev/problems/unauthorized', detail: `session token's tenant_id claim must be a non-empty string, not ${said}` });
  }
});

t.test('API keys: shape, shown once, stored as a hash, scoped, revocable, expiring', async (t) => {
  const { projectId, key, keyId, session } = await projectWithKey(app, 'tenant-keys');
  t.match(key, KEY_SHAPE);
  const listed = await app.platform(`/projects/${projectId}/keys`, { headers: bearer(session) });
  t.equal(listed.status, 200);
  const items = (await listed.json()) as Array<Record<string, unknown>>;
  t.equal(items.length, 1);
  t.match(items[0], { key_id: keyId, key_prefix: key.slice(0, 11), project_id: projectId, tenant_id: 'tenant-keys', scopes: ['*'], is_active: true, is_admin_managed: false, expires_at: null });
  t.notOk('key' in items[0]!, 'the key is never listed');
  t.notOk('key_hash' in items[0]!, 'nor its hash');
  const events = await app.events.readStream(apiKeyStream(keyId));
  t.notOk(JSON.stringify(events).includes(key), 'the key is not in the log');
  t.match(events[0]!.data, { key_hash: /^[0-9a-f]{64}$/ });

  t.equal((await app.platform('/agents', { headers: bearer(key) })).status, 200, 'the key works at once');
  t.equal((await app.platform('/agents', { headers: bearer(`${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`) })).status, 401, 'bad checksum');
  t.equal((await app.platform('/agents', { headers: bearer('sk_short') })).status, 401, 'malformed');
  t.equal((await app.platform(`/projects/${projectId}/keys`, { headers: bearer(key) })).status, 401, 'a key is not a session');
  t.equal((await app.platform('/agents', { headers: bearer(session) })).status, 401, 'a session is not a key');

  // last_used_at is recorded off the request path: wait for its event, then for the read model.
  // Bounded by time, not by a count of event-loop turns (a loaded machine records it later than 100 turns).
  for (const deadline = Date.now() + 5000; Date.now() < deadline && !(await app.events.readStream(apiKeyStream(keyId))).some((e) => e.type === 'ApiKeyUsed');) {
    await new Promise((r) => setTimeout(r, 10));
  }
  const used = await app.platform(`/projects/${projectId}/keys`, { headers: { ...bearer(session), 'X-Min-Position': String(await app.events.headPosition()) } });
  t.equal(((await used.json()) as Array<{ last_used_at: string }>)[0]!.last_used_at, new Date(now).toISOString());

  const revoke = await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  t.equal(revoke.status, 200);
  t.same(await revoke.json(), { success: true });
  const revokedAt = (await app.events.readStream(apiKeyStream(keyId))).find((e) => e.type === 'ApiKeyRevoked')?.position;
  t.equal(revoke.headers.get('x-event-position'), String(revokedAt), 'X-Event-Position is the revocation\'s position in the log');
  const after = await app.platform('/agents', { headers: bearer(key) });
  t.equal(after.status, 401, 'revoked keys stop working before the revocation response');
  t.match(await after.json(), { detail: /revoked/ });
  t.equal((await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) })).status, 200, 'revoking again is fine');
  t.equal((await app.platform(`/projects/${projectId}/keys/${crypto.randomUUID()}`, { method: 'DELETE', headers: bearer(session) })).status, 404);

  const expiring = await app.platform(`/projects/${projectId}/keys`, {
    method: 'POST', headers: bearer(session), json: { name: 'short', expires_at: new Date(now + 3600_000).toISOString() },
  });
  t.equal(expiring.status, 200);
  const short = (await expiring.json()) as { key: string };
  t.equal((await app.platform('/agents', { headers: bearer(short.key) })).status, 200);
  now += 3599_999;
  t.equal((await app.platform('/agents', { headers: bearer(short.key) })).status, 200, 'a millisecond before expires_at it still works');
  now += 1;
  const expired = await app.platform('/agents', { headers: bearer(short.key) });
  t.equal(expired.status, 401, 'a key stops working the moment it expires');
  t.match(await expired.json(), { detail: /expired/ });
  const listedAfter = (await (await app.platform(`/projects/${projectId}/keys`, { headers: bearer(session) })).json()) as Array<{ name: string; is_active: boolean }>;
  t.equal(listedAfter.find((k) => k.name === 'short')!.is_active, false, 'and the listing says so');

  const past = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { expires_at: new Date(now - 1).toISOString() } });
  t.equal(past.status, 400);
  t.match(await past.json(), { errors: [{ location: 'body.expires_at' }] });
  const leap = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { expires_at: '2030-12-31T23:59:60Z' } });
  t.equal(leap.status, 400, 'a leap second (valid RFC 3339, not a JavaScript date) is a 400, not a 500');
  t.match(await leap.json(), { errors: [{ location: 'body.expires_at', message: /leap second/ }] });
  const badScope = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { scopes: ['root'] } });
  t.equal(badScope.status, 400);
  const unknown = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { admin: true } });
  t.equal(unknown.status, 400);
  t.match(await unknown.json(), { errors: [{ location: 'body', message: /unknown field: admin/ }] });
});

t.test('scopes limit what a key may do', async (t) => {
  const { key } = await projectWithKey(app, 'tenant-scopes', ['agents:read']);
  t.equal((await app.platform('/agents', { headers: bearer(key) })).status, 200);
  const denied = await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: 'Nope' } });
  t.equal(denied.status, 403);
  t.match(await denied.json(), { type: /insufficient-scope/, detail: /agents:write/ });
  const projects = await app.platform('/projects', { headers: bearer(key) });
  t.equal(projects.status, 403, 'GET /projects needs projects:read');
  t.match(await projects.json(), { detail: /projects:read/ });
  const reader = await projectWithKey(app, 'tenant-scopes-2', ['projects:read']);
  t.equal((await app.platform('/projects', { headers: bearer(reader.key) })).status, 200);
});

t.test('every operation a key may call needs the scope its OpenAPI document names, and no other', async (t) => {
  const doc = (await (await app.platform('/docs/openapi.json')).json()) as { paths: Record<string, Record<string, { 'x-required-scope'?: string }>> };
  const operations = Object.entries(doc.paths).flatMap(([path, ops]) => Object.entries(ops)
    .flatMap(([method, op]) => (op['x-required-scope'] ? [{ method: method.toUpperCase(), path: path.replace(/^\/api\/v1/, ''), scope: op['x-required-scope'] }] : [])));
  t.same([...new Set(operations.map((o) => o.scope))].sort(), API_KEY_SCOPES.filter((s) => s !== '*').sort(), 'every scope guards some operation');
  const { projectId, session } = await projectWithKey(app, 'tenant-scope-table');
  const keys = new Map<string, string>();
  for (const scope of API_KEY_SCOPES) {
    const res = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name: scope, scopes: [scope] } });
    keys.set(scope, ((await res.json()) as { key: string }).key);
  }
  let n = 0;
  const call = (op: { method: string; path: string }, key: string) => app.platform(op.path.replace('{projectId}', projectId).replace('{key}', 'theme').replace('{agentId}', 'Nobody'), {
    method: op.method, headers: bearer(key),
    ...(op.method === 'POST' ? { json: { name: `Scoped ${n++}` } } : op.method === 'PUT' ? { json: 'dark' } : {}),
  });
  for (const op of operations) {
    for (const scope of API_KEY_SCOPES.filter((s) => s !== '*' && s !== op.scope)) {
      const res = await call(op, keys.get(scope)!);
      t.equal(res.status, 403, `${op.method} ${op.path} with only ${scope}`);
      t.match(await res.json(), { type: 'https://cairn.dev/problems/insufficient-scope', detail: new RegExp(op.scope) });
    }
    for (const scope of [op.scope, '*']) {
      const status = (await call(op, keys.get(scope)!)).status;
      t.notOk([401, 403].includes(status), `${op.method} ${op.path} with ${scope}: ${status}`);
    }
  }
  // The scope is checked before anything is looked up: another project's objects tell a key without it nothing either.
  const other = await projectWithKey(app, 'tenant-scope-other');
  for (const projectId of [other.projectId, crypto.randomUUID()]) {
    const res = await app.platform(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: bearer(keys.get('config:read')!), json: 'dark' });
    t.equal(res.status, 403, 'another project, or none: 403 as for its own');
  }
});

t.test('project ids in paths are case-insensitive UUIDs', async (t) => {
  const { projectId, key, session } = await projectWithKey(app, 'tenant-case');
  const upper = projectId.toUpperCase();
  t.not(upper, projectId);
  const put = await app.platform(`/projects/${upper}/config/theme`, { method: 'PUT', headers: bearer(key), json: 'dark' });
  t.equal(put.status, 200, 'the own project, written upper-case');
  const got = await app.platform(`/projects/${projectId}/config/theme`, { headers: { ...bearer(key), 'X-Min-Position': put.headers.get('x-event-position')! } });
  t.same(await got.json(), 'dark', 'one project, whatever the case');
  t.equal((await app.platform(`/projects/${upper}/keys`, { headers: bearer(session) })).status, 200, 'keys too (a session)');
});

t.test('min_position: only on queries, one valid position', async (t) => {
  const { projectId, key } = await projectWithKey(app, 'tenant-minpos');
  const onCommand = await app.platform(`/projects/${projectId}/config/x?min_position=1`, { method: 'PUT', headers: bearer(key), json: 1 });
  t.equal(onCommand.status, 400);
  t.match(await onCommand.json(), { errors: [{ location: 'query.min_position' }] });
  const invalid = await app.platform(`/projects/${projectId}/config?min_position=abc`, { headers: bearer(key) });
  t.equal(invalid.status, 400);
  t.match(await invalid.json(), { errors: [{ location: 'query.min_position' }] });
  const header = await app.platform(`/projects/${projectId}/config`, { headers: { ...bearer(key), 'X-Min-Position': 'abc' } });
  t.match(await header.json(), { errors: [{ location: 'header.X-Min-Position' }] });
  t.equal((await app.platform(`/projects/${projectId}/config?min_position=1&min_position=2`, { headers: bearer(key) })).status, 400, 'given twice');
});

t.test('tenants and projects are isolated', async (t) => {
  const a = await projectWithKey(app, 'tenant-iso-a');
  const b = await projectWithKey(app, 'tenant-iso-b');
  const listA = (await (await app.platform('/projects', { headers: bearer(a.session) })).json()) as { projects: Array<{ project_id: string }> };
  t.same(listA.projects.map((p) => p.project_id), [a.projectId], 'a session lists only its tenant\'s projects');
  const viaKey = (await (await app.platform('/projects', { headers: bearer(b.key) })).json()) as { projects: Array<{ project_id: string }> };
  t.same(viaKey.projects.map((p) => p.project_id), [b.projectId], 'a key lists only its project');
  t.equal((await app.platform(`/projects/${a.projectId}/keys`, { headers: bearer(b.session) })).status, 404, 'other tenant\'s keys: 404');
  t.equal((await app.platform(`/projects/${a.projectId}/keys`, { method: 'POST', headers: bearer(b.session), json: {} })).status, 404);
  t.equal((await app.platform(`/projects/${a.projectId}/keys/${a.keyId}`, { method: 'DELETE', headers: bearer(b.session) })).status, 404);
  t.equal((await app.platform('/agents', { headers: bearer(a.key) })).status, 200, 'a\'s key still works after b\'s attempts');

  // Two projects of one tenant: a key belongs to its project, also for that tenant's own session.
  const one = await projectWithKey(app, 'tenant-iso-c');
  const two = await projectWithKey(app, 'tenant-iso-c');
  t.equal((await app.platform(`/projects/${one.projectId}/keys/${two.keyId}`, { method: 'DELETE', headers: bearer(one.session) })).status, 404, 'a key of another project of the same tenant: 404');
  const listed = (await (await app.platform(`/projects/${one.projectId}/keys`, { headers: bearer(one.session) })).json()) as Array<{ key_id: string }>;
  t.same(listed.map((k) => k.key_id), [one.keyId], 'each project lists only its own keys');
  t.equal((await app.platform('/agents', { headers: bearer(two.key) })).status, 200, 'and the other project\'s key still works');
  t.equal((await app.platform(`/projects/${one.projectId}/config`, { headers: bearer(two.key) })).status, 404, 'a key cannot reach a sibling project');
});

t.test('browser requests are refused, backend fetch is not', async (t) => {
  const { key } = await projectWithKey(app, 'tenant-browser');
  t.equal((await app.platform('/agents', { headers: bearer(key) })).status, 200, 'Node fetch (Sec-Fetch-Mode: cors, no Sec-Fetch-Site) passes');
  const browserHeaders: Array<Record<string, string>> = [{ Origin: 'https://evil.example' }, { 'Sec-Fetch-Site': 'cross-site' }, { 'Sec-Fetch-Site': 'same-site' }, { 'Sec-Fetch-Site': 'same-origin', 'Sec-Fetch-Mode': 'cors' }];
  for (const headers of browserHeaders) {
    const res = await app.platform('/agents', { headers: { ...bearer(key), ...headers } });
    t.equal(res.status, 403, JSON.stringify(headers));
    t.equal(res.headers.get('content-type'), 'application/problem+json');
  }
  t.equal((await app.platform('/healthz', { headers: { Origin: 'https://x.example' } })).status, 403, 'also on public routes');
  // Navigations carry Sec-Fetch-Site too (same-origin on a DNS-rebound name, none for a typed address).
  // Sent with node:http, which sends the headers as given (fetch puts its own Sec-Fetch-Mode: cors in).
  const agentsWith = (headers: Record<string, string>) => new Promise<number>((resolve, reject) => {
    const url = new URL(app.platformUrl);
    const req = request({ host: url.hostname, port: url.port, path: '/api/v1/agents', headers: { ...bearer(key), ...headers } }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(await agentsWith({}), 200, 'a backend\'s request');
  t.equal(await agentsWith({ 'Sec-Fetch-Site': 'same-origin', 'Sec-Fetch-Mode': 'navigate' }), 403, 'same-origin navigation');
  t.equal(await agentsWith({ 'Sec-Fetch-Site': 'none', 'Sec-Fetch-Mode': 'navigate' }), 403, 'a typed address');
  t.equal(await agentsWith({ Origin: '' }), 403, 'an empty Origin header is still one');
  t.equal(await agentsWith({ Origin: 'https://evil.example', 'Idempotency-Key': 'has space' }), 403, 'refused before its other headers are read');
});

t.test('project creation', async (t) => {
  const session = await sessionToken({ tenant_id: 'tenant-create' });
  const blank = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: '   ' } });
  t.equal(blank.status, 400);
  const long = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'x'.repeat(201) } });
  t.equal(long.status, 400);
  const edge = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'x'.repeat(200) } });
  t.equal(edge.status, 200);
  const headers = { ...bearer(session), 'Idempotency-Key': 'create-project-0001' };
  const first = (await (await app.platform('/projects', { method: 'POST', headers, json: { name: 'Once' } })).json()) as { project_id: string };
  const again = (await (await app.platform('/projects', { method: 'POST', headers, json: { name: 'Once' } })).json()) as { project_id: string };
  t.equal(again.project_id, first.project_id, 'same Idempotency-Key, same project');
  const other = await app.platform('/projects', { method: 'POST', headers, json: { name: 'Different' } });
  t.equal(other.status, 422, 'same key, different request');

  // A node whose read model cannot catch up within CONSISTENCY_TIMEOUT_MS answers the durable project from its
  // event, not with a 503 inviting a retry. Its runners are stopped, so that it cannot (a timeout alone raced
  // with the runners' batch window, and lost on a stalled VM).
  const { lines, log } = capturingLogger();
  const slow = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '0', PROJECTIONS_THREAD: 'false' }, { dataDir: app.dataDir, log });
  t.teardown(() => slow.stop());
  await slow.projections.stop();
  const created = await slow.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'Slow' } });
  t.equal(created.status, 200, 'created although its read model has not applied it yet');
  t.ok(lines.some((l) => l.msg === 'project created; the projects read model has not applied it yet'), 'answered from the event');
  const project = (await created.json()) as { project_id: string };
  const listed = (await (await app.platform('/projects', { headers: { ...bearer(session), 'X-Min-Position': created.headers.get('x-event-position')! } })).json()) as { projects: Array<{ project_id: string }> };
  t.same(listed.projects.find((p) => p.project_id === project.project_id), project, 'the same project the read model then has');
});

/**
 * Project and key names follow agent names' rules, with `max` counted on the stored (trimmed, NFC) form:
 * `create` sends a name and answers the status and the name stored (as the API returns it, then as listed).
 */
async function nameRules(t: Test, max: number, create: (name: string) => Promise<{ status: number; body: unknown; listed?: string }>) {
  const edge = await create(` ${'p'.repeat(max)} `);
  t.match(edge, { status: 200, body: { name: 'p'.repeat(max) }, listed: 'p'.repeat(max) }, `${max} characters between spaces: accepted, stored trimmed`);
  const past = await create(` ${'p'.repeat(max + 1)} `);
  t.match(past, { status: 400, body: { type: 'https://cairn.dev/problems/validation', errors: [{ location: 'body.name', message: new RegExp(`more than ${max} characters \\(after trimming`) }] } }, 'one past it');
  const decomposed = await create('e\u0301'.repeat(max));
  t.match(decomposed, { status: 200, body: { name: '\u00e9'.repeat(max) }, listed: '\u00e9'.repeat(max) }, 'decomposed: stored composed, and counted so');
  for (const [name, code, message] of [['Ac\u200Bme', 'U+200B', /invisible/], ['Ac\u202Eme', 'U+202E', /bidirectional/], ['Ac\u0007me', 'U+0007', /control/]] as const) {
    const refused = await create(name);
    t.match(refused, { status: 400, body: { type: 'https://cairn.dev/problems/validation', errors: [{ location: 'body.name', message, value: `${code} at UTF-16 offset 2` }] } }, `${code}: refused, naming it`);
  }
  for (const name of ['\u0915\u094D\u200D\u0937', '\u{1F469}\u{1F3FD}\u200D\u{1F4BB} team']) {
    t.match(await create(name), { status: 200, body: { name }, listed: name }, `a joiner that shapes a conjunct or an emoji: ${JSON.stringify(name)}`);
  }
}

t.test('project names follow agent names\' rules', async (t) => {
  const session = await sessionToken({ tenant_id: 'tenant-project-names' });
  await nameRules(t, 200, async (name) => {
    const res = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name } });
    const body = (await res.json()) as { project_id?: string };
    if (res.status !== 200) return { status: res.status, body };
    const listed = (await (await app.platform('/projects', { headers: { ...bearer(session), 'X-Min-Position': res.headers.get('x-event-position')! } })).json()) as { projects: Array<{ project_id: string; name: string }> };
    return { status: res.status, body, listed: listed.projects.find((p) => p.project_id === body.project_id)?.name };
  });
});

t.test('key names follow agent names\' rules', async (t) => {
  const { projectId, session } = await projectWithKey(app, 'tenant-key-name-rules');
  await nameRules(t, 100, async (name) => {
    const res = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name } });
    const body = (await res.json()) as { key_id?: string };
    if (res.status !== 200) return { status: res.status, body };
    const listed = (await (await app.platform(`/projects/${projectId}/keys`, { headers: { ...bearer(session), 'X-Min-Position': res.headers.get('x-event-position')! } })).json()) as Array<{ key_id: string; name: string }>;
    return { status: res.status, body, listed: listed.find((k) => k.key_id === body.key_id)?.name };
  });
});

t.test('a key revoked through one node stops working on another that shares the read models', async (t) => {
  // Two servers on one DATA_DIR stand for two API nodes on one EventStoreDB + MongoDB: each node's
  // api-keys runner finds the checkpoint already moved by the other and reloads without applying the
  // events itself, so only that reload can tell its key cache.
  const a = await startTestCairn();
  const b = await startTestCairn({}, { dataDir: a.dataDir });
  t.teardown(async () => { await b.stop(); await a.stop(); });
  const { projectId, key, keyId, session } = await projectWithKey(a);
  const list = (node: typeof a) => node.platform(`/projects/${projectId}/config`, { headers: bearer(key) });
  t.equal((await list(a)).status, 200);
  let seenByB = 0;
  for (const deadline = Date.now() + 5000; Date.now() < deadline && seenByB !== 200;) seenByB = (await list(b)).status;
  t.equal(seenByB, 200, 'node B authenticated the key (and cached it)');
  t.equal((await list(b)).status, 200);
  const revoke = await a.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  t.equal(revoke.status, 200);
  t.equal((await list(a)).status, 401, 'refused at once by the node that revoked it');
  let onB = 200;
  const started = Date.now();
  for (const deadline = started + 5000; Date.now() < deadline && onB !== 401; await new Promise((r) => setTimeout(r, 20))) onB = (await list(b)).status;
  t.equal(onB, 401, `refused by node B once its projection sees the revocation (after ${Date.now() - started} ms)`);
});

t.test('key creation: names of 1-100 characters, not blank; omitted is "default"', async (t) => {
  const { projectId, session } = await projectWithKey(app, 'tenant-key-names');
  const create = (json: Record<string, unknown>) => app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json });
  const blank = await create({ name: '   ' });
  t.equal(blank.status, 400, 'a blank name is refused, as a blank project name is');
  t.match(await blank.json(), { errors: [{ location: 'body.name', message: /whitespace/ }] });
  t.equal((await create({ name: '' })).status, 400);
  t.equal((await create({ name: 'x'.repeat(101) })).status, 400);
  t.match(await (await create({ name: 'x'.repeat(100) })).json(), { name: 'x'.repeat(100) });
  t.match(await (await create({ name: '  ci  ' })).json(), { name: 'ci' }, 'trimmed');
  t.match(await (await create({})).json(), { name: 'default' });
  const nulls = await create({ name: null, scopes: null, expires_at: null });
  t.equal(nulls.status, 200, 'null is the same as left out');
  t.match(await nulls.json(), { name: 'default', scopes: ['*'], expires_at: null });
  t.same((await (await create({ name: 5, scopes: 'config:read' })).json()).errors.map((e: { location: string; message: string }) => [e.location, e.message]).sort(),
    [['body.name', 'must be a string or null'], ['body.scopes', 'must be an array or null']], 'a wrong type still names the field and what it may be');
});

t.test('key creation: expires_at at least a millisecond ahead; scopes 1-6 distinct ones', async (t) => {
  const { projectId, session } = await projectWithKey(app, 'tenant-key-edges');
  const create = (json: Record<string, unknown>) => app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json });
  const refused = async (res: Response, location: string, what: string) => {
    t.equal(res.status, 400, what);
    t.match(await res.json(), { type: 'https://cairn.dev/problems/validation', errors: [{ location }] }, `${what}: names ${location}`);
  };
  const soon = await create({ expires_at: new Date(now + 1).toISOString() });
  t.equal(soon.status, 200, 'expires_at a millisecond ahead');
  t.equal(((await soon.json()) as { expires_at: string }).expires_at, new Date(now + 1).toISOString());
  await refused(await create({ expires_at: new Date(now).toISOString() }), 'body.expires_at', 'expires_at now');

  const all = ['*', 'agents:read', 'agents:write', 'config:read', 'config:write', 'projects:read'];
  const every = await create({ scopes: all });
  t.equal(every.status, 200, 'all six scopes');
  t.same(((await every.json()) as { scopes: string[] }).scopes, all);
  t.equal((await create({ scopes: ['config:read'] })).status, 200, 'one scope');
  await refused(await create({ scopes: [] }), 'body.scopes', 'no scope');
  await refused(await create({ scopes: [...all, 'config:read'] }), 'body.scopes', 'seven: one repeated');
  await refused(await create({ scopes: ['config:read', 'config:read'] }), 'body.scopes', 'a scope twice');
  // A value outside the choice is one error that lists the choice, not one "must be equal to constant" per scope.
  const unknown = await create({ scopes: ['config:read', 'bogus'] });
  t.equal(unknown.status, 400, 'an unknown scope');
  t.same(((await unknown.json()) as { errors: unknown[] }).errors, [{
    location: 'body.scopes.1', message: 'must be one of "*", "agents:read", "agents:write", "config:read", "config:write", "projects:read"', value: 'bogus',
  }], 'one error naming every scope');
});

t.test('key creation: a repeat with the same Idempotency-Key is 409, and a slow read model never loses the secret', async (t) => {
  const { projectId, session } = await projectWithKey(app, 'tenant-key-replay');
  const headers = { ...bearer(session), 'Idempotency-Key': 'create-key-0001' };
  const first = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers, json: { name: 'ci' } });
  t.equal(first.status, 200);
  const again = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers, json: { name: 'ci' } });
  t.equal(again.status, 409, 'the secret cannot be shown twice');
  t.match(await again.json(), { status: 409, detail: /cannot be shown again/ });
  const other = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers, json: { name: 'another' } });
  t.equal(other.status, 409, 'a different request with that key too: it already created a key');
  // A key that expires: its creation repeated after the expiry is still a repeat, not a request for a key expiring in
  // the past (400 before: the expiry was checked before the repeat was recognised).
  const expiring = { ...bearer(session), 'Idempotency-Key': 'create-key-expiring' };
  const body = { name: 'short-lived', expires_at: new Date(now + 120_000).toISOString() };
  t.equal((await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: expiring, json: body })).status, 200);
  now += 180_000;
  const late = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: expiring, json: body });
  t.equal(late.status, 409, 'repeated after its expiry: 409');
  t.match(await late.json(), { type: /idempotency-replay$/ });
  const pastExpiry = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: { ...bearer(session), 'Idempotency-Key': 'create-key-in-the-past' }, json: body });
  t.equal(pastExpiry.status, 400, 'a first request for a key expiring in the past is refused');

  // A node whose read model cannot catch up within CONSISTENCY_TIMEOUT_MS still hands out the durable key instead
  // of a 503. Its runners are stopped, so that it cannot: with them running, a 0 ms timeout races their batch
  // window, and a fast read model would pass this test without the slow path ever running.
  const { lines, log } = capturingLogger();
  const slow = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '0', PROJECTIONS_THREAD: 'false' }, { dataDir: app.dataDir, log });
  t.teardown(() => slow.stop());
  await slow.projections.stop();
  const created = await slow.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name: 'slow' } });
  t.equal(created.status, 200);
  t.ok(lines.some((l) => l.msg === 'api key created; the api-keys read model has not applied it yet'), 'answered although its read model has not applied it');
  const { key, key_id: slowKeyId } = (await created.json()) as { key: string; key_id: string };
  t.match(key, KEY_SHAPE);
  const [slowKeyCreated] = await app.events.readStream(apiKeyStream(slowKeyId));
  t.equal(created.headers.get('x-event-position'), String(slowKeyCreated?.position), 'X-Event-Position is the key\'s ApiKeyCreated in the log');
  // The key works once a read model has it (a node started now catches up before it serves).
  const fresh = await startTestCairn({}, { dataDir: app.dataDir });
  t.teardown(() => fresh.stop());
  t.equal((await fresh.platform(`/projects/${projectId}/config`, { headers: bearer(key) })).status, 200);
});

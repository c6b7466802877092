import t from 'tap';
import { request } from 'node:http';
import { generateApiKey } from '../../infra/apikeys.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

// Findings of the authentication audit, each reproduced against the started app.

/**
 * Sends a GET with exactly these header lines, in this order (fetch would fold a repeated header into one
 * line). Node adds nothing, not even Host: `headers` must carry it.
 */
function rawGet(base: string, path: string, headers: Array<[string, string]>): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path, headers: headers.flat(), setHost: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => { body += chunk; });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

// A wait for the key read model that the audit's fixes rule out would last CONSISTENCY_TIMEOUT_MS: long enough here
// that a loaded machine's slowest answer cannot be mistaken for it.
const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '10000', MEMORY_OWNER_TOKEN: 'owner-token-of-the-audit', MEMORY_ALLOWED_HOSTS: 'memory.internal' });
t.teardown(() => app.stop());
const { projectId, key, session } = await projectWithKey(app, 'tenant-security');
const platformHost: [string, string] = ['Host', new URL(app.platformUrl).host];

t.test('a key that fails its shape or checksum is refused before any wait for the key read model', async (t) => {
  const wrongChecksum = `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`;
  const farAhead = { 'X-Min-Position': '9999999999' };
  for (const [what, token] of [['malformed', 'sk_short'], ['wrong checksum', wrongChecksum]] as const) {
    for (const [operation, call] of [
      ['a query', () => app.platform('/agents', { headers: { ...bearer(token), ...farAhead } })],
      ['a command', () => app.platform(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: { ...bearer(token), ...farAhead }, json: 'dark' })],
    ] as const) {
      const res = await call();
      t.equal(res.status, 401, `${what} key on ${operation}: 401 at once, not a 503 once CONSISTENCY_TIMEOUT_MS has passed`);
      t.match(await res.json(), { type: 'https://cairn.dev/problems/unauthorized', detail: /malformed/ });
    }
  }
  t.equal(app.pendingWaits(), 0, 'no wait was left behind');
  // A well-formed key that does not exist (anyone can compute a checksum): its creation would be in the log,
  // so the wait for the key read model goes no further than the log's head.
  const unknown = generateApiKey().key;
  const started = Date.now();
  const refused = await app.platform('/agents', { headers: { ...bearer(unknown), ...farAhead } });
  t.equal(refused.status, 401, 'an unknown well-formed key with X-Min-Position far ahead: 401');
  // Held until CONSISTENCY_TIMEOUT_MS (10 s), it would take 10 s; 5 s leaves half of that for a loaded machine.
  const took = Date.now() - started;
  t.ok(took < 5000, `at once, not after CONSISTENCY_TIMEOUT_MS (took ${took} ms)`);
  // A well-formed key still waits for the position it names (its creation's X-Event-Position works at once).
  const res = await app.platform('/agents', { headers: { ...bearer(key), 'X-Min-Position': '1' } });
  t.equal(res.status, 200);
});

t.test('an Authorization header sent more than once is refused, whichever line holds valid credentials', async (t) => {
  const garbage: [string, string] = ['Authorization', 'Bearer sk_not_a_key'];
  const agents = (lines: Array<[string, string]>) => rawGet(app.platformUrl, '/api/v1/agents', [platformHost, ...lines]);
  t.equal((await agents([['Authorization', `Bearer ${key}`]])).status, 200, 'once: the key works');
  for (const [what, lines] of [
    ['valid key first', [['Authorization', `Bearer ${key}`], garbage]],
    ['valid key second', [garbage, ['Authorization', `Bearer ${key}`]]],
    ['the same key twice', [['Authorization', `Bearer ${key}`], ['authorization', `Bearer ${key}`]]],
  ] as const) {
    const res = await agents(lines as unknown as Array<[string, string]>);
    t.equal(res.status, 401, `platform, ${what}`);
    t.equal(res.headers['content-type'], 'application/problem+json');
    t.equal(res.headers['www-authenticate'], 'Bearer');
    t.match(JSON.parse(res.body), { type: 'https://cairn.dev/problems/unauthorized', detail: /more than once/ });
  }
  const projects = await rawGet(app.platformUrl, '/api/v1/projects', [platformHost, ['Authorization', `Bearer ${session}`], ['Authorization', `Bearer ${key}`]]);
  t.equal(projects.status, 401, 'platform, a session and a key: neither is chosen');
  t.match(JSON.parse(projects.body), { type: 'https://cairn.dev/problems/unauthorized', detail: /more than once/ }, 'refused for the repeated header');

  const memoryHost: [string, string] = ['Host', 'memory.internal'];
  const exportScope = (lines: Array<[string, string]>) => rawGet(app.memoryUrl, '/v1/export?agent=a&user=b', [memoryHost, ...lines]);
  const owner: [string, string] = ['Authorization', 'Bearer owner-token-of-the-audit'];
  t.equal((await exportScope([owner])).status, 200, 'memory, once: the owner token works');
  for (const [what, lines] of [['owner token first', [owner, ['Authorization', 'Bearer wrong']]], ['owner token second', [['Authorization', 'Bearer wrong'], owner]]] as const) {
    const res = await exportScope(lines as unknown as Array<[string, string]>);
    t.equal(res.status, 401, `memory, ${what}`);
    t.match(JSON.parse(res.body), { type: 'https://cairn.dev/problems/unauthorized', detail: /more than once/ });
  }
});

t.test('a Host header sent more than once is a 400 on both services (RFC 9112 §3.2), before any other check', async (t) => {
  const owner: [string, string] = ['Authorization', 'Bearer owner-token-of-the-audit'];
  const exportWith = (hosts: string[]) => rawGet(app.memoryUrl, '/v1/export?agent=a&user=b', [...hosts.map((h): [string, string] => ['Host', h]), owner]);
  t.equal((await exportWith(['memory.internal'])).status, 200, 'the allowed host');
  t.equal((await exportWith(['evil.example'])).status, 403, 'another host');
  for (const hosts of [['memory.internal', 'evil.example'], ['evil.example', 'memory.internal'], ['memory.internal', 'memory.internal']]) {
    const res = await exportWith(hosts);
    t.equal(res.status, 400, `Host: ${hosts.join(' + Host: ')}`);
    t.match(JSON.parse(res.body), { type: 'https://cairn.dev/problems/malformed-request', detail: /Host header was sent more than once/ });
  }
  t.equal((await rawGet(app.memoryUrl, '/healthz', [['Host', '10.0.0.7']])).status, 200, 'the probes answer any Host, as before');
  for (const [what, base, path] of [['memory probe', app.memoryUrl, '/healthz'], ['platform', app.platformUrl, '/api/v1/agents'], ['platform probe', app.platformUrl, '/healthz']] as const) {
    const res = await rawGet(base, path, [platformHost, platformHost, ['Authorization', `Bearer ${key}`]]);
    t.equal(res.status, 400, `${what}: two Host lines`);
    t.match(JSON.parse(res.body), { type: 'https://cairn.dev/problems/malformed-request' });
  }
});

t.test('the Bearer scheme is read as RFC 9110 allows: any case, spaces before the token', async (t) => {
  for (const value of [`bearer ${key}`, `BEARER ${key}`, `Bearer    ${key}`]) {
    t.equal((await rawGet(app.platformUrl, '/api/v1/agents', [platformHost, ['Authorization', value]])).status, 200, JSON.stringify(value.slice(0, 12)));
  }
  for (const value of [`Bearer ${key} extra`, `Basic ${key}`, `Bearer${key}`, `Bearer ${key},Bearer ${key}`]) {
    t.equal((await rawGet(app.platformUrl, '/api/v1/agents', [platformHost, ['Authorization', value]])).status, 401, JSON.stringify(value.replaceAll(key, '<key>')));
  }
});

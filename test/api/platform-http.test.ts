import t from 'tap';
import { validate as validateOpenApi } from '@readme/openapi-parser';
import { connect } from 'node:net';
import { deflateSync, gzipSync } from 'node:zlib';
import { parse as parseYaml } from 'yaml';
import { PROBLEM_TYPES } from '../../api/http/problem.js';
import { until } from '../support/logs.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

const app = await startTestCairn();
t.teardown(() => app.stop());

t.test('health and unknown routes', async (t) => {
  const health = await app.platform('/healthz');
  t.strictSame(await health.json(), { status: 'ok' });
  const missing = await app.platform('/nothing-here');
  t.equal(missing.status, 404);
  t.equal(missing.headers.get('content-type'), 'application/problem+json');
  const problem = await missing.json();
  t.match(problem, { type: /not-found/, title: 'Not Found', status: 404, detail: /no route/, instance: missing.headers.get('x-request-id') });
  t.equal(problem.$schema, '/docs/openapi.json#/components/schemas/Problem', 'names its schema, as the spec\'s error model does');
  const doc = await (await app.platform('/docs/openapi.json')).json();
  t.ok(doc.components.schemas.Problem.properties.$schema, 'which describes $schema too');
});

t.test('wrong method: 405 with Allow', async (t) => {
  const res = await app.platform('/agents', { method: 'DELETE' });
  t.equal(res.status, 405);
  t.equal(res.headers.get('allow'), 'GET, HEAD, POST');
  t.match(await res.json(), { status: 405, title: 'Method Not Allowed' });
  const cfg = await app.platform(`/projects/${crypto.randomUUID()}/config/x`, { method: 'POST' });
  t.equal(cfg.status, 405);
  t.equal(cfg.headers.get('allow'), 'DELETE, GET, HEAD, PUT');
});

t.test('no answer may be cached: keys shown once, project data and memories carry Cache-Control: no-store', async (t) => {
  const { key, projectId, session } = await projectWithKey(app, 'tenant-no-store');
  const created = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name: 'shown once' } });
  const answers = {
    'a created key': created,
    'a query': await app.platform('/agents', { headers: bearer(key) }),
    'a problem': await app.platform('/agents', { headers: bearer('sk_nope') }),
    'an unknown route': await app.platform('/nothing-here'),
    'a memory export': await fetch(`${app.memoryUrl}/v1/export?agent=a&user=u`),
  };
  for (const [what, res] of Object.entries(answers)) {
    t.equal(res.headers.get('cache-control'), 'no-store', what);
    t.equal(res.headers.get('x-content-type-options'), 'nosniff', `${what}: never read as another type than it says`);
  }
});

t.test('request ids are echoed and recorded as correlation ids', async (t) => {
  const { key } = await projectWithKey(app);
  const res = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'X-Request-Id': 'req-trace-42' }, json: { name: 'Traced' } });
  t.equal(res.headers.get('x-request-id'), 'req-trace-42');
  const body = (await res.json()) as { agent_id: string };
  const [event] = await app.events.readStream(`agent-${body.agent_id}`);
  t.match(event!.metadata, { correlation_id: 'req-trace-42', causation_id: 'req-trace-42', occurred_at: /Z$/ });
  const bad = await app.platform('/healthz', { headers: { 'X-Request-Id': 'has spaces and is bad' } });
  t.not(bad.headers.get('x-request-id'), 'has spaces and is bad', 'an unusable id is replaced');
  const idem = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'Idempotency-Key': 'x'.repeat(256) }, json: { name: 'Long key' } });
  t.equal(idem.status, 400, 'Idempotency-Key over 255 characters');
});

t.test('event metadata names the project, also for a dashboard session, and ApiKeyUsed the request that used the key', async (t) => {
  const { projectId, keyId } = await projectWithKey(app, 'tenant-meta');
  const [created] = await app.events.readStream(`project-${projectId}`);
  t.match(created!.metadata, { project_id: projectId, actor: /^user:/ }, 'ProjectCreated (a session)');
  const [keyCreated] = await app.events.readStream(`apikey-${keyId}`);
  t.match(keyCreated!.metadata, { project_id: projectId, actor: /^user:/ }, 'ApiKeyCreated (a session)');

  // A fresh key: its first use is recorded (at most once a minute per key), caused by that request.
  const { key: fresh, keyId: freshId } = await projectWithKey(app, 'tenant-meta-2');
  const used = await app.platform('/agents', { headers: { ...bearer(fresh), 'X-Request-Id': 'req-key-use-7' } });
  t.equal(used.status, 200);
  let recorded;
  for (const deadline = Date.now() + 10_000; Date.now() < deadline && !recorded; await new Promise((r) => setTimeout(r, 20))) {
    recorded = (await app.events.readStream(`apikey-${freshId}`)).find((e) => e.type === 'ApiKeyUsed');
  }
  t.ok(recorded, 'ApiKeyUsed appended');
  t.match(recorded!.metadata, { correlation_id: 'req-key-use-7', causation_id: 'req-key-use-7', actor: `key:${freshId}`, tenant_id: 'tenant-meta-2' }, 'with the key\'s project and tenant, as every platform event');
});

t.test('every command\'s events carry the request as correlation and cause, its actor, its project and tenant and when', async (t) => {
  const { projectId, key, keyId, session } = await projectWithKey(app, 'tenant-meta-all');
  const send = async (path: string, init: RequestInit & { json?: unknown }, requestId: string) => {
    const res = await app.platform(path, { ...init, headers: { ...init.headers as Record<string, string>, 'X-Request-Id': requestId } });
    t.ok(res.status < 300, `${init.method} ${path}: ${res.status}`);
    return res;
  };
  const appended = async (stream: string, requestId: string) => (await app.events.readStream(stream)).filter((e) => e.metadata.correlation_id === requestId);
  const expect = (events: Awaited<ReturnType<typeof appended>>, types: string[], requestId: string, actor: string, what: string) => {
    t.strictSame(events.map((e) => e.type), types, what);
    for (const e of events) t.match(e.metadata, { correlation_id: requestId, causation_id: requestId, actor, project_id: projectId, tenant_id: 'tenant-meta-all', occurred_at: /Z$/ }, `${what}: ${e.type}`);
  };
  await send(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: bearer(key), json: 'dark' }, 'req-meta-put');
  expect(await appended(`config-${projectId}`, 'req-meta-put'), ['ConfigValueSet'], 'req-meta-put', `key:${keyId}`, 'PUT config');
  await send(`/projects/${projectId}/config/theme`, { method: 'DELETE', headers: bearer(key) }, 'req-meta-delete');
  expect(await appended(`config-${projectId}`, 'req-meta-delete'), ['ConfigValueDeleted'], 'req-meta-delete', `key:${keyId}`, 'DELETE config');
  const agent = (await (await send('/agents', { method: 'POST', headers: bearer(key), json: { name: 'Audited' } }, 'req-meta-agent')).json()) as { agent_id: string };
  const all = await app.events.readAll(0, { limit: 100_000 });
  expect(all.filter((e) => e.metadata.correlation_id === 'req-meta-agent' && e.type !== 'ApiKeyUsed'), ['AgentNameReserved', 'AgentCreated'], 'req-meta-agent', `key:${keyId}`, 'POST /agents');
  t.equal((await appended(`agent-${agent.agent_id}`, 'req-meta-agent')).length, 1);
  await send(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) }, 'req-meta-revoke');
  expect(await appended(`apikey-${keyId}`, 'req-meta-revoke'), ['ApiKeyRevoked'], 'req-meta-revoke', 'user:user-1', 'revocation (a session)');
});

t.test('OpenAPI 3.1, generated from the route table, JSON and YAML, no auth', async (t) => {
  const json = await app.platform('/docs/openapi.json');
  t.equal(json.status, 200);
  const doc = (await json.json()) as any;
  t.equal(doc.openapi, '3.1.0');
  const yaml = await app.platform('/docs/openapi.yaml');
  t.equal(yaml.status, 200);
  t.match(yaml.headers.get('content-type'), /yaml/);
  t.strictSame(parseYaml(await yaml.text()), doc, 'the YAML is the same document');
  const statuses = (p: string, m: string) => Object.keys(doc.paths[p][m].responses).sort();
  // The spec's operations not built yet are listed too, marked (test/api/platform-unbuilt.test.ts).
  const operations = Object.entries(doc.paths as Record<string, Record<string, any>>)
    .flatMap(([p, ops]) => Object.entries(ops).filter(([, op]) => op['x-implemented'] !== false).map(([m]) => `${m.toUpperCase()} ${p}`));
  t.strictSame(operations.sort(), [
    'DELETE /api/v1/projects/{projectId}/config/{key}', 'DELETE /api/v1/projects/{projectId}/keys/{keyId}',
    'GET /api/v1/agents', 'GET /api/v1/agents/{agentId}', 'GET /api/v1/projects', 'GET /api/v1/projects/{projectId}/config',
    'GET /api/v1/projects/{projectId}/config/{key}', 'GET /api/v1/projects/{projectId}/keys',
    'POST /api/v1/agents', 'POST /api/v1/projects', 'POST /api/v1/projects/{projectId}/keys', 'PUT /api/v1/projects/{projectId}/config/{key}',
    'GET /healthz', 'GET /readyz',
  ].sort());
  // The probes are public and outside /api/v1; a 503 from /readyz is a problem like every other error.
  t.strictSame(doc.paths['/healthz'].get.security, []);
  t.strictSame(doc.paths['/readyz'].get.security, []);
  t.strictSame(statuses('/readyz', 'get'), ['200', '403', '500', '503']);
  t.match(doc.paths['/readyz'].get.responses['200'].content['application/json'].schema.properties, { status: { const: 'ready' }, thread: {}, projections: {} });
  t.match(doc.paths['/readyz'].get.responses['503'].content['application/problem+json'].schema, { allOf: [{ $ref: '#/components/schemas/Problem' }, { properties: { projections: {} } }] });
  t.match(doc.paths['/readyz'].get.description, /not-ready/);
  const create = doc.paths['/api/v1/agents'].post;
  t.match(create.requestBody.content['application/json'].schema, { additionalProperties: false, required: ['name'] });
  t.match(create.requestBody.content['application/json'].schema.properties.big5.anyOf[0].properties.openness, { minimum: 0, maximum: 1 });
  t.strictSame(create.security, [{ ApiKey: ['agents:write'] }]);
  t.match(create.responses['400'].content['application/problem+json'].schema, { $ref: '#/components/schemas/Problem' });
  t.ok(doc.paths['/api/v1/agents/{agentId}'].get.parameters.some((p: any) => p.name === 'X-Min-Position' && p.in === 'header'));
  t.strictSame(doc.paths['/api/v1/projects/{projectId}/keys'].post.security, [{ SessionJwt: [] }]);
  // The scope a key needs is published with the operation, and its 403 says so.
  t.strictSame(doc.paths['/api/v1/agents'].post.security, [{ ApiKey: ['agents:write'] }]);
  t.equal(doc.paths['/api/v1/agents'].post['x-required-scope'], 'agents:write');
  t.strictSame(doc.paths['/api/v1/projects/{projectId}/config/{key}'].get.security, [{ ApiKey: ['config:read'] }]);
  t.match(doc.paths['/api/v1/agents'].post.responses['403'].description, /without the scope `agents:write`/);
  t.notOk('x-required-scope' in doc.paths['/api/v1/projects/{projectId}/keys'].post, 'session-only operations need no key scope');
  // Statuses the handlers can answer: creates that wait for their read model (503) and take an
  // Idempotency-Key (422 for a different request); key creation answers repeats with 409, and a 503 only
  // before it creates anything (sessions cannot be verified), never for a slow read model. Every
  // operation can fail with 500. Every command can answer 409 (a concurrent change outlasting the bus's
  // retries, or a colliding repeat), 410 (EventStoreDB: a stream an operator tombstoned), 413 (EventStoreDB's MaxAppendSize), 507 (the log's storage is full) and 503
  // (EventStoreDB did not answer in time), config writes too (an API key, no read-model wait).
  t.strictSame(statuses('/api/v1/agents', 'post'), ['200', '400', '401', '403', '404', '409', '410', '413', '422', '500', '503', '507']);
  t.strictSame(statuses('/api/v1/projects', 'post'), ['200', '400', '401', '403', '409', '410', '413', '422', '500', '503', '507']);
  t.strictSame(statuses('/api/v1/projects/{projectId}/keys/{keyId}', 'delete'), ['200', '400', '401', '403', '404', '409', '410', '413', '500', '503', '507']);
  t.strictSame(statuses('/api/v1/projects/{projectId}/keys', 'post'), ['200', '400', '401', '403', '404', '409', '410', '413', '500', '503', '507']);
  t.strictSame(statuses('/api/v1/projects/{projectId}/config/{key}', 'put'), ['200', '400', '401', '403', '404', '409', '410', '413', '500', '503', '507']);
  t.strictSame(statuses('/api/v1/projects/{projectId}/config/{key}', 'delete'), ['204', '400', '401', '403', '404', '409', '410', '413', '500', '503', '507']);
  t.notOk('507' in doc.paths['/api/v1/agents'].get.responses, 'queries write nothing: no 507');
  t.match(doc.paths['/api/v1/projects/{projectId}/keys'].post.responses['503'].description, /identity provider/);
  t.notMatch(doc.paths['/api/v1/agents'].get.responses['503'].description, /identity provider/, 'a key-only operation\'s 503 names no session cause');
  t.ok(statuses('/api/v1/projects/{projectId}/keys', 'post').includes('409'));
  t.equal(doc.paths['/api/v1/agents'].post.responses['422'].description, 'Idempotency-Key already used for a different request');

  const memory = await fetch(`${app.memoryUrl}/docs/openapi.json`);
  t.equal(memory.status, 200);
  t.equal(((await memory.json()) as any).openapi, '3.1.0');
});

t.test('both OpenAPI documents: 500 on every operation, 409 and 503 on every command, 503 where it waits for a read model or verifies sessions, problem types published', async (t) => {
  for (const [name, res] of [['platform', await app.platform('/docs/openapi.json')], ['memory', await app.memory('/docs/openapi.json')]] as const) {
    const doc = (await res.json()) as any;
    for (const [path, operations] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(operations)) {
        const where = `${name}: ${method.toUpperCase()} ${path}`;
        t.match(op.responses['500'], { description: /`internal`/, content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } }, `${where}: 500`);
        const waits = op.parameters.some((p: { name: string }) => p.name === 'X-Min-Position');
        const sessions = op.security.some((s: Record<string, unknown>) => 'SessionJwt' in s);
        if (waits || sessions) t.ok(op.responses['503'], `${where}: 503 (${waits ? 'waits for a read model' : 'verifies sessions'})`);
        // Commands take an Idempotency-Key; queries do not.
        if (op.parameters.some((p: { name: string }) => p.name === 'Idempotency-Key')) {
          t.match(op.responses['409'], { description: /`concurrency-conflict`/ }, `${where}: 409`);
          t.match(op.responses['503'], { description: /`event-store-unavailable`/ }, `${where}: 503 (the event store may not answer in time)`);
        }
      }
    }
    const problem = doc.components.schemas.Problem;
    t.strictSame(Object.keys(problem['x-problem-types']), Object.keys(PROBLEM_TYPES), `${name}: x-problem-types lists the catalogue`);
    t.strictSame(problem['x-problem-types']['request-too-large'], { type: 'https://cairn.dev/problems/request-too-large', status: [413, 431], meaning: PROBLEM_TYPES['request-too-large'].meaning });
    t.strictSame(problem.properties.type.examples, Object.keys(PROBLEM_TYPES).map((slug) => `https://cairn.dev/problems/${slug}`), `${name}: the type's examples are every type`);
    t.match(problem.properties.type.description, /\| `identity-provider-unavailable` \| 503 \|/, `${name}: the type's description has the table`);
  }
  // A memory command that never waits answers 503 only when the event store does not answer in time.
  const memory = (await (await app.memory('/docs/openapi.json')).json()) as any;
  t.match(memory.paths['/v1/personality'].put.responses['503'], { description: /`event-store-unavailable`/ }, 'PUT /v1/personality: 503');
  t.ok(memory.paths['/v1/memories'].post.responses['503'], 'POST /v1/memories: 503');
});

t.test('both OpenAPI documents pass an OpenAPI 3.1 validator', async (t) => {
  // @readme/openapi-parser checks the document against the OpenAPI 3.1 schema and the rules a schema cannot
  // state (unique operationIds, every templated path parameter declared, no duplicate parameters).
  for (const [name, res] of [['platform', await app.platform('/docs/openapi.json')], ['memory', await app.memory('/docs/openapi.json')]] as const) {
    const result = await validateOpenApi(await res.json());
    t.strictSame(result, { valid: true, warnings: [], specification: 'OpenAPI' }, `${name}: ${result.valid ? 'valid' : JSON.stringify(result.errors)}`);
  }
});

t.test('documented headers match what the server accepts', async (t) => {
  const { key } = await projectWithKey(app, 'tenant-headers');
  const doc = (await (await app.platform('/docs/openapi.json')).json()) as any;
  const header = (name: string) => new RegExp(doc.paths['/api/v1/agents'].post.parameters.find((p: { name: string }) => p.name === name).schema.pattern);
  const idempotency = header('Idempotency-Key');
  for (const value of ['', 'k', 'k'.repeat(255), 'k'.repeat(256), 'has space', 'ok-key:1']) {
    const res = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'Idempotency-Key': value }, json: { name: `Idem ${value.slice(0, 20)}` } });
    t.equal(res.status === 200, idempotency.test(value), `Idempotency-Key ${JSON.stringify(value.slice(0, 20))} (${value.length}): ${res.status}, as documented`);
  }
  const requestId = header('X-Request-Id');
  for (const value of ['r'.repeat(128), 'r'.repeat(129), 'has space', 'trace.1:a_b-c']) {
    const res = await app.platform('/healthz', { headers: { 'X-Request-Id': value } });
    t.equal(res.headers.get('x-request-id') === value, requestId.test(value), `X-Request-Id ${JSON.stringify(value.slice(0, 20))} (${value.length}): kept only when documented valid`);
  }
});

t.test('a path whose percent-encoding is not UTF-8 is 400, not matched as raw text', async (t) => {
  const { key } = await projectWithKey(app, 'tenant-percent');
  const created = await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: '100%' } });
  t.equal(created.status, 200);
  const position = { 'X-Min-Position': created.headers.get('x-event-position')! };
  t.equal((await app.platform(`/agents/${encodeURIComponent('100%')}`, { headers: { ...bearer(key), ...position } })).status, 200, 'the name, encoded');
  for (const path of ['/agents/100%', '/agents/%E0%A4%A', '/agents/%FF']) {
    const res = await app.platform(path, { headers: { ...bearer(key), ...position } });
    t.equal(res.status, 400, path);
    t.equal(res.headers.get('content-type'), 'application/problem+json');
    t.match(await res.json(), { type: /validation/, title: 'Bad Request', errors: [{ location: 'path', message: /percent-encoding/ }] }, path);
  }
  const memory = await app.memory('/v1/%E0%A4%A');
  t.equal(memory.status, 400, 'memory service too');
});

t.test('JSON bodies must be UTF-8: another declared charset is 400, not decoded as UTF-8', async (t) => {
  const { key } = await projectWithKey(app, 'tenant-charset');
  const post = (contentType: string, body: Buffer) => app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'Content-Type': contentType }, body: new Uint8Array(body) });
  for (const [contentType, body] of [
    ['application/json; charset=latin1', Buffer.from('{"name":"Caf\u00e9 latin1"}', 'latin1')],
    ['application/json; charset=iso-8859-1', Buffer.from('{"name":"Caf\u00e9 iso"}', 'latin1')],
    ['application/json; charset=utf-16le', Buffer.from('{"name":"Caf\u00e9 utf16"}', 'utf16le')],
  ] as const) {
    const res = await post(contentType, body);
    t.equal(res.status, 400, contentType);
    t.match(await res.json(), { errors: [{ location: 'header.Content-Type', message: /utf-8/i, value: contentType }] }, contentType);
  }
  for (const [i, contentType] of ['application/json; charset=utf-8', 'application/json; charset="UTF-8"', 'application/json;charset=utf8'].entries()) {
    const res = await post(contentType, Buffer.from(`{"name":"Caf\u00e9 ${i}"}`, 'utf8'));
    t.equal(res.status, 200, contentType);
    t.equal(((await res.json()) as { name: string }).name.slice(0, 4), 'Caf\u00e9', `${contentType}: the name as sent`);
  }
  const bom = await post('application/json', Buffer.from('\ufeff{"name":"With BOM"}', 'utf8'));
  t.equal(bom.status, 200, 'a UTF-8 byte order mark is ignored (RFC 8259 §8.1)');
});

t.test('JSON bodies must be UTF-8 whatever the charset says, also compressed: 400 naming body, nothing written', async (t) => {
  const { key, projectId } = await projectWithKey(app, 'tenant-utf8');
  const send = (method: string, path: string, body: Buffer, encoding = 'identity') =>
    app.platform(path, { method, headers: { ...bearer(key), 'Content-Type': 'application/json', 'Content-Encoding': encoding }, body: new Uint8Array(body) });
  const ill = (before: string, bad: number[], after: string) => Buffer.concat([Buffer.from(before), Buffer.from(bad), Buffer.from(after)]);
  for (const [what, method, path, body, encoding] of [
    ['latin1 name', 'POST', '/agents', Buffer.from('{"name":"Caf\xe9"}', 'latin1'), 'identity'],
    ['surrogate in a gzip body', 'POST', '/agents', gzipSync(ill('{"name":"Caf', [0xed, 0xa0, 0x80], '"}')), 'gzip'],
    ['cut short at the end', 'POST', '/agents', ill('{"name":"Cut"}', [0xe6, 0x97], ''), 'identity'],
    ['0xFF in a config value', 'PUT', `/projects/${projectId}/config/broken`, ill('"caf', [0xff], '"'), 'identity'],
    ['overlong in a deflate config value', 'PUT', `/projects/${projectId}/config/broken`, deflateSync(ill('{"a":"', [0xc0, 0xaf], '"}')), 'deflate'],
  ] as const) {
    const res = await send(method, path, body, encoding);
    t.equal(res.status, 400, what);
    t.equal(res.headers.get('content-type'), 'application/problem+json', `${what}: problem+json`);
    t.match(await res.json(), { type: /validation/, detail: /not valid UTF-8 \(byte \d+\)/, errors: [{ location: 'body', message: /must be UTF-8/ }] }, what);
  }
  // Valid UTF-8 of 2, 3 and 4 bytes a character is kept as sent.
  const name = 'Caf\u00e9 \u65e5\u672c \u{1F375}';
  const value = { greeting: '\u3053\u3093\u306b\u3061\u306f \u{1F44B}' };
  t.equal((await send('PUT', `/projects/${projectId}/config/greeting`, gzipSync(JSON.stringify(value)), 'gzip')).status, 200);
  const created = await send('POST', '/agents', Buffer.from(JSON.stringify({ name })));
  t.equal(created.status, 200);
  t.equal(((await created.json()) as { name: string }).name, name, 'the name as sent');
  const after = { ...bearer(key), 'X-Min-Position': created.headers.get('x-event-position')! };
  t.strictSame(await (await app.platform(`/projects/${projectId}/config`, { headers: after })).json(), { greeting: value }, 'only the valid config value was written');
  t.strictSame(((await (await app.platform('/agents', { headers: after })).json()) as Array<{ name: string }>).map((a) => a.name), [name], 'only the valid agent was created');
});

t.test('requests Node refuses before the app sees them still get problem+json', async (t) => {
  const long = await app.platform(`/agents/${'a'.repeat(20_000)}`);
  t.equal(long.status, 431);
  t.equal(long.headers.get('content-type'), 'application/problem+json');
  t.match(await long.json(), { type: /request-too-large/, title: 'Request Header Fields Too Large', status: 431, detail: /URL and headers/, instance: /\S/ });
  const memory = await fetch(`${app.memoryUrl}/v1/export?agent=${'a'.repeat(20_000)}&user=u`);
  t.equal(memory.status, 431);
  t.equal(memory.headers.get('content-type'), 'application/problem+json');
  await memory.body?.cancel();
  // The limit at its edge: a request head (request line, headers, line ends) of exactly 16 KiB reaches the
  // app. Node's parser does not count the method, the version and the line ends (about 20 bytes here), so
  // the first head it refuses is a little longer: 32 bytes past 16 KiB is over its limit.
  const statusLine = (size: number) => new Promise<string>((resolve, reject) => {
    const tail = ' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const head = 'GET /api/v1/nothing-';
    const request = head + 'a'.repeat(size - head.length - tail.length) + tail;
    const socket = connect(Number(new URL(app.platformUrl).port), '127.0.0.1', () => socket.end(request));
    let text = '';
    socket.on('data', (chunk) => { text += chunk; }).on('end', () => resolve(text.slice(0, text.indexOf('\r\n')))).on('error', reject);
  });
  t.equal(await statusLine(16 * 1024), 'HTTP/1.1 404 Not Found', 'a head of exactly 16 KiB reaches the app');
  t.equal(await statusLine(16 * 1024 + 32), 'HTTP/1.1 431 Request Header Fields Too Large', 'a head over 16 KiB is refused');
  // A request line that is not HTTP: 400 with a problem, then the connection is closed.
  const reply = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(new URL(app.platformUrl).port), '127.0.0.1', () => socket.end('GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n'));
    let text = '';
    socket.on('data', (chunk) => { text += chunk; }).on('end', () => resolve(text)).on('error', reject);
  });
  t.match(reply, /^HTTP\/1\.1 400 Bad Request\r\n/);
  t.match(reply, /\r\nContent-Type: application\/problem\+json\r\n/);
  t.match(JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4)), { type: /malformed-request/, title: 'Bad Request', status: 400 });
});

t.test('stopping the server answers the requests in flight instead of cutting their connections', async (t) => {
  // A wait long enough that the stop surely begins while it runs, even on a busy machine.
  const stopping = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '3000' });
  const { key } = await projectWithKey(stopping, 'tenant-stopping');
  const head = await stopping.events.headPosition();
  // A read waiting for a position the log has not reached: in flight when the stop begins, answered 503 at its timeout.
  const inFlight = stopping.platform('/agents', { headers: { ...bearer(key), 'X-Min-Position': String(head + 1000) } });
  // Waited for, not slept on: a stop begun before the request arrived would test a refused connection instead.
  await until('the read is waiting in the server', () => stopping.pendingWaits() > 0);
  const stopped = stopping.stop();
  const res = await inFlight;
  t.equal(res.status, 503, 'answered, not ECONNRESET');
  t.equal(res.headers.get('content-type'), 'application/problem+json');
  await stopped;
});

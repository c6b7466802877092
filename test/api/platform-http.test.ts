import t from 'tap';
import { parse as parseYaml } from 'yaml';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

const app = await startTestCairn();
t.teardown(() => app.stop());

t.test('health and unknown routes', async (t) => {
  const health = await app.platform('/healthz');
  t.same(await health.json(), { status: 'ok' });
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
  for (const deadline = Date.now() + 3000; Date.now() < deadline && !recorded; await new Promise((r) => setTimeout(r, 20))) {
    recorded = (await app.events.readStream(`apikey-${freshId}`)).find((e) => e.type === 'ApiKeyUsed');
  }
  t.ok(recorded, 'ApiKeyUsed appended');
  t.match(recorded!.metadata, { correlation_id: 'req-key-use-7', causation_id: 'req-key-use-7', actor: `key:${freshId}` });
});

t.test('OpenAPI 3.1, generated from the route table, JSON and YAML, no auth', async (t) => {
  const json = await app.platform('/docs/openapi.json');
  t.equal(json.status, 200);
  const doc = (await json.json()) as any;
  t.equal(doc.openapi, '3.1.0');
  const yaml = await app.platform('/docs/openapi.yaml');
  t.equal(yaml.status, 200);
  t.match(yaml.headers.get('content-type'), /yaml/);
  t.same(parseYaml(await yaml.text()), doc, 'the YAML is the same document');
  const operations = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`));
  t.same(operations.sort(), [
    'DELETE /api/v1/projects/{projectId}/config/{key}', 'DELETE /api/v1/projects/{projectId}/keys/{keyId}',
    'GET /api/v1/agents', 'GET /api/v1/agents/{agentId}', 'GET /api/v1/projects', 'GET /api/v1/projects/{projectId}/config',
    'GET /api/v1/projects/{projectId}/config/{key}', 'GET /api/v1/projects/{projectId}/keys',
    'POST /api/v1/agents', 'POST /api/v1/projects', 'POST /api/v1/projects/{projectId}/keys', 'PUT /api/v1/projects/{projectId}/config/{key}',
  ].sort());
  const create = doc.paths['/api/v1/agents'].post;
  t.match(create.requestBody.content['application/json'].schema, { additionalProperties: false, required: ['name'] });
  t.match(create.requestBody.content['application/json'].schema.properties.big5.properties.openness, { minimum: 0, maximum: 1 });
  t.same(create.security, [{ ApiKey: ['agents:write'] }]);
  t.match(create.responses['400'].content['application/problem+json'].schema, { $ref: '#/components/schemas/Problem' });
  t.ok(doc.paths['/api/v1/agents/{agentId}'].get.parameters.some((p: any) => p.name === 'X-Min-Position' && p.in === 'header'));
  t.same(doc.paths['/api/v1/projects/{projectId}/keys'].post.security, [{ SessionJwt: [] }]);
  // The scope a key needs is published with the operation, and its 403 says so.
  t.same(doc.paths['/api/v1/agents'].post.security, [{ ApiKey: ['agents:write'] }]);
  t.equal(doc.paths['/api/v1/agents'].post['x-required-scope'], 'agents:write');
  t.same(doc.paths['/api/v1/projects/{projectId}/config/{key}'].get.security, [{ ApiKey: ['config:read'] }]);
  t.match(doc.paths['/api/v1/agents'].post.responses['403'].description, /without the scope `agents:write`/);
  t.notOk('x-required-scope' in doc.paths['/api/v1/projects/{projectId}/keys'].post, 'session-only operations need no key scope');
  // Statuses the handlers can answer: creates that wait for their read model (503) and take an
  // Idempotency-Key (422 for a different request); key creation answers repeats with 409, and a 503 only
  // before it creates anything (sessions cannot be verified), never for a slow read model.
  const statuses = (p: string, m: string) => Object.keys(doc.paths[p][m].responses).sort();
  t.same(statuses('/api/v1/agents', 'post'), ['200', '400', '401', '403', '404', '409', '422', '503']);
  t.same(statuses('/api/v1/projects', 'post'), ['200', '400', '401', '403', '409', '422', '503']);
  t.same(statuses('/api/v1/projects/{projectId}/keys/{keyId}', 'delete'), ['200', '400', '401', '403', '404', '503']);
  t.same(statuses('/api/v1/projects/{projectId}/keys', 'post'), ['200', '400', '401', '403', '404', '409', '503']);
  t.match(doc.paths['/api/v1/projects/{projectId}/keys'].post.responses['503'].description, /identity provider/);
  t.ok(statuses('/api/v1/projects/{projectId}/keys', 'post').includes('409'));
  t.equal(doc.paths['/api/v1/agents'].post.responses['422'].description, 'Idempotency-Key already used for a different request');

  const memory = await fetch(`${app.memoryUrl}/docs/openapi.json`);
  t.equal(memory.status, 200);
  t.equal(((await memory.json()) as any).openapi, '3.1.0');
});

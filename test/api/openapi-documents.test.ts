import t, { type Test } from 'tap';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';
import { OpenApiConformance } from '../support/openapi-conformance.js';

/**
 * The published OpenAPI documents against the server that publishes them, as a client generated from them
 * meets it. Every response here goes through app.platform/app.memory, which check it against the document
 * (test/support/cairn.ts): an answer the document does not describe fails the request.
 */

const app = await startTestCairn({ MEMORY_OWNER_TOKEN: 'owner-token-for-openapi-tests' });
t.teardown(() => app.stop());
const owner = bearer('owner-token-for-openapi-tests');
const { key, projectId, session } = await projectWithKey(app, 'tenant-openapi');
const documents = {
  platform: await (await app.platform('/docs/openapi.json')).json() as Doc,
  memory: await (await app.memory('/docs/openapi.json')).json() as Doc,
};
type Operation = { operationId: string; parameters: Array<{ name: string; in: string; required: boolean; description?: string; schema: { format?: string } }>; security: Array<Record<string, string[]>>; requestBody?: unknown; responses: Record<string, unknown>; 'x-implemented'?: false };
type Doc = { paths: Record<string, Record<string, Operation>> };

t.test('an operation not implemented yet documents every status it answers: 400 for a path it cannot decode', async (t) => {
  // Before: documented 401, 403, 500, 501, 503 only, while the server refused these with 400.
  const notImplemented = await app.platform('/agents/Someone/notifications', { headers: bearer(key) });
  t.equal(notImplemented.status, 501);
  const withQuery = await app.platform('/agents/Someone/notifications?limit=5', { headers: bearer(key) });
  t.equal(withQuery.status, 501, 'a query parameter (the spec\'s `limit`) is not read: 501 all the same');
  const undecodable = await app.platform('/agents/%FF/notifications', { headers: bearer(key) });
  t.equal(undecodable.status, 400, 'a path whose percent-encoding is not UTF-8: 400, documented');
  const session400 = await app.platform('/projects/%FF/channel-activations/x/sender-registration', { method: 'POST', headers: bearer(session) });
  t.equal(session400.status, 400, 'a session operation too');
  for (const [name, doc] of Object.entries(documents)) {
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        // Only the probes and the operations not built yet take any query and validate nothing else when they have no
        // path parameter: nothing of theirs is validated.
        const validatesNothing = /^\/(healthz|readyz)$/.test(path) || (op['x-implemented'] === false && !path.includes('{'));
        if (!validatesNothing) t.ok(op.responses['400'], `${name}: ${method.toUpperCase()} ${path} documents 400`);
        else t.notOk(op.responses['400'], `${name}: ${method.toUpperCase()} ${path} documents no 400`);
      }
    }
  }
});

t.test('a choice among constants is an enum, as code generators expect', async (t) => {
  // Before: TypeBox's unions of literals were published as anyOf of consts (a wrapper type, or a plain string, in generated code).
  const found: string[] = [];
  const walk = (value: unknown, at: string): void => {
    if (value === null || typeof value !== 'object') return;
    const anyOf = (value as { anyOf?: Array<Record<string, unknown>> }).anyOf;
    if (Array.isArray(anyOf) && anyOf.length > 0 && anyOf.every((s) => 'const' in s)) found.push(at);
    for (const [k, v] of Object.entries(value)) walk(v, `${at}/${k}`);
  };
  for (const [name, doc] of Object.entries(documents)) walk(doc, name);
  t.same(found, [], 'no anyOf of constants');
  const body = (doc: Doc, path: string, method: string) => (doc.paths[path]![method]!.requestBody as { content: Record<string, { schema: any }> }).content['application/json']!.schema;
  t.same(body(documents.platform, '/api/v1/agents', 'post').properties.gender, { anyOf: [{ type: 'string', enum: ['male', 'female', 'non_binary'] }, { type: 'null' }] });
  t.match(body(documents.memory, '/v1/search', 'post').properties.mode, { anyOf: [{ type: 'string', enum: ['lexical', 'semantic', 'hybrid'] }, { type: 'null' }], default: 'lexical', description: /BM25/ });
  t.match(body(documents.platform, '/api/v1/projects/{projectId}/keys', 'post').properties.scopes.anyOf[0].items, { type: 'string', enum: ['*', 'agents:read', 'agents:write', 'config:read', 'config:write', 'projects:read'] });
});

/** A request to `path` (a template) with each path parameter filled in, and each required query parameter. */
function example(path: string, op: Operation): string {
  let url = path.replace('/api/v1', '');
  const query = new URLSearchParams();
  for (const p of op.parameters) {
    const value = p.name === 'projectId' ? projectId : p.schema.format === 'uuid' ? '00000000-0000-4000-8000-000000000000' : 'example';
    if (p.in === 'path') url = url.replace(`{${p.name}}`, value);
    else if (p.in === 'query' && p.required) query.set(p.name, value);
  }
  return query.size > 0 ? `${url}?${query}` : url;
}

t.test('HEAD on every GET operation answers as the GET does (the checker takes it as the GET operation)', async (t) => {
  // Before: the checker knew no HEAD operation and failed a HEAD /healthz answered 200.
  for (const [name, doc] of Object.entries(documents)) {
    const send = name === 'platform' ? app.platform : app.memory;
    for (const [path, operations] of Object.entries(doc.paths)) {
      if (!operations.get) continue;
      const op = operations.get;
      const credentials = name === 'memory' ? owner : op.security.some((s) => 'SessionJwt' in s) && !op.security.some((s) => 'ApiKey' in s) ? bearer(session) : bearer(key);
      const url = example(path, op);
      const get = await send(url, { headers: credentials });
      await get.body?.cancel();
      const head = await send(url, { method: 'HEAD', headers: credentials });
      t.equal(head.status, get.status, `${name}: HEAD ${url}: ${head.status}, as GET`);
      t.equal(await head.text(), '', `${name}: HEAD ${url}: no body`);
    }
  }
});

t.test('operationIds are stable: generated clients name their methods after them', async (t) => {
  // A rename breaks every client generated before it: change this list only with a note in the changelog.
  const implemented = (doc: Doc) => Object.fromEntries(Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops).filter(([, op]) => op['x-implemented'] !== false).map(([method, op]) => [`${method.toUpperCase()} ${path}`, op.operationId])));
  t.same(implemented(documents.platform), {
    'GET /healthz': 'liveness', 'GET /readyz': 'readiness',
    'GET /api/v1/projects': 'listProjects', 'POST /api/v1/projects': 'createProject',
    'POST /api/v1/projects/{projectId}/keys': 'createApiKey', 'GET /api/v1/projects/{projectId}/keys': 'listApiKeys',
    'DELETE /api/v1/projects/{projectId}/keys/{keyId}': 'revokeApiKey',
    'GET /api/v1/projects/{projectId}/config': 'getProjectConfig', 'GET /api/v1/projects/{projectId}/config/{key}': 'getProjectConfigValue',
    'PUT /api/v1/projects/{projectId}/config/{key}': 'setProjectConfigValue', 'DELETE /api/v1/projects/{projectId}/config/{key}': 'deleteProjectConfigValue',
    'POST /api/v1/agents': 'createAgent', 'GET /api/v1/agents': 'listAgents', 'GET /api/v1/agents/{agentId}': 'getAgent',
  });
  t.same(implemented(documents.memory), {
    'GET /healthz': 'liveness', 'GET /readyz': 'readiness',
    'POST /v1/memories': 'storeMemory', 'DELETE /v1/memories': 'deleteMemory', 'POST /v1/search': 'searchMemories', 'POST /v1/context': 'buildContext',
    'PUT /v1/personality': 'setPersonality', 'POST /v1/ingest': 'ingestFacts', 'POST /v1/chat': 'chat', 'GET /v1/export': 'exportScope', 'DELETE /v1/scope': 'deleteScope',
  });
});

t.test('operationIds are unique, and every documented operation is routed', async (t) => {
  for (const [name, doc] of Object.entries(documents)) {
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((op) => op.operationId));
    t.equal(new Set(ids).size, ids.length, `${name}: ${ids.length} operationIds, all different`);
    const send = name === 'platform' ? app.platform : app.memory;
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        const credentials = name === 'memory' ? owner : op.security.some((s) => 'SessionJwt' in s) && !op.security.some((s) => 'ApiKey' in s) ? bearer(session) : bearer(key);
        // No body: a routed operation answers with its own validation (400) or a result, never `no route`.
        const res = await send(example(path, op), { method: method.toUpperCase(), headers: credentials });
        const body = res.status >= 400 ? await res.json() as { type: string } : (await res.body?.cancel(), undefined);
        t.notOk(res.status === 405 || (res.status === 404 && /no route/.test(JSON.stringify(body))), `${name}: ${method.toUpperCase()} ${path} is routed (${res.status})`);
      }
    }
  }
});

/**
 * Where a request schema and the server's validation part: what JSON Schema cannot say. Each field named here
 * states the rule in its description, and a request that breaks only that rule is valid by the document.
 */
type Case = [what: string, method: string, path: string, body: unknown, unstated?: RegExp, todo?: string];

t.test('request schemas agree with what the server accepts, at each limit\'s edge', async (t) => {
  const memory = OpenApiConformance.of(documents.memory, 'memory-requests');
  const platform = OpenApiConformance.of(documents.platform, 'platform-requests');
  const scope = { agent: 'edges', user: 'u' };
  const a = (n: number) => 'a'.repeat(n);
  const memoryCases: Case[] = [
    ['scope id of 128 characters', 'POST', '/v1/memories', { scope: { agent: a(128), user: 'u' }, text: 'x' }],
    ['scope id of 129 characters', 'POST', '/v1/memories', { scope: { agent: a(129), user: 'u' }, text: 'x' }],
    ['scope id with a space', 'POST', '/v1/memories', { scope: { agent: 'a b', user: 'u' }, text: 'x' }],
    ['empty scope id', 'POST', '/v1/memories', { scope: { agent: '', user: 'u' }, text: 'x' }],
    ['unknown field', 'POST', '/v1/memories', { scope, text: 'x', tags: [] }],
    ['unknown field in the scope', 'POST', '/v1/memories', { scope: { ...scope, org: 'o' }, text: 'x' }],
    ['text of 8,192 ASCII bytes', 'POST', '/v1/memories', { scope, text: a(8192) }],
    ['text of 8,193 ASCII bytes', 'POST', '/v1/memories', { scope, text: a(8193) }],
    ['text of 8,192 bytes in 2-byte characters', 'POST', '/v1/memories', { scope, text: 'é'.repeat(4096) }],
    ['text of 8,194 bytes in 4,097 characters', 'POST', '/v1/memories', { scope, text: 'é'.repeat(4097) }, /bytes/],
    ['blank text', 'POST', '/v1/memories', { scope, text: '   ' }, /not empty after trimming/],
    ['session of 128 bytes', 'POST', '/v1/memories', { scope, text: 'x', session: a(128) }],
    ['session of 129 bytes', 'POST', '/v1/memories', { scope, text: 'x', session: a(129) }],
    ['session of 130 bytes in 65 characters', 'POST', '/v1/memories', { scope, text: 'x', session: 'é'.repeat(65) }, /bytes/],
    ['id of 128 characters', 'POST', '/v1/memories', { scope, text: 'x', id: a(128) }],
    ['id of 129 characters', 'POST', '/v1/memories', { scope, text: 'x', id: a(129) }],
    ['limit 1', 'POST', '/v1/search', { scope, query: 'x', limit: 1 }],
    ['limit 100', 'POST', '/v1/search', { scope, query: 'x', limit: 100 }],
    ['limit 0', 'POST', '/v1/search', { scope, query: 'x', limit: 0 }],
    ['limit 101', 'POST', '/v1/search', { scope, query: 'x', limit: 101 }],
    ['limit 1.5', 'POST', '/v1/search', { scope, query: 'x', limit: 1.5 }],
    ['limit "5"', 'POST', '/v1/search', { scope, query: 'x', limit: '5' }],
    ['unknown mode', 'POST', '/v1/context', { scope, query: 'x', mode: 'fuzzy' }],
    ['query of 8,193 bytes', 'POST', '/v1/context', { scope, query: a(8193) }],
    ['personality of 8,192 bytes', 'PUT', '/v1/personality', { scope, personality: a(8192) }],
    ['personality of 8,193 bytes', 'PUT', '/v1/personality', { scope, personality: a(8193) }],
    ['export', 'GET', '/v1/export?agent=edges&user=u', undefined],
    ['export without user', 'GET', '/v1/export?agent=edges', undefined],
    ['export of a scope id of 129 characters', 'GET', `/v1/export?agent=${a(129)}&user=u`, undefined],
    ['delete without id', 'DELETE', '/v1/memories?agent=edges&user=u', undefined],
  ];
  for (const [what, method, path, body, unstated] of memoryCases) {
    const res = await app.memory(path, { method, headers: owner, ...(body !== undefined ? { json: body } : {}) });
    await agree(t, memory, documents.memory, 'memory', what, method, app.memoryUrl + path, body, res, unstated);
  }
  const agent = (extra: Record<string, unknown>) => ({ name: `Edge ${Math.random().toString(36).slice(2, 10)}`, ...extra });
  const big5 = (openness: unknown) => ({ big5: { openness, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 } });
  const platformCases: Case[] = [
    ['big5 score 0', 'POST', '/agents', agent(big5(0))],
    ['big5 score 1', 'POST', '/agents', agent(big5(1))],
    ['big5 score 1.0001', 'POST', '/agents', agent(big5(1.0001))],
    ['big5 score -0.1', 'POST', '/agents', agent(big5(-0.1))],
    ['big5 score "0.5"', 'POST', '/agents', agent(big5('0.5'))],
    ['big5 with four scores', 'POST', '/agents', agent({ big5: { openness: 0.5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5 } })],
    ['100 speech patterns of 500 characters', 'POST', '/agents', agent({ speech_patterns: Array.from({ length: 100 }, () => a(500)) })],
    ['101 speech patterns', 'POST', '/agents', agent({ speech_patterns: Array.from({ length: 101 }, () => 'x') })],
    ['a speech pattern of 501 characters', 'POST', '/agents', agent({ speech_patterns: [a(501)] })],
    ['gender non_binary', 'POST', '/agents', agent({ gender: 'non_binary' })],
    ['gender other', 'POST', '/agents', agent({ gender: 'other' })],
    ['language en-US', 'POST', '/agents', agent({ language: 'en-US' })],
    ['language e', 'POST', '/agents', agent({ language: 'e' })],
    ['avatar https', 'POST', '/agents', agent({ avatar_url: 'https://example.com/a.png' })],
    ['avatar ftp', 'POST', '/agents', agent({ avatar_url: 'ftp://example.com/a.png' })],
    ['name of 128 characters', 'POST', '/agents', { name: `${a(120)}${Math.random().toString(36).slice(2, 10)}` }],
    ['name of 129 characters', 'POST', '/agents', { name: a(129) }, /at most 128 characters after trimming/],
    ['empty name', 'POST', '/agents', { name: '' }],
    ['blank name', 'POST', '/agents', { name: '   ' }, /empty|blank|whitespace/],
    ['list limit 1', 'GET', '/agents?limit=1', undefined],
    ['list limit 500', 'GET', '/agents?limit=500', undefined],
    ['list limit 0', 'GET', '/agents?limit=0', undefined],
    ['list limit 501', 'GET', '/agents?limit=501', undefined],
    ['list project_id not a UUID', 'GET', '/agents?project_id=nope', undefined],
    ['config key of 256 characters', 'PUT', `/projects/${projectId}/config/${a(256)}`, 1],
    ['config key of 257 characters', 'PUT', `/projects/${projectId}/config/${a(257)}`, 1],
    ['config key with a space', 'PUT', `/projects/${projectId}/config/a%20b`, 1],
    ['config of a project id that is not a UUID', 'GET', '/projects/nope/config', undefined],
  ];
  for (const [what, method, path, body, unstated, todo] of platformCases) {
    const res = await app.platform(path, { method, headers: bearer(key), ...(body !== undefined ? { json: body } : {}) });
    await agree(t, platform, documents.platform, 'platform', what, method, `${app.platformUrl}/api/v1${path}`, body, res, unstated, todo);
  }
  const keyCases: Case[] = [
    ['key with every scope', 'POST', `/projects/${projectId}/keys`, { scopes: ['agents:read', 'agents:write', 'config:read', 'config:write', 'projects:read', '*'] }],
    ['key with an unknown scope', 'POST', `/projects/${projectId}/keys`, { scopes: ['agents:delete'] }],
    ['key with a scope twice', 'POST', `/projects/${projectId}/keys`, { scopes: ['*', '*'] }],
    ['key with no scopes', 'POST', `/projects/${projectId}/keys`, { scopes: [] }],
    ['key expiring in 2999', 'POST', `/projects/${projectId}/keys`, { expires_at: '2999-01-01T00:00:00Z' }],
    ['key expiring at a time that is not RFC 3339', 'POST', `/projects/${projectId}/keys`, { expires_at: '2999-01-01 00:00' }],
  ];
  for (const [what, method, path, body, unstated] of keyCases) {
    const res = await app.platform(path, { method, headers: bearer(session), json: body });
    await agree(t, platform, documents.platform, 'platform', what, method, `${app.platformUrl}/api/v1${path}`, body, res, unstated);
  }
});

/**
 * The server's verdict (success, or 400) and the document's on one request agree; or, for a rule the
 * document can state only in prose (`unstated`), the document accepts, the server refuses with 400, and the
 * description of the field the server names says why.
 */
async function agree(t: Test, checker: OpenApiConformance, doc: Doc, name: string, what: string, method: string, url: string, body: unknown, res: Response, unstated?: RegExp, todo?: string) {
  const wrong = checker.requestViolations(method, url, body);
  const answer = res.status >= 400 ? await res.json() as { errors?: Array<{ location: string }> } : (await res.body?.cancel(), undefined);
  if (res.status !== 400 && res.status >= 300) return t.fail(`${name}: ${what}: ${res.status}`);
  if (!unstated) return t.equal(wrong.length === 0, res.status < 300, `${name}: ${what}: server ${res.status}, document ${wrong.length === 0 ? 'valid' : wrong.join('; ')}`);
  t.equal(res.status, 400, `${name}: ${what}: refused by the server`);
  t.same(wrong, [], `${name}: ${what}: valid by the schema`);
  const location = answer?.errors?.[0]?.location ?? '';
  t.match(describedAt(doc, method, url, location), unstated, `${name}: ${what}: the description of ${location} says so`, todo ? { todo } : {});
}

/** The description of the request field at `location` (`body.scope.agent`, `query.limit`), as the document gives it. */
function describedAt(doc: Doc, method: string, url: string, location: string): string {
  const path = Object.keys(doc.paths).find((p) => new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(new URL(url).pathname))!;
  const op = doc.paths[path]![method.toLowerCase()]!;
  const [where, ...names] = location.split('.');
  if (where !== 'body') return op.parameters.find((p) => p.name === names[0])?.description ?? '';
  let schema = (op.requestBody as { content: Record<string, { schema: Record<string, any> }> }).content['application/json']!.schema;
  for (const n of names) schema = schema.properties?.[n] ?? schema.items ?? schema.anyOf?.find((s: { type?: string }) => s.type !== 'null')?.properties?.[n] ?? {};
  return [schema.description, ...(schema.anyOf ?? []).map((s: { description?: string }) => s.description)].filter(Boolean).join(' ');
}

t.test('the memory document requires the owner token only when one is configured', async (t) => {
  const ops = (doc: Doc) => Object.entries(doc.paths).filter(([path]) => !/^\/(healthz|readyz)$/.test(path)).flatMap(([, methods]) => Object.values(methods));
  for (const op of ops(documents.memory)) t.strictSame(op.security, [{ OwnerToken: [] }], `${op.operationId}: the token (MEMORY_OWNER_TOKEN is set)`);
  const open = await startTestCairn({});
  t.teardown(() => open.stop());
  const doc = await (await open.memory('/docs/openapi.json')).json() as Doc;
  t.ok(ops(doc).length >= 9);
  for (const op of ops(doc)) t.strictSame(op.security, [{ OwnerToken: [] }, {}], `${op.operationId}: a token, or none (MEMORY_OWNER_TOKEN is not set)`);
  t.strictSame(doc.paths['/healthz']!.get!.security, [], 'the probes need none either way');
  t.equal((await open.memory('/v1/search', { method: 'POST', json: { scope: { agent: 'a', user: 'u' }, query: 'x' } })).status, 200, 'and indeed none is needed');
});

t.test('/readyz documents its own 503 (not-ready), not the general text of the statuses it never answers', async (t) => {
  for (const [name, doc] of Object.entries(documents)) {
    const unready = doc.paths['/readyz']!.get!.responses['503'] as { description: string };
    t.match(unready.description, /`not-ready`/, `${name}: names not-ready`);
    t.notMatch(unready.description, /not-caught-up|event-store-unavailable|not-configured/, `${name}: and none of the others`);
  }
});

/**
 * Where in a document a JSON Schema sits (a parameter's, a body's, a response's or a header's schema, a component,
 * and the schemas inside them), each as the reference tokens of its JSON Pointer.
 */
function schemaLocations(doc: unknown): string[][] {
  const found: string[][] = [];
  const walk = (value: unknown, at: string[], inSchema: boolean): void => {
    if (value === null || typeof value !== 'object') return;
    // Under `properties` are names, not schemas: `{properties: {example: …}}` is a field called example.
    const names = ['properties', 'patternProperties', '$defs'].includes(at.at(-1) ?? '');
    if (inSchema && !names) found.push(at);
    for (const [k, v] of Object.entries(value)) {
      const entering = k === 'schema' || at.join('/') === 'components/schemas';
      // Values of these keywords are data (or names), not schemas.
      const data = !names && ['examples', 'enum', 'const', 'required', 'default', 'x-problem-types'].includes(k);
      walk(v, [...at, k], (inSchema || entering) && !data);
    }
  };
  walk(doc, [], false);
  return found;
}

const schemaAt = (doc: unknown, tokens: string[]): any => tokens.reduce<any>((v, k) => v[k], doc);

t.test('schemas give examples as JSON Schema 2020-12 does (an `examples` array), each valid against its schema', async (t) => {
  // Before: the Problem schema had OpenAPI 3.0's `example`, deprecated in 3.1, whose Schema Object is JSON Schema 2020-12.
  for (const [name, doc] of Object.entries(documents)) {
    const checker = OpenApiConformance.of(doc, `examples-${name}`);
    let checked = 0;
    for (const tokens of schemaLocations(doc)) {
      const schema = schemaAt(doc, tokens);
      const pointer = tokens.join('/');
      t.notOk('example' in schema, `${name}: ${pointer} has no \`example\``);
      if (!Array.isArray(schema.examples)) {
        t.notOk('examples' in schema, `${name}: ${pointer}: examples is an array`);
        continue;
      }
      for (const example of schema.examples) {
        checked++;
        t.same(checker.schemaViolations(tokens, example), [], `${name}: ${pointer}: example ${JSON.stringify(example)} is valid`);
      }
    }
    t.ok(checked > 0, `${name}: ${checked} examples checked`);
  }
});

t.test('Retry-After is documented on the 503s that send it, not on /readyz, whose 503 never does', async (t) => {
  // Before: every 503 listed Retry-After, the probe's too, whose own description said it has none.
  for (const [name, doc] of Object.entries(documents)) {
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        const unavailable = op.responses['503'] as { headers?: Record<string, unknown> } | undefined;
        if (!unavailable) continue;
        t.equal('Retry-After' in (unavailable.headers ?? {}), path !== '/readyz', `${name}: ${method.toUpperCase()} ${path}`);
      }
    }
  }
  const paused = await startTestCairn({});
  t.teardown(() => paused.stop());
  await paused.projections.pause('project-config');
  const probe = await paused.platform('/readyz');
  t.equal(probe.status, 503, 'a paused projection: not ready');
  t.equal(probe.headers.get('retry-after'), null, 'and indeed without Retry-After');
  await probe.body?.cancel();
});

t.test('a whole-number constant is an integer, not a float, in generated code', async (t) => {
  // Before: DELETE /v1/memories answered `deleted` typed {type: number, const: 1} (TypeBox's Literal(1)): float32 in Go, BigDecimal in Java.
  const deleted = (documents.memory.paths['/v1/memories']!.delete!.responses['200'] as any).content['application/json'].schema.properties.deleted;
  t.same(deleted, { type: 'integer', const: 1 });
  const floats: string[] = [];
  for (const [name, doc] of Object.entries(documents)) {
    for (const tokens of schemaLocations(doc)) {
      const schema = schemaAt(doc, tokens);
      const values = 'const' in schema ? [schema.const] : schema.enum ?? [];
      if (schema.type === 'number' && values.length > 0 && values.every(Number.isInteger)) floats.push(`${name}: ${tokens.join('/')}`);
    }
  }
  t.same(floats, [], 'no whole-number constant typed number');
  const scope = { agent: 'integers', user: 'u' };
  const stored = await (await app.memory('/v1/memories', { method: 'POST', headers: owner, json: { scope, text: 'counted' } })).json() as { id: string };
  const res = await app.memory(`/v1/memories?agent=integers&user=u&id=${stored.id}`, { method: 'DELETE', headers: owner });
  t.same(await res.json(), { id: stored.id, deleted: 1 }, 'the answer fits it (checked against the document too)');
});

t.test('every request body documents the size limit the server applies, exactly at its edge', async (t) => {
  // Before: the 1 MiB limit (and how a body is read) was nowhere in the documents: a gateway or client had to find it by a 400.
  for (const [name, doc] of Object.entries(documents)) {
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        if (!op.requestBody) continue;
        const body = op.requestBody as { description?: string; 'x-max-body-bytes'?: number };
        t.equal(body['x-max-body-bytes'], 1024 * 1024, `${name}: ${method.toUpperCase()} ${path}: x-max-body-bytes`);
        t.match(body.description, /at most 1,048,576 bytes .*Content-Encoding.*nested at most 64 levels/, `${name}: ${method.toUpperCase()} ${path}: described`);
      }
    }
  }
  const op = documents.platform.paths['/api/v1/projects/{projectId}/config/{key}']!.put!;
  const limit = (op.requestBody as { 'x-max-body-bytes': number })['x-max-body-bytes'];
  // A JSON string value: two quotes and the letters.
  const atLimit = await app.platform(`/projects/${projectId}/config/large`, { method: 'PUT', headers: bearer(key), json: 'a'.repeat(limit - 2) });
  t.equal(atLimit.status, 200, `a body of exactly ${limit} bytes is taken`);
  await atLimit.body?.cancel();
  const over = await app.platform(`/projects/${projectId}/config/large`, { method: 'PUT', headers: bearer(key), json: 'a'.repeat(limit - 1) });
  t.equal(over.status, 400, 'one byte more is not');
  t.match(await over.json(), { type: /validation$/, detail: /exceeds 1048576 bytes/ });
});

t.test('the Idempotency-Key parameter says what a repeated key creation answers: 409, not the first result', async (t) => {
  // Before: "a create returns the first result", on createApiKey too, which answers a repeat with 409 (its secret is shown once).
  const path = '/api/v1/projects/{projectId}/keys';
  const parameter = documents.platform.paths[path]!.post!.parameters.find((p) => p.name === 'Idempotency-Key')!;
  const headers = { ...bearer(session), 'Idempotency-Key': `openapi-key-${projectId}` };
  const first = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers, json: {} });
  t.equal(first.status, 200);
  await first.body?.cancel();
  const repeat = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers, json: {} });
  t.equal(repeat.status, 409, 'a repeat is 409');
  const { type } = await repeat.json() as { type: string };
  const slug = type.slice(type.lastIndexOf('/') + 1);
  t.equal(slug, 'idempotency-replay');
  t.match(parameter.description, new RegExp(`409 \`${slug}\``), 'as the parameter says');
});

t.test('every published pattern is portable: no lookaround or backreference, which RE2-based validators (Go) cannot compile', async (t) => {
  // Before: the config key's pattern began with a negative lookahead (not "." or "..").
  const patterns: Array<[string, string]> = [];
  const walk = (value: unknown, at: string): void => {
    if (value === null || typeof value !== 'object') return;
    for (const [k, v] of Object.entries(value)) {
      if (k === 'pattern' && typeof v === 'string') patterns.push([at, v]);
      else walk(v, `${at}/${k}`);
    }
  };
  for (const [name, doc] of Object.entries(documents)) walk(doc, name);
  t.ok(patterns.length >= 10, `patterns found (${patterns.length})`);
  t.same(patterns.filter(([, p]) => /\(\?<?[=!]|\\[1-9]|\\k</.test(p)), [], 'none uses lookaround or a backreference');
  const key = documents.platform.paths['/api/v1/projects/{projectId}/config/{key}']!.get!.parameters.find((p) => p.name === 'key')!.schema as { pattern: string };
  const matches = (k: string) => new RegExp(key.pattern).test(k);
  t.same(['a', '.a', '..a', '...', 'a.', `.${'a'.repeat(255)}`, 'x'.repeat(256)].filter((k) => !matches(k)), [], 'keys it takes');
  t.same(['.', '..', '', 'x'.repeat(257), `..${'.'.repeat(255)}`, 'a b', 'a/b'].filter(matches), [], 'keys it refuses');
});

t.test('an operation\'s 409 names the conflicts it answers, its own among them', async (t) => {
  // Before: the generic text (conflict, concurrency-conflict, duplicate-request) left out each operation's own 409.
  t.match(documents.platform.paths['/api/v1/projects/{projectId}/keys']!.post!.responses['409'], { description: /`idempotency-replay`.*`concurrency-conflict`/ });
  t.match(documents.memory.paths['/v1/memories']!.post!.responses['409'], { description: /`concurrent-delete`.*`concurrency-conflict`/ });
  t.notMatch((documents.platform.paths['/api/v1/agents']!.get!.responses['403'] as { description: string }).description, /foreign-host/, 'the platform checks no Host');
});

t.test('the /readyz 503 documents the members it carries besides the problem\'s, for generated clients', async (t) => {
  // Before: a plain Problem, so generated clients dropped head, stores, thread, projections and degraded.
  for (const [name, doc] of Object.entries(documents)) {
    const schema = (doc.paths['/readyz']!.get!.responses['503'] as { content: Record<string, { schema: any }> }).content['application/problem+json']!.schema;
    t.match(schema, { allOf: [{ $ref: '#/components/schemas/Problem' }, { type: 'object' }] }, name);
    t.same(Object.keys(schema.allOf[1].properties).sort(), ['degraded', 'head', 'max_lag', 'projections', 'stores', 'thread'], `${name}: the 200 body's members`);
    t.match(schema.allOf[1].properties.head, { anyOf: [{ type: 'integer' }, { type: 'null' }] }, `${name}: head null when the event store did not answer`);
  }
});

t.test('the problem members the server sends besides RFC 9457\'s are declared, and the memory document speaks of its own objects', async (t) => {
  // Before: a taken agent name's 409 carried `agent_id`, and concurrency-conflict / stream-deleted `stream`, undeclared.
  const taken = (documents.platform.paths['/api/v1/agents']!.post!.responses['409'] as { content: Record<string, { schema: any }> }).content['application/problem+json']!.schema;
  t.match(taken, { allOf: [{ $ref: '#/components/schemas/Problem' }, { properties: { agent_id: { type: 'string', format: 'uuid' } } }] });
  for (const [name, doc] of Object.entries(documents)) {
    t.match((doc as unknown as { components: { schemas: { Problem: any } } }).components.schemas.Problem.properties.stream, { type: 'string' }, `${name}: stream`);
  }
  const first = await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: 'Holder' } });
  const second = await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: 'Holder' } });
  t.equal(second.status, 409);
  t.equal((await second.json()).agent_id, (await first.json()).agent_id, 'as sent');
  // Before: the platform's words (objects of another project; `conflict`, e.g. a duplicate name) on the memory service.
  for (const [path, operations] of Object.entries(documents.memory.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      for (const [status, response] of Object.entries(op.responses)) {
        t.notMatch((response as { description: string }).description, /another project|duplicate name|`conflict`/, `memory: ${method.toUpperCase()} ${path} ${status}`);
      }
    }
  }
});

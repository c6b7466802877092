import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

// Findings of the HTTP-layer audit (RFC 9110/9112, RFC 9457, the OpenAPI documents), each reproduced against the started app.

// The memory service's reads wait for the stores before them: a bound a busy CI machine cannot miss.
const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '30000' });
t.teardown(() => app.stop());
const { key } = await projectWithKey(app, 'tenant-http-audit');
const bases = { platform: app.platformUrl, memory: app.memoryUrl };

/** Sends `request` as it is on a new connection and returns the final answer (after any 1xx) received until the server closes it. */
function raw(base: string, request: string): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(base).port), '127.0.0.1', () => socket.write(request));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => { text += chunk; }).on('error', reject).on('end', () => {
      while (/^HTTP\/1\.1 1\d\d /.test(text)) text = text.slice(text.indexOf('\r\n\r\n') + 4);
      const [head = '', body = ''] = [text.slice(0, text.indexOf('\r\n\r\n')), text.slice(text.indexOf('\r\n\r\n') + 4)];
      const [statusLine, ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body });
    });
  });
}

/** An answer every app gives: problem+json of this type and status, with a request id, never cached. */
function isProblem(t: Test, res: { status: number; headers: Record<string, string>; body: string }, status: number, slug: string, what: string): void {
  t.equal(res.status, status, `${what}: ${status}`);
  t.equal(res.headers['content-type'], 'application/problem+json', `${what}: problem+json`);
  t.equal(res.headers['cache-control'], 'no-store', `${what}: Cache-Control: no-store`);
  t.equal(res.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
  t.match(res.headers['x-request-id'], /\S/, `${what}: a request id`);
  t.match(res.body === '' ? {} : JSON.parse(res.body), { type: `https://cairn.dev/problems/${slug}`, status, title: /^(?!Error$)/, instance: res.headers['x-request-id'] }, `${what}: the problem`);
}

t.test('an HTTP/1.1 request without Host is 400 with a problem body (Node answered it with an empty one)', async (t) => {
  for (const [name, base] of Object.entries(bases)) {
    isProblem(t, await raw(base, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'malformed-request', `${name}, HTTP/1.1 without Host`);
    const withHost = await raw(base, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    t.equal(withHost.status, 200, `${name}: with Host, served`);
    const http10 = await raw(base, 'GET /healthz HTTP/1.0\r\n\r\n');
    t.equal(http10.status, 200, `${name}: HTTP/1.0 needs no Host`);
  }
});

t.test('an Expect other than 100-continue is 417 with a problem body; 100-continue still works', async (t) => {
  for (const [name, base] of Object.entries(bases)) {
    isProblem(t, await raw(base, 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nConnection: close\r\n\r\n'), 417, 'expectation-failed', `${name}, Expect: something-else`);
  }
  const body = JSON.stringify({ scope: { agent: 'expect', user: 'u' }, text: 'sent after 100 Continue' });
  const stored = await raw(app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  t.equal(stored.status, 200, 'Expect: 100-continue: the body is read and stored');
});

t.test('answers of the HTTP parser carry the headers every answer carries', async (t) => {
  for (const [name, base] of Object.entries(bases)) {
    isProblem(t, await raw(base, 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n'), 400, 'malformed-request', `${name}, a malformed header line`);
    isProblem(t, await raw(base, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 'request-too-large', `${name}, headers over 16 KiB`);
  }
});

t.test('a body refused half-read does not hold up the connection: the next request on it is answered', async (t) => {
  // Bodies of several MiB: what is left unread must be more than the request's and the socket's buffers hold.
  /** The status lines received within 5 s for these bytes sent on one connection. */
  const statuses = (base: string, ...parts: Array<string | Buffer>) => new Promise<string[]>((resolve, reject) => {
    const socket = connect(Number(new URL(base).port), '127.0.0.1', () => { for (const part of parts) socket.write(part); });
    let text = '';
    const done = () => { clearTimeout(timer); socket.destroy(); resolve([...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1]!)); };
    const timer = setTimeout(done, 5000);
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => { text += chunk; }).on('end', done).on('error', reject);
  });
  const next = 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const json = JSON.stringify({ scope: { agent: 'big', user: 'u' }, text: 'x'.repeat(4 * 1024 * 1024) });
  const chunked = (data: string) => `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n0\r\n\r\n`;
  t.same(await statuses(app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`, chunked(json), next),
    ['400', '200'], 'chunked, over 1 MiB');
  // Compressed: incompressible text, so that the request goes on well past the point where it is refused.
  const gzipped = gzipSync(JSON.stringify({ scope: { agent: 'big', user: 'u' }, text: randomBytes(3 * 1024 * 1024).toString('base64') }));
  t.same(await statuses(app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${gzipped.length}\r\n\r\n`, gzipped, next),
    ['400', '200'], 'gzip, over 1 MiB once inflated');
  const corrupt = Buffer.concat([gzipped.subarray(0, 1000), Buffer.alloc(4 * 1024 * 1024, 7)]);
  t.same(await statuses(app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${corrupt.length}\r\n\r\n`, corrupt, next),
    ['400', '200'], 'gzip data that is corrupt');
});

t.test('an Idempotency-Key is checked only where it is taken: commands (as documented), not queries or probes', async (t) => {
  const scope = { agent: 'idem', user: 'u' };
  for (const value of ['', 'has space']) {
    const headers = { 'Idempotency-Key': value };
    for (const [what, res] of [
      ['platform /healthz', await app.platform('/healthz', { headers })],
      ['platform /readyz', await app.platform('/readyz', { headers })],
      ['memory /healthz', await app.memory('/healthz', { headers })],
      ['GET /agents', await app.platform('/agents', { headers: { ...bearer(key), ...headers } })],
      ['POST /v1/search', await app.memory('/v1/search', { method: 'POST', headers, json: { scope, query: 'tea' } })],
    ] as const) {
      t.equal(res.status, 200, `${what} with Idempotency-Key ${JSON.stringify(value)}: not refused`);
    }
    for (const [what, res] of [
      ['POST /agents', await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), ...headers }, json: { name: 'Idem audit' } })],
      ['POST /v1/memories', await app.memory('/v1/memories', { method: 'POST', headers, json: { scope, text: 'tea' } })],
    ] as const) {
      t.equal(res.status, 400, `${what} with Idempotency-Key ${JSON.stringify(value)}: refused`);
      t.match(await res.json(), { errors: [{ location: 'header.Idempotency-Key' }] });
    }
  }
});

t.test('a malformed Idempotency-Key is judged after the credentials: without them the answer is 401, as for any request', async (t) => {
  // Before: 400 naming header.Idempotency-Key to a caller without credentials (the order is auth, then validation).
  const guarded = await startTestCairn({ MEMORY_OWNER_TOKEN: 'owner-token-for-idempotency-order' });
  t.teardown(() => guarded.stop());
  for (const value of ['', 'has space']) {
    const headers = { 'Idempotency-Key': value };
    for (const [what, res] of [
      ['POST /agents', await guarded.platform('/agents', { method: 'POST', headers, json: { name: 'Idem order' } })],
      ['POST /v1/memories', await guarded.memory('/v1/memories', { method: 'POST', headers, json: { scope: { agent: 'a', user: 'u' }, text: 'tea' } })],
    ] as const) {
      t.equal(res.status, 401, `${what} without credentials, Idempotency-Key ${JSON.stringify(value)}`);
      t.equal(res.headers.get('www-authenticate'), 'Bearer');
    }
  }
  const withToken = await guarded.memory('/v1/memories', { method: 'POST', headers: { ...bearer('owner-token-for-idempotency-order'), 'Idempotency-Key': '' }, json: { scope: { agent: 'a', user: 'u' }, text: 'tea' } });
  t.equal(withToken.status, 400, 'with them, the key is judged');
});

t.test('the health probes ignore query parameters, repeated ones and min_position included', async (t) => {
  for (const query of ['?ts=1&ts=2', '?min_position=5', '?min_position=x&min_position=y']) {
    for (const [what, res] of [
      ['platform /healthz', await app.platform(`/healthz${query}`)],
      ['platform /readyz', await app.platform(`/readyz${query}`)],
      ['memory /healthz', await app.memory(`/healthz${query}`)],
      ['memory /readyz', await app.memory(`/readyz${query}`)],
    ] as const) {
      t.equal(res.status, 200, `${what}${query}`);
    }
  }
  // Elsewhere a repeated parameter is still refused.
  t.equal((await app.memory('/v1/export?agent=a&user=u&agent=b')).status, 400, 'GET /v1/export with agent twice');
});

t.test('Content-Encoding x-gzip is gzip (RFC 9110 §8.4.1.3)', async (t) => {
  const body = gzipSync(JSON.stringify({ scope: { agent: 'xgzip', user: 'u' }, text: 'compressed as x-gzip' }));
  const res = await app.memory('/v1/memories', { method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'x-gzip' }, body: new Uint8Array(body) });
  t.equal(res.status, 200);
  t.equal(((await res.json()) as { text: string }).text, 'compressed as x-gzip');
});

t.test('the OpenAPI documents describe the headers the answers carry', async (t) => {
  for (const [name, base] of Object.entries(bases)) {
    const doc = (await (await fetch(`${base}/docs/openapi.json`)).json()) as any;
    // How many operations each check below looked at: a document in which none has the response checks nothing.
    const checked = { 401: 0, 503: 0, 'Idempotency-Key': 0 };
    for (const [path, operations] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(operations)) {
        const where = `${name}: ${method.toUpperCase()} ${path}`;
        if (op.responses['401']) {
          checked[401]++;
          t.match(op.responses['401'].headers, { 'WWW-Authenticate': { required: true } }, `${where}: 401 with WWW-Authenticate`);
        }
        if (op.responses['503']) {
          checked[503]++;
          // The probes' 503 (not-ready) never carries one; every other 503 may.
          if (path === '/readyz') t.equal(op.responses['503'].headers?.['Retry-After'], undefined, `${where}: 503 without Retry-After`);
          else t.match(op.responses['503'].headers, { 'Retry-After': { schema: { pattern: '^[0-9]+$' } } }, `${where}: 503 may carry Retry-After`);
        }
        if (op.parameters.some((p: { name: string }) => p.name === 'Idempotency-Key')) {
          checked['Idempotency-Key']++;
          const successes = Object.entries(op.responses as Record<string, any>).filter(([status]) => status.startsWith('2'));
          t.ok(successes.length > 0, `${where}: has a success response`);
          for (const [status, response] of successes) {
            t.match(response.headers, { 'X-Event-Position': { required: true } }, `${where}: ${status} always carries X-Event-Position`);
          }
        }
      }
    }
    for (const [what, n] of Object.entries(checked)) t.ok(n > 0, `${name}: ${n} operations with ${what} checked`);
  }
  // And the answers do (each response through app.platform/app.memory is also checked against the document).
  const unauthorized = await app.platform('/agents');
  t.equal(unauthorized.headers.get('www-authenticate'), 'Bearer');
  const quick = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '300' });
  t.teardown(() => quick.stop());
  const quickKey = (await projectWithKey(quick, 'tenant-http-audit-quick')).key;
  const notCaughtUp = await quick.platform('/agents', { headers: { ...bearer(quickKey), 'X-Min-Position': String(await quick.events.headPosition() + 1000) } });
  t.equal(notCaughtUp.status, 503);
  t.equal(notCaughtUp.headers.get('retry-after'), '1');
});

t.test('only the documents\' paths are routes: in another case (RFC 3986 §6.2.2.1) or with a trailing slash, a path is 404', async (t) => {
  const search = { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: { agent: 'case', user: 'u' }, query: 'x' }) };
  for (const [what, res] of [
    ['POST /V1/search', await app.memory('/V1/search', search)],
    ['POST /v1/Search', await app.memory('/v1/Search', search)],
    ['GET /API/v1/projects', await fetch(`${app.platformUrl}/API/v1/projects`, { headers: bearer(key) })],
    ['GET /api/v1/Projects', await app.platform('/Projects', { headers: bearer(key) })],
    ['GET /Docs/openapi.json', await app.memory('/Docs/openapi.json')],
    ['POST /v1/search/', await app.memory('/v1/search/', search)],
    ['GET /api/v1/projects/', await app.platform('/projects/', { headers: bearer(key) })],
  ] as const) {
    t.equal(res.status, 404, what);
    t.equal(res.headers.get('content-type'), 'application/problem+json', `${what}: problem+json`);
  }
  t.equal((await app.memory('/v1/search', search)).status, 200, 'POST /v1/search');
  t.equal((await app.platform('/projects', { headers: bearer(key) })).status, 200, 'GET /api/v1/projects');
  t.equal((await app.memory('/docs/openapi.json')).status, 200, 'GET /docs/openapi.json');
});

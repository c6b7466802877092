import { createServer } from 'node:net';
import t, { type Test } from 'tap';
import { MAX_CHAT_REPLY_BYTES } from '../../infra/providers/chat.js';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';
import { startOpenAiServer } from '../support/openai-server.js';
import { startProviderApp, type ProviderApp as Setup } from '../support/provider-app.js';

/**
 * The provider transport as an operator of a local model server meets it, through POST /v1/chat and
 * POST /v1/ingest, with the provider played by a real local HTTP server: replies that never end, waits
 * asked for with Retry-After, a refused connection, credentials in the base URL. Every failure is a
 * generic 500; the log says why.
 */

const setup = (t: Test, env: Record<string, string> = {}) => startProviderApp(t, { LLM_CHAT_MODEL: 'http-model', LLM_TIMEOUT_MS: '3000', ...env });

const scope = { agent: 'http', user: 'u1' };

/** A generic 500; answers the reason the log gives for it. */
function failureReason(t: Test, s: Setup, res: { status: number; body: any }): string {
  t.equal(res.status, 500);
  t.equal(res.body.detail, 'the model provider could not complete the request');
  return String(s.lines.find((l) => l.request_id === res.body.instance && 'reason' in l)?.reason);
}

t.test('a reply that never ends is cut off at its size limit, not read until the timeout', async (t) => {
  const s = await setup(t);
  let sent = 0;
  const closed = new Promise<void>((resolve) => s.server.chat.push({ endless: { closed: (bytes) => { sent = bytes; resolve(); } } }));
  const started = Date.now();
  const res = await s.post('/v1/chat', { scope, query: 'tell me everything' });
  t.match(failureReason(t, s, res), `chat provider answered with a reply longer than ${MAX_CHAT_REPLY_BYTES} bytes`);
  t.ok(Date.now() - started < 3000, 'before LLM_TIMEOUT_MS');
  await closed;
  // What the server could write: the limit, plus what the sockets' buffers took in before the connection closed.
  t.ok(sent < 3 * MAX_CHAT_REPLY_BYTES, `the connection is closed once past the limit (${sent} bytes sent)`);

  s.server.chat.push('Still here.');
  t.equal((await s.post('/v1/chat', { scope, query: 'hello' })).body.answer, 'Still here.', 'the next request is served');
});

t.test('a failure\'s body that never ends: its status is what counts, and the beginning is logged', async (t) => {
  const s = await setup(t);
  s.server.chat.push({ status: 502, endless: { closed: () => undefined } });
  const started = Date.now();
  const res = await s.post('/v1/ingest', { scope, text: 'I like rain.' });
  t.equal(failureReason(t, s, res), 'chat provider answered 502', 'not a timeout');
  t.ok(Date.now() - started < 3000, 'before LLM_TIMEOUT_MS');
  const logged = s.lines.find((l) => l.request_id === res.body.instance && 'upstream_body' in l)?.upstream_body;
  t.equal(logged.length, 2000, 'the first 2,000 characters are logged');
});

t.test('headers sent, then a body that never ends: the timeout covers the body too', async (t) => {
  const s = await setup(t, { LLM_TIMEOUT_MS: '500' });
  s.server.chat.push({ hangAfterHeaders: true });
  const res = await s.post('/v1/chat', { scope, query: 'anyone?' });
  t.match(failureReason(t, s, res), /^chat provider did not answer within 500 ms/);
});

t.test('Retry-After as an HTTP-date is honoured', async (t) => {
  const s = await setup(t, { LLM_MAX_RETRIES: '1' });
  // HTTP-dates have whole seconds: this one is 2 to 3 s away, the backoff would be 125 to 250 ms.
  const date = new Date(Date.now() + 3000).toUTCString();
  s.server.chat.push({ status: 503, json: { error: 'busy' }, headers: { 'Retry-After': date } }, 'After the wait.');
  const started = Date.now();
  const res = await s.post('/v1/chat', { scope, query: 'hello' });
  const waited = Date.now() - started;
  t.equal(res.status, 200, res.text);
  t.equal(res.body.answer, 'After the wait.');
  t.ok(waited >= 1500 && waited < 6000, `waited until the date (${waited} ms)`);
  t.equal(s.server.chatRequests().length, 2);

  // A date in the past: retried at once.
  s.server.chat.push({ status: 429, json: { error: 'busy' }, headers: { 'Retry-After': new Date(Date.now() - 60_000).toUTCString() } }, 'At once.');
  const again = Date.now();
  t.equal((await s.post('/v1/chat', { scope, query: 'hello' })).body.answer, 'At once.');
  t.ok(Date.now() - again < 1000);
});

t.test('a refused connection says so in the log', async (t) => {
  // A port that was just free, below the ephemeral range (32768-60999 on Linux): another test's server, started
  // meanwhile with port 0, cannot be given it (one was, once, in CI: a 200). Not port 1, which fetch refuses itself ("bad port").
  const port = await freePortBelowEphemeral();
  const s = await setup(t, { LLM_BASE_URL: `http://127.0.0.1:${port}/v1` });
  const res = await s.post('/v1/chat', { scope, query: 'hello' });
  t.match(failureReason(t, s, res), new RegExp(`^chat provider unreachable \\(http://127\\.0\\.0\\.1:${port}/v1/chat/completions\\): fetch failed: .*ECONNREFUSED`));
});

t.test('a base URL without /v1: the 404 is logged with the URL it was sent to and what to check', async (t) => {
  const server = await startOpenAiServer();
  t.teardown(() => server.close());
  const base = server.url.replace(/\/v1$/, '');
  const s = await setup(t, { LLM_BASE_URL: base });
  const res = await s.post('/v1/chat', { scope, query: 'hello' });
  t.equal(failureReason(t, s, res), `chat provider answered 404 for POST ${base}/chat/completions: check that the base URL includes /v1 and that the provider serves the model`);
  t.equal(server.chatRequests().length, 0, 'the provider\'s chat endpoint was never reached');
});

t.test('a user and password in LLM_BASE_URL stop the server at start, not shown; the key is never logged', async (t) => {
  const s = await setup(t);
  await t.rejects(startTestCairn({ LLM_BASE_URL: s.server.url.replace('http://', 'http://cairn:hunter2@') }),
    { name: 'ConfigError', message: /^LLM_BASE_URL must not carry a user or password .*give the key in LLM_API_KEY, got "http:\/\/\[redacted\]@127\.0\.0\.1:\d+\/v1"$/ });
  await t.rejects(startTestCairn({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: 'http://cairn:hunter2@127.0.0.1:9/v1' }), { message: /^EMBEDDINGS_BASE_URL must not carry .*EMBEDDINGS_API_KEY/ });
  // A provider that cannot be reached: the failure is logged with its URL, without the key.
  const { lines, log } = capturingLogger();
  const app = await startTestCairn({ LLM_BASE_URL: 'http://127.0.0.1:9/v1', LLM_API_KEY: 'sk-never-logged-1234', LLM_TIMEOUT_MS: '1000', LLM_MAX_RETRIES: '0' }, { log });
  t.teardown(() => app.stop());
  const res = await app.memory('/v1/chat', { method: 'POST', json: { scope, query: 'hello' } });
  const text = await res.text();
  t.equal(res.status, 500);
  t.notMatch(text, /sk-never/);
  const reason = lines.find((l) => 'reason' in l)?.reason;
  t.match(reason, /^chat provider unreachable \(http:\/\/127\.0\.0\.1:9\/v1\/chat\/completions\)/, 'the failure is logged');
  t.notMatch(JSON.stringify(lines), /sk-never/, 'without the key');
});

t.test('an API key that no Authorization header can carry stops the server at start, not shown', async (t) => {
  // Two lines of a key file, a space, a pasted typographic quote: fetch refused every call, logging the header, key and all.
  for (const [name, value, what] of [
    ['LLM_API_KEY', 'sk-first-half-9f3a\nsk-second-half-77c1', 'a line break at character 19'],
    ['LLM_API_KEY', 'sk-first-half-9f3a sk-second-half-77c1', 'whitespace at character 19'],
    ['EMBEDDINGS_API_KEY', '\u201csk-first-half-9f3a\u201d', 'a character that is not printable ASCII at character 1'],
  ] as const) {
    const error = await startTestCairn({ LLM_BASE_URL: 'http://127.0.0.1:9/v1', EMBEDDINGS_PROVIDER: 'openai', [name]: value }).then(
      async (app) => { await app.stop(); return undefined; },
      (e: unknown) => e as Error,
    );
    t.match(error, { name: 'ConfigError', message: `${name} must be printable ASCII without whitespace (it is sent as "Authorization: Bearer <token>"), got a value with ${what} (not shown)` }, `${name}: ${what}`);
    t.notMatch(error?.message, /first-half/, 'the key is not in the message');
  }
  // Surrounding whitespace (the newline at the end of a key file) is trimmed, as before: the server starts and sends the key.
  const s = await setup(t, { LLM_API_KEY: '  sk-trimmed-key-1234\n' });
  s.server.chat.push('Keyed.');
  t.equal((await s.post('/v1/chat', { scope, query: 'hello' })).body.answer, 'Keyed.');
  t.equal(s.server.chatRequests().at(-1)?.headers.authorization, 'Bearer sk-trimmed-key-1234');
});

t.test('ingest: a long reply of brackets is read in bounded time', async (t) => {
  const s = await setup(t);
  // A small model repeating itself: unclosed brackets, each of which the facts search used to read to the end.
  for (const content of ['['.repeat(2 << 20), `Thinking ${'{"x": [1, "'.repeat(400_000)}`]) {
    s.server.chat.push({ content });
    const started = Date.now();
    const res = await s.post('/v1/ingest', { scope, text: 'I like rain.' });
    const took = Date.now() - started;
    t.equal(res.status, 500, 'no facts in it');
    // Unbounded, 8 MiB of '[' held the event loop 32 s; a bound well above the time it takes keeps a loaded machine from failing it.
    t.ok(took < 5000, `answered in ${took} ms`);
  }
  // Prose with unclosed braces before the JSON still gives its facts.
  s.server.chat.push(`${'{ note: '.repeat(20)}\n{"facts": ["The user likes rain"]}`);
  const res = await s.post('/v1/ingest', { scope, text: 'I like rain.' });
  t.equal(res.status, 200, res.text);
  t.same(res.body.facts.map((f: { text: string }) => f.text), ['The user likes rain']);
});

t.test('ingest: facts that cannot be stored are dropped, and the log says how many', async (t) => {
  const s = await setup(t);
  s.server.chat.push(JSON.stringify({ facts: ['Likes green tea', '   ', 'x'.repeat(8193), 'Likes green tea', 'Lives in Lyon'] }));
  const res = await s.post('/v1/ingest', { scope: { agent: 'drop', user: 'u1' }, text: 'I like green tea and live in Lyon.' });
  t.equal(res.status, 200);
  t.same(res.body.facts.map((f: { text: string }) => f.text), ['Likes green tea', 'Lives in Lyon'], 'the storable facts, once each');
  const warned = s.lines.find((l) => /dropped extracted facts/.test(String(l.msg)));
  t.match(warned, { level: 40, dropped: 2, kept: 2, provider: 'chat' }, 'a warning naming how many were dropped (a repeated fact is not counted)');
  s.server.chat.push(JSON.stringify({ facts: ['Plays chess'] }));
  s.lines.length = 0;
  t.equal((await s.post('/v1/ingest', { scope: { agent: 'drop', user: 'u1' }, text: 'I play chess.' })).status, 200);
  t.notOk(s.lines.some((l) => /dropped extracted facts/.test(String(l.msg))), 'no warning when nothing was dropped');
});

/** A port of 20000-31999 that nothing listens on now (tried at random until one binds). */
async function freePortBelowEphemeral(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const probe = createServer();
    const bound = await new Promise<boolean>((resolve) => probe.once('error', () => resolve(false)).listen(port, '127.0.0.1', () => resolve(true)));
    if (!bound) continue;
    await new Promise((resolve) => probe.close(resolve));
    return port;
  }
}

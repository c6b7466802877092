import { getEventListeners } from 'node:events';
import t from 'tap';
import { OpenAiChat } from '../../infra/providers/chat.js';
import { OpenAiEmbedder } from '../../infra/providers/embeddings.js';
import { ProviderError } from '../../infra/providers/http.js';
import { until } from '../support/logs.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * The chat and embeddings adapters on their own, against a real local HTTP server speaking the OpenAI
 * protocol: how an embeddings reply is paired with its inputs, cancelling a call whose answer is no longer
 * wanted, and how long a retry waits at most.
 */

const server = await startOpenAiServer();
t.teardown(() => server.close());
const http = { baseUrl: server.url, timeoutMs: 5000, maxRetries: 0 };

const vector = (...xs: number[]) => ({ object: 'embedding', embedding: xs });
const reply = (data: unknown[]) => ({ json: { object: 'list', data } });
const first = (v: Float32Array) => Array.from(v).findIndex((x) => x !== 0);

t.test('embeddings are paired with their inputs by index, which must name each input once', async (t) => {
  const embedder = new OpenAiEmbedder(http, 'pairing-model');
  server.embeddings.push(reply([{ index: 1, ...vector(0, 1) }, { index: 0, ...vector(1, 0) }]));
  t.strictSame((await embedder.embed(['a', 'b'])).map(first), [0, 1], 'sorted by index');
  server.embeddings.push(reply([vector(0, 1), vector(1, 0)]));
  t.strictSame((await embedder.embed(['a', 'b'])).map(first), [1, 0], 'no index: in the order sent');

  for (const [what, data] of [
    ['an index twice', [{ index: 0, ...vector(1, 0) }, { index: 0, ...vector(0, 1) }]],
    ['an index out of range', [{ index: 0, ...vector(1, 0) }, { index: 2, ...vector(0, 1) }]],
    ['an index on some items only', [{ index: 1, ...vector(1, 0) }, vector(0, 1)]],
    ['an index that is not an integer', [{ index: '0', ...vector(1, 0) }, { index: 1, ...vector(0, 1) }]],
  ] as const) {
    server.embeddings.push(reply([...data]));
    const error = await embedder.embed(['a', 'b']).then(() => undefined, (e: unknown) => e);
    t.ok(error instanceof ProviderError, `${what}: refused`);
    t.match((error as Error | undefined)?.message, /indices are not 0 to 1, each once/);
    t.match((error as ProviderError | undefined)?.body, /"index"/, 'the reply is kept for the log');
  }
});

t.test('the vectors of one call have one dimension, across batches too', async (t) => {
  const embedder = new OpenAiEmbedder(http, 'dimension-model');
  const texts = Array.from({ length: 129 }, (_, i) => `text ${i}`);
  const batch = (count: number, dim: number) => reply(Array.from({ length: count }, (_, index) => ({ index, ...vector(...Array.from({ length: dim }, (_, d) => (d === 0 ? 1 : 0))) })));
  server.embeddings.push(batch(128, 16), batch(1, 16));
  t.equal((await embedder.embed(texts)).length, 129, 'two batches of one dimension');
  server.embeddings.push(batch(128, 16), batch(1, 8));
  const error = await embedder.embed(texts).then(() => undefined, (e: unknown) => e);
  t.ok(error instanceof ProviderError);
  t.match((error as Error | undefined)?.message, 'embeddings reply has vectors of 16 and 8 dimensions');
});

t.test('embeddings: no input, no request; a reply that never ends is cut off at 256 KiB per input and 64 KiB more', async (t) => {
  const embedder = new OpenAiEmbedder(http, 'bounded-model');
  const sent = server.requests.length;
  t.strictSame(await embedder.embed([]), []);
  t.equal(server.requests.length, sent, 'nothing asked');
  let bytes = 0;
  const closed = new Promise<void>((resolve) => server.embeddings.push({ endless: { closed: (n) => { bytes = n; resolve(); } } }));
  const error = await embedder.embed(['one text']).then(() => undefined, (e: unknown) => e);
  t.ok(error instanceof ProviderError);
  t.match((error as Error | undefined)?.message, `embeddings provider answered with a reply longer than ${64 * 1024 + 256 * 1024} bytes`);
  await closed;
  t.ok(bytes < 16 * 1024 * 1024, `the connection is closed once past the limit (${bytes} bytes sent)`);
});

t.test('a call whose answer is no longer wanted is cancelled, at the provider too', async (t) => {
  const chat = new OpenAiChat(http, 'abort-model');
  const gone = new Error('the client went away');
  const controller = new AbortController();
  const abandoned = new Promise<void>((resolve) => server.chat.push({ hang: true, abandoned: resolve }));
  const arrived = server.nextRequest();
  const call = chat.complete([{ role: 'user', content: 'hello' }], { signal: controller.signal });
  await arrived;
  const aborted = Date.now();
  controller.abort(gone);
  t.equal(await call.then(() => undefined, (e: unknown) => e), gone, 'rejects with the signal\'s reason, not as a provider failure');
  // Not cancelled, the call would end with the 5 s timeout: 2.5 s leaves room for a loaded machine and still tells them apart.
  const cancelledIn = Date.now() - aborted;
  t.ok(cancelledIn < 2500, `at once, not after the timeout (in ${cancelledIn} ms)`);
  await abandoned;
  t.pass('the provider saw the connection closed');

  // Waiting for a retry: the wait ends too, and no retry is sent.
  const retrying = new OpenAiChat({ ...http, maxRetries: 2 }, 'abort-model');
  const later = new AbortController();
  server.chat.push({ status: 503, json: { error: 'busy' }, headers: { 'Retry-After': '5' } });
  const before = server.chatRequests().length;
  const waiting = retrying.complete([{ role: 'user', content: 'hello' }], { signal: later.signal });
  await server.nextRequest();
  // Aborted only once the 503 has arrived and the wait for the retry has begun: that wait is what listens to the
  // caller's signal (the request listens through AbortSignal.any, which adds no listener to it).
  await until('the wait for the retry listens to the signal', () => getEventListeners(later.signal, 'abort').length > 0);
  const stopped = Date.now();
  later.abort(gone);
  t.equal(await waiting.then(() => undefined, (e: unknown) => e), gone);
  // Not ended by the signal, the wait would last the 5 s of Retry-After: 2.5 s tells them apart on a loaded machine.
  const endedIn = Date.now() - stopped;
  t.ok(endedIn < 2500, `the wait for the retry ends (in ${endedIn} ms)`);
  t.equal(server.chatRequests().length - before, 1, 'no retry sent');
  server.chat.length = 0;

  // Embeddings likewise; an aborted signal sends nothing.
  const embedder = new OpenAiEmbedder(http, 'abort-model');
  const embedAbandoned = new Promise<void>((resolve) => server.embeddings.push({ hang: true, abandoned: resolve }));
  const embedController = new AbortController();
  const embedArrived = server.nextRequest();
  const embedding = embedder.embed(['hello'], embedController.signal);
  await embedArrived;
  embedController.abort(gone);
  t.equal(await embedding.then(() => undefined, (e: unknown) => e), gone);
  await embedAbandoned;
  const sent = server.requests.length;
  t.equal(await embedder.embed(['hello'], embedController.signal).then(() => undefined, (e: unknown) => e), gone, 'already aborted: rejects');
  t.equal(server.requests.length, sent, 'without a request');
});

t.test('the backoff between retries is capped like Retry-After (10 s)', async (t) => {
  // A first backoff of 20 to 40 s, were it not capped.
  const chat = new OpenAiChat({ ...http, maxRetries: 1, retryBaseMs: 40_000 }, 'backoff-model');
  server.chat.push({ status: 500, json: { error: 'crashed' } }, 'Back.');
  const started = Date.now();
  t.equal(await chat.complete([{ role: 'user', content: 'hello' }]), 'Back.');
  const waited = Date.now() - started;
  // Capped at 10 s, the jittered wait is 5 to 10 s; uncapped, 20 to 40 s. 2 s over the cap for a loaded machine.
  t.ok(waited >= 5000 && waited < 12_000, `waited ${waited} ms`);
});

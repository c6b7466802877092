import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * A client that hangs up while the memory service waits for its provider: the provider call is cancelled
 * (the provider sees its connection closed), not left running until LLM_TIMEOUT_MS, and nothing is stored.
 */
const server = await startOpenAiServer();
const app = await startTestCairn({ LLM_BASE_URL: server.url, LLM_CHAT_MODEL: 'cancel-model', EMBEDDINGS_PROVIDER: 'openai', LLM_EMBEDDING_MODEL: 'cancel-embed', LLM_TIMEOUT_MS: '30000', LLM_MAX_RETRIES: '0' });
t.teardown(async () => {
  await app.stop();
  await server.close();
});
const scope = { agent: 'cancel', user: 'u1' };

for (const [path, body, replies] of [
  ['/v1/chat', { scope, query: 'what do I like?' }, server.chat],
  ['/v1/ingest', { scope, text: 'I like green tea.' }, server.chat],
  ['/v1/search', { scope, query: 'tea', mode: 'semantic' }, server.embeddings],
  ['/v1/context', { scope, query: 'tea', mode: 'hybrid' }, server.embeddings],
] as const) {
  t.test(`${path}: a client that hangs up cancels the provider call`, async (t) => {
    const abandoned = new Promise<number>((resolve) => replies.push({ hang: true, abandoned: () => resolve(Date.now()) }));
    const arrived = server.nextRequest();
    const client = new AbortController();
    const call = app.memory(path, { method: 'POST', json: body, signal: client.signal }).catch((e: unknown) => e);
    await arrived;
    const hungUp = Date.now();
    client.abort();
    t.match(await call, { name: 'AbortError' });
    const closed = await abandoned;
    t.ok(closed - hungUp < 5000, `the provider's connection closed ${closed - hungUp} ms after the client hung up, not at LLM_TIMEOUT_MS (30 s)`);
  });
}

t.test('nothing was stored by the cancelled ingest', async (t) => {
  // The log itself: a read model read at once could lag behind a write the ingest made after its client left.
  const written = (await app.events.readAll(0, { limit: 10_000 })).map((e) => e.type);
  t.strictSame(written.filter((type) => type.startsWith('Memory') || type === 'FactsExtracted'), [], 'no memory event in the log');
  const res = await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`, { headers: { 'X-Min-Position': String(await app.events.headPosition()) } });
  t.equal(res.status, 200);
  t.strictSame((await res.json()).memories, [], 'and none exported, once the read models have the whole log');
});

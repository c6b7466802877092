import t, { type Test } from 'tap';
import { MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { caughtUp, startTestCairn, type TestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';
import { startOpenAiServer, type OpenAiServer } from '../support/openai-server.js';

/**
 * Which failures of an embeddings provider are a refusal of the texts (the memory gets no vector, the
 * projection carries on) and which are the provider's or its configuration's (the projection waits and
 * retries until the provider answers, and no memory loses its vector): a wrong key (401) or a base URL or
 * model the provider does not serve (404) refuse every text alike and heal once the operator fixes them;
 * llama.cpp's 500 for a text longer than its physical batch is that text's refusal.
 */

interface Setup { server: OpenAiServer; app: TestCairn }

async function setup(t: Test): Promise<Setup> {
  const server = await startOpenAiServer();
  const app = await startTestCairn({
    EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: server.url, LLM_EMBEDDING_MODEL: 'refusal-embed-16',
    // The server answers at once, and no test here is about a timeout: LLM_TIMEOUT_MS longer than a loaded machine's
    // stalls (with 1 s, the 401 below was once reported as "did not answer within 1000 ms").
    LLM_TIMEOUT_MS: '10000', LLM_MAX_RETRIES: '0', CONSISTENCY_TIMEOUT_MS: '1500',
  });
  t.teardown(async () => {
    await app.stop();
    await server.close();
  });
  return { server, app };
}

let n = 0;
const freshScope = () => ({ agent: 'refusals', user: `u${++n}` });

async function json(res: Response): Promise<{ status: number; body: any }> {
  return { status: res.status, body: await res.json() };
}

const store = async (app: TestCairn, scope: object, text: string) => json(await app.memory('/v1/memories', { method: 'POST', json: { scope, text } }));
const exportOf = async (app: TestCairn, scope: { agent: string; user: string }) => json(await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`));

t.test('a wrong key (401) or a base URL or model the provider does not serve (404) is not a refusal of the texts', async (t) => {
  const { server, app } = await setup(t);
  const replies = {
    401: { error: { message: 'Incorrect API key provided: sk-proj-****abcd', type: 'invalid_request_error', code: 'invalid_api_key' } },
    // Ollama, a model not pulled: {"error":{"message":"model \"nomic-embed-text\" not found, try pulling it first"}}.
    404: { error: { message: 'model "refusal-embed-16" not found, try pulling it first', type: 'api_error' } },
  };
  for (const [status, reply] of Object.entries(replies)) {
    const scope = freshScope();
    for (let i = 0; i < 100; i++) server.embeddings.push({ status: Number(status), json: reply });
    const stored = await store(app, scope, `stored while the provider answers ${status}`);
    t.equal(stored.status, 200, 'storing does not depend on the provider');
    const waiting = await exportOf(app, scope);
    // Taken for the text's refusal, the memory was exported at once without a vector, and kept none.
    t.equal(waiting.status, 503, `${status}: export waits for the memory's vector`);
    // Its failure reported first (not within the export's 1.5 s on a loaded machine, where the projection thread runs
    // at a lower priority than the processes of the other test file).
    await until('memory-vectors reports the provider\'s failure', () => app.projections.health().projections.some((p) => p.projection === VECTORS_PROJECTION && p.failing !== null), 30_000);
    const ready = await json(await app.memory('/readyz'));
    t.equal(ready.status, 200, 'ready all the same (every node shares the provider)');
    t.equal(ready.body.degraded.length, 1, 'but reported as degraded');
    t.match(ready.body.degraded[0], `memory-vectors is failing`);
    t.match(ready.body.degraded[0], `embeddings provider answered ${status}`, 'naming what the provider answered');

    server.embeddings.length = 0; // the operator fixed the key, pulled the model
    let exported = waiting;
    const deadline = Date.now() + 20_000;
    while (exported.status !== 200 && Date.now() < deadline) exported = await exportOf(app, scope);
    t.equal(exported.status, 200, `${status}: caught up once the provider answers, without a rebuild`);
    t.equal(exported.body.memories[0]?.vector?.length, 16, 'the memory has its vector');
  }
});

t.test('llama.cpp\'s 500 for a text longer than its physical batch is that text\'s refusal: the other memories get their vectors', async (t) => {
  const { server, app } = await setup(t);
  const scope = freshScope();
  // llama-server's answer to an input of more tokens than --ubatch-size (512 by default), every time it is sent:
  // once in the batch, once on its own.
  const tooLarge = { status: 500, json: { error: { code: 500, message: 'input is too large to process. increase the physical batch size', type: 'server_error' } } };
  server.embeddings.push(tooLarge, tooLarge);
  const long = await store(app, scope, `a long memory ${'with many words '.repeat(300)}`);
  const short = await store(app, scope, 'a short memory');
  t.equal(long.status, 200);
  t.equal(short.status, 200);
  // Past the refused text to the next one, bounded on its own: a fresh projection thread (at a lower CPU priority) beside
  // another test file's processes can take longer than the export's 1.5 s. One that retried the refused text until the
  // provider took it gave it a vector (checked below).
  await caughtUp(app, [MEMORIES_PROJECTION, PERSONALITY_PROJECTION, VECTORS_PROJECTION]); // what an export reads
  // Taken for the provider being down, the projection retried the long text (every scope's vectors waiting
  // meanwhile, the node not ready) rather than carrying on without its vector.
  const exported = await exportOf(app, scope);
  t.equal(exported.status, 200, 'the export does not wait on the refused text');
  const vectors = new Map(exported.body.memories.map((m: { id: string; vector?: number[] }) => [m.id, m.vector?.length]));
  t.equal(vectors.get(long.body.id), undefined, 'the refused text has no vector');
  t.equal(vectors.get(short.body.id), 16, 'the next memory has its vector');
  const ready = await json(await app.memory('/readyz'));
  t.equal(ready.status, 200, 'the node is ready');
  t.strictSame(ready.body.degraded, [], 'and memory-vectors is not failing');

  // Another 500 is the provider's failure, as before: the text waits for its vector.
  const later = freshScope();
  for (let i = 0; i < 100; i++) server.embeddings.push({ status: 500, json: { error: { message: 'CUDA error: out of memory', type: 'server_error' } } });
  await store(app, later, 'stored while the provider fails');
  t.equal((await exportOf(app, later)).status, 503, 'a 500 that is not about the text is waited out');
  server.embeddings.length = 0;
});

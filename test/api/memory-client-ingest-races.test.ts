import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger, until } from '../support/logs.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * An ingest is written once its command is appended: facts it stored and its FactsExtracted event stand. A fact
 * the scope already held is answered from the scope's state, and commands on one scope pipeline, so a deletion
 * of that memory decided right after the ingest can be in that state by the time the answer is built. The ingest
 * must still answer 200 with what it stored (leaving out the memory that is gone, as its repeat would), not a
 * 409 `concurrent-delete` that tells the client to send it again (a second provider call) for a write that
 * happened.
 */

const ai = await startOpenAiServer();
ai.defaultChat = () => JSON.stringify({ facts: ['Sam lives in Porto', 'Sam plays the cello'] });
const app = await startTestCairn({ LLM_BASE_URL: ai.url, EMBEDDINGS_PROVIDER: 'none' });
t.teardown(async () => {
  await app.stop();
  await ai.close();
});

t.test('an ingest racing a deletion of a fact it found already held answers 200 with what it stored', async (t) => {
  const statuses: number[] = [];
  let leftOut = 0;
  for (let i = 0; i < 20; i++) {
    const scope = { agent: 'ingest-race', user: `u${i}` };
    const held = await app.memory('/v1/memories', { method: 'POST', json: { scope, id: 'porto', text: 'Sam lives in Porto' } });
    t.equal(held.status, 200);
    await held.text();
    const ingest = app.memory('/v1/ingest', { method: 'POST', json: { scope, text: 'I live in Porto and I play the cello' } });
    // The provider has been asked: deletions go to the scope while the ingest is decided and written (three, so
    // that one is usually decided between the ingest's decision and its answer; the others answer 404).
    await ai.nextRequest();
    const deletions = [1, 2, 3].map(() => app.memory(`/v1/memories?agent=${scope.agent}&user=${scope.user}&id=porto`, { method: 'DELETE' }));
    const res = await ingest;
    const body = await res.json() as { facts?: Array<{ id: string; text: string }> };
    statuses.push(res.status);
    t.same((await Promise.all(deletions)).map((d) => d.status).sort(), [200, 404, 404], 'the memory is deleted once');
    if (res.status !== 200) continue;
    const texts = body.facts!.map((f) => f.text);
    t.ok(texts.includes('Sam plays the cello'), 'the fact the ingest stored is answered');
    // Deleted before the ingest was decided, "Porto" is stored anew (another id); after its answer, it is answered
    // as held; in between, it is left out.
    if (!texts.includes('Sam lives in Porto')) leftOut++;
    const exported = await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`);
    const memories = ((await exported.json()) as { memories: Array<{ text: string }> }).memories.map((m) => m.text);
    t.ok(memories.includes('Sam plays the cello'), 'the ingest was written');
  }
  t.same(statuses.filter((s) => s !== 200), [], 'every ingest answers 200');
  t.ok(leftOut > 0, `the deletion landed between the ingest's decision and its answer (${leftOut} of 20)`);
});

t.test('a repeat of an ingest (same Idempotency-Key) sent while the first is still at the provider waits for it: one provider call', async (t) => {
  const { log, lines } = capturingLogger();
  const held = await startTestCairn({ LLM_BASE_URL: ai.url, EMBEDDINGS_PROVIDER: 'none', LLM_MAX_RETRIES: '0' }, { log });
  t.teardown(() => held.stop());
  const scope = { agent: 'ingest-retry', user: 'u1' };
  const send = (key: string, text = 'I live in Porto and I play the cello') => held.memory('/v1/ingest', { method: 'POST', headers: { 'Idempotency-Key': key }, json: { scope, text } });
  let release!: () => void;
  const before = ai.chatRequests().length;
  ai.chat.push({ content: JSON.stringify({ facts: ['Sam lives in Porto', 'Sam plays the cello'] }), held: new Promise<void>((resolve) => { release = resolve; }) });
  const first = send('retry-1');
  await ai.nextRequest();
  // The client gives up on the slow answer and sends the request again, twice.
  const repeats = [send('retry-1'), send('retry-1')];
  const waiting = () => lines.filter((l) => /same request \(Idempotency-Key\) is being answered on this node/.test(l.msg)).length;
  await until('both repeats wait for the first (or, not waiting, asked the provider)', () => waiting() === 2 || ai.chatRequests().length > before + 1);
  release();
  const answers = await Promise.all([first, ...repeats]);
  t.same(answers.map((a) => a.status), [200, 200, 200]);
  const bodies = await Promise.all(answers.map((a) => a.json() as Promise<{ facts: Array<{ id: string; text: string }> }>));
  t.equal(ai.chatRequests().length, before + 1, 'the provider was asked once');
  t.same(bodies[1], bodies[0], 'a repeat answers the first one\'s facts');
  t.same(bodies[2], bodies[0]);
  t.same(bodies[0]!.facts.map((f) => f.text), ['Sam lives in Porto', 'Sam plays the cello']);
  t.same(new Set(answers.map((a) => a.headers.get('x-event-position'))).size, 1, 'at the same position: nothing was written twice');

  // A failed ingest leaves nothing to wait for: its repeat asks the provider itself.
  ai.chat.push({ status: 500, json: { error: { message: 'overloaded' } } });
  const failed = await send('retry-2');
  t.equal(failed.status, 500);
  await failed.text();
  const asked = ai.chatRequests().length;
  const again = await send('retry-2');
  t.equal(again.status, 200, 'the repeat of a failed ingest is answered by a provider call of its own');
  await again.text();
  t.equal(ai.chatRequests().length, asked + 1);
});

t.test('a repeat waiting for the first ingest can hang up: it stops waiting, and the first is answered', async (t) => {
  const { log, lines } = capturingLogger();
  const held = await startTestCairn({ LLM_BASE_URL: ai.url, EMBEDDINGS_PROVIDER: 'none' }, { log });
  t.teardown(() => held.stop());
  const scope = { agent: 'ingest-retry', user: 'u2' };
  const json = { scope, text: 'I live in Porto' };
  let release!: () => void;
  ai.chat.push({ content: JSON.stringify({ facts: ['Sam lives in Porto'] }), held: new Promise<void>((resolve) => { release = resolve; }) });
  const first = held.memory('/v1/ingest', { method: 'POST', headers: { 'Idempotency-Key': 'hang-up' }, json });
  await ai.nextRequest();
  const abort = new AbortController();
  const repeat = held.memory('/v1/ingest', { method: 'POST', headers: { 'Idempotency-Key': 'hang-up' }, json, signal: abort.signal }).catch((error: unknown) => error);
  await until('the repeat waits', () => lines.some((l) => /is being answered on this node/.test(l.msg)));
  abort.abort();
  t.match(await repeat, { name: 'AbortError' });
  // Its request ends now (the access log's line), not once the first one is answered.
  await until('the repeat\'s request ended', () => lines.some((l) => l.msg === 'request' && l.path === '/v1/ingest'));
  release();
  const answered = await first;
  t.equal(answered.status, 200);
  t.same(((await answered.json()) as { facts: Array<{ text: string }> }).facts.map((f) => f.text), ['Sam lives in Porto']);
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { startCairn, type Cairn } from '../../api/app.js';
import { loadConfig } from '../../infra/config.js';
import { MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { caughtUp } from '../support/cairn.js';
import { bagOfWords, startOpenAiServer, type OpenAiServer } from '../support/openai-server.js';

/**
 * Ingest, chat and provider-backed embeddings against a real local HTTP server speaking the OpenAI
 * protocol. The app runs with a logger we can read, to check that provider bodies are logged and never
 * returned.
 */

interface App extends Cairn {
  logs: Array<Record<string, unknown>>;
  memory(method: string, path: string, json?: unknown): Promise<{ status: number; headers: Headers; body: any; text: string }>;
  stop(): Promise<void>;
}

/**
 * LLM_TIMEOUT_MS of the apps given an embeddings server of their own, which answers at once (none of those tests is
 * about a timeout): longer than a loaded machine's stalls, which turned such an answer into "did not answer within
 * 1000 ms" in a full run on a loaded machine.
 */
const EMBED_TIMEOUT_MS = '10000';

async function startApp(env: Record<string, string>): Promise<App> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-mem-prov-'));
  const logs: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line) logs.push(JSON.parse(line));
      done();
    },
  });
  const config = loadConfig({ ...env, DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1' });
  const cairn = await startCairn({ config, log: pino({ level: 'info' }, sink) });
  return {
    ...cairn,
    logs,
    async memory(method, path, json) {
      const res = await fetch(cairn.memoryUrl + path, {
        method, headers: json !== undefined ? { 'Content-Type': 'application/json' } : {}, body: json !== undefined ? JSON.stringify(json) : undefined,
      });
      const text = await res.text();
      return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : undefined };
    },
    async stop() {
      await cairn.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const llmEnv = (server: OpenAiServer, extra: Record<string, string> = {}) => ({
  LLM_BASE_URL: server.url, LLM_API_KEY: 'sk-test-key', LLM_CHAT_MODEL: 'test-chat-model', LLM_TIMEOUT_MS: '1000', LLM_MAX_RETRIES: '2', ...extra,
});

const server = await startOpenAiServer({ apiKey: 'sk-test-key' });
t.teardown(() => server.close());
const app = await startApp(llmEnv(server));
t.teardown(() => app.stop());

let n = 0;
const freshScope = () => ({ agent: 'prov', user: `u${++n}` });
const facts = (...list: unknown[]) => JSON.stringify({ facts: list });

/** Asserts a generic 500 that leaks nothing of the provider's reply, and that the log has it. */
function isGeneric500(t: Test, res: Awaited<ReturnType<App['memory']>>, secret: string, logs: App['logs']) {
  t.equal(res.status, 500);
  t.match(res.headers.get('content-type'), /problem\+json/);
  t.equal(res.body.detail, 'the model provider could not complete the request');
  t.notMatch(res.text, secret, 'the provider\'s reply is not in the response');
  t.ok(logs.some((l) => JSON.stringify(l).includes(secret)), 'the provider\'s reply is in the log');
  // Logged once, where the cause is known; the request's own failure line is a warning without a stack.
  const lines = logs.filter((l) => l.request_id === res.body.instance);
  t.equal(lines.filter((l) => l.level === 50).length, 1, 'one error line for the request');
  const failed = lines.find((l) => l.msg === 'request failed');
  t.match(failed, { level: 40, status: 500, problem: 'provider-failure' });
  t.notOk(failed && 'err' in failed, 'no stack for a deliberate 500');
}

t.test('POST /v1/ingest extracts facts with the chat provider and stores them like POST /v1/memories', async (t) => {
  const scope = freshScope();
  const transcript = 'User: I moved to Lisbon last spring, and my cat Miso hates the tram. TRANSCRIPT-MARKER-1';
  server.chat.push(facts('The user lives in Lisbon', 'The user has a cat named Miso', 'The user lives in Lisbon'));
  const before = server.chatRequests().length;
  const res = await app.memory('POST', '/v1/ingest', { scope, text: transcript, session: 'call-7' });
  t.equal(res.status, 200, res.text);
  t.equal(res.body.facts.length, 2, 'duplicates in one reply are stored once');
  t.match(res.body.facts, [{ id: /^m_/, text: 'The user lives in Lisbon', session: 'call-7' }, { text: 'The user has a cat named Miso', session: 'call-7' }]);
  t.ok(Number(res.headers.get('x-event-position')) > 0);

  const request = server.chatRequests()[before]!;
  t.equal(request.headers.authorization, 'Bearer sk-test-key');
  t.match(request.body, { model: 'test-chat-model', stream: false, response_format: { type: 'json_object' } });
  t.equal(request.body.messages.at(-1).content, transcript, 'the text goes to the provider');
  t.match(request.body.messages[0].content, /\{"facts": \[/);

  const search = await app.memory('POST', '/v1/search', { scope, query: 'cat' });
  t.same(search.body.results.map((r: { text: string }) => r.text), ['The user has a cat named Miso'], 'facts are searchable at once');

  const exported = await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.body.memories.length, 2);
  t.notMatch(exported.text, 'TRANSCRIPT-MARKER-1', 'the raw text is not stored');
  const log = await app.events.readAll(0, { limit: 100_000 });
  t.notOk(log.some((e) => JSON.stringify(e).includes('TRANSCRIPT-MARKER-1')), 'the raw text is not in the event log');
  const extracted = log.filter((e) => e.type === 'FactsExtracted' && (e.data as { user: string }).user === scope.user);
  t.equal(extracted.length, 1);
  t.match(extracted[0]!.data, { session: 'call-7', model: 'test-chat-model', memory_ids: res.body.facts.map((f: { id: string }) => f.id) });

  // Ingesting facts already stored changes nothing (same path, same dedup).
  server.chat.push(facts('The user lives in Lisbon'));
  const again = await app.memory('POST', '/v1/ingest', { scope, text: 'again', session: 'call-7' });
  t.equal(again.status, 200);
  t.same(again.body.facts, [res.body.facts[0]]);
  t.equal((await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories.length, 2);
});

t.test('ingest returns a fact a live memory already holds unchanged: its session and updated_at are kept', async (t) => {
  const scope = freshScope();
  const labelled = await app.memory('POST', '/v1/memories', { scope, text: 'The user keeps bees', session: 'call-1' });
  const unlabelled = await app.memory('POST', '/v1/memories', { scope, text: 'The user rides a tandem' });
  const head = await app.events.headPosition();
  server.chat.push(facts('The user keeps bees'));
  const without = await app.memory('POST', '/v1/ingest', { scope, text: 'bees again' });
  t.same(without.body.facts, [labelled.body], 'an ingest without session does not erase the label');
  server.chat.push(facts('The user keeps bees', 'The user rides a tandem'));
  const other = await app.memory('POST', '/v1/ingest', { scope, text: 'bees and tandem', session: 'call-9' });
  t.same(other.body.facts, [labelled.body, unlabelled.body], 'an ingest with another session does not relabel either');
  const extracted = (await app.events.readAll(head, { limit: 100 })).filter((e) => (e.data as { user: string }).user === scope.user);
  t.same(extracted.map((e) => e.type), ['FactsExtracted', 'FactsExtracted'], 'only the provenance of the ingests is appended');
  const exported = await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.same(exported.body.memories.map((m: { session: string | null }) => m.session), ['call-1', null]);
});

t.test('ingest stores at most 20 facts', async (t) => {
  const scope = freshScope();
  server.chat.push(facts(...Array.from({ length: 25 }, (_, i) => `fact number ${i}`)));
  const res = await app.memory('POST', '/v1/ingest', { scope, text: 'long conversation' });
  t.equal(res.status, 200);
  t.equal(res.body.facts.length, 20);
  t.equal(res.body.facts[19].text, 'fact number 19');
  t.equal((await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories.length, 20);
});

t.test('facts per ingest at the edge: exactly 20 are all stored, of 21 the first 20', async (t) => {
  const twenty = freshScope();
  server.chat.push(facts(...Array.from({ length: 20 }, (_, i) => `edge fact ${i}`)));
  const all = await app.memory('POST', '/v1/ingest', { scope: twenty, text: 'twenty facts' });
  t.equal(all.status, 200);
  t.equal(all.body.facts.length, 20, '20 facts: all returned');
  t.equal((await app.memory('GET', `/v1/export?agent=${twenty.agent}&user=${twenty.user}`)).body.memories.length, 20, '... and stored');

  const more = freshScope();
  server.chat.push(facts(...Array.from({ length: 21 }, (_, i) => `edge fact ${i}`)));
  const capped = await app.memory('POST', '/v1/ingest', { scope: more, text: 'twenty-one facts' });
  t.equal(capped.status, 200);
  t.same(capped.body.facts.map((f: { text: string }) => f.text), Array.from({ length: 20 }, (_, i) => `edge fact ${i}`), '21 facts: the first 20');
  const stored = (await app.memory('GET', `/v1/export?agent=${more.agent}&user=${more.user}`)).body.memories.map((m: { text: string }) => m.text);
  t.equal(stored.length, 20);
  t.notOk(stored.includes('edge fact 20'), 'the 21st is not stored');

  const dupes = freshScope();
  server.chat.push(facts(...Array.from({ length: 20 }, (_, i) => `edge fact ${i}`), 'edge fact 0', 'edge fact 20'));
  const collapsed = await app.memory('POST', '/v1/ingest', { scope: dupes, text: 'with a repeat' });
  t.equal(collapsed.body.facts.length, 20, 'duplicates collapse before the first 20 are taken');
  t.equal(collapsed.body.facts[19].text, 'edge fact 19');
});

t.test('extracted facts at the text limit: 8,192 bytes are stored, 8,193 dropped', async (t) => {
  const scope = freshScope();
  const fact8192 = 'ü'.repeat(4096);
  server.chat.push(facts(fact8192, `${fact8192}.`, 'The user sails'));
  const res = await app.memory('POST', '/v1/ingest', { scope, text: 'a long fact' });
  t.equal(res.status, 200, res.text);
  t.same(res.body.facts.map((f: { text: string }) => f.text), [fact8192, 'The user sails'], 'the 8,192-byte fact is kept, the 8,193-byte one dropped');
  t.same((await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories.map((m: { text: string }) => m.text), [fact8192, 'The user sails']);
});

t.test('ingest tolerates fenced or slightly malformed JSON from local models', async (t) => {
  const scope = freshScope();
  server.chat.push('```json\n{"facts": ["The user plays chess", "  ", {"fact": "The user is left-handed"},]}\n```');
  const res = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(res.status, 200, res.text);
  t.same(res.body.facts.map((f: { text: string }) => f.text), ['The user plays chess', 'The user is left-handed'], 'blank facts dropped');

  // Prose (or a reasoning block) with braces of its own around the JSON.
  server.chat.push('<think>The text mentions {chess} and [a cat].</think>\nHere is the JSON {as asked}:\n{"facts": ["The user has a cat"]}\n(Skipped: {greetings}.)');
  const prose = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(prose.status, 200, prose.text);
  t.same(prose.body.facts?.map((f: { text: string }) => f.text), ['The user has a cat'], 'the JSON among braces of prose');

  server.chat.push('{"facts": []}');
  const none = await app.memory('POST', '/v1/ingest', { scope, text: 'hello' });
  t.equal(none.status, 200);
  t.same(none.body, { facts: [] }, 'an explicit empty list is a real empty result');
});

t.test('ingest drops facts that are not well-formed Unicode, like a text sent to POST /v1/memories would be refused', async (t) => {
  const scope = freshScope();
  // JSON escapes of an unpaired surrogate: hashing and UTF-8 would make it the memory of "\ufffd" instead.
  server.chat.push('{"facts": ["The user hums \\ud800 tunes", "The user likes tea"]}');
  const res = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(res.status, 200, res.text);
  t.same(res.body.facts.map((f: { text: string }) => f.text), ['The user likes tea']);
  const replaced = await app.memory('POST', '/v1/memories', { scope, text: 'The user hums \ufffd tunes' });
  t.equal(replaced.body.text, 'The user hums \ufffd tunes', 'a text with U+FFFD is its own memory');
  t.same((await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories.map((m: { text: string }) => m.text),
    ['The user likes tea', 'The user hums \ufffd tunes']);
  server.chat.push('{"facts": ["\\udc00"]}');
  t.equal((await app.memory('POST', '/v1/ingest', { scope, text: 'chat' })).status, 500, 'none storable: a provider failure, as for blank facts');
});

t.test('ingest: an unreadable reply is a 500, never an empty success', async (t) => {
  const scope = freshScope();
  server.chat.push('I am sorry, I cannot help with that. UNREADABLE-REPLY-7');
  const res = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  isGeneric500(t, res, 'UNREADABLE-REPLY-7', app.logs);
  server.chat.push('{"memories": ["x"]} WRONG-SHAPE-8');
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'WRONG-SHAPE-8', app.logs);
  server.chat.push('{"facts": [{"name": "Sam"}, 42], "note": "NO-FACT-ITEMS-9"}');
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'NO-FACT-ITEMS-9', app.logs);
  server.chat.push(JSON.stringify({ note: 'UNUSABLE-FACTS-10', facts: ['   ', 'x'.repeat(8193)] }));
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'UNUSABLE-FACTS-10', app.logs);
  server.chat.push('{"facts": []}');
  const none = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(none.status, 200, 'an explicitly empty list is "no facts"');
  t.same(none.body, { facts: [] });
  t.match(none.headers.get('x-event-position'), /^\d+$/, 'and carries the scope\'s position like every command');
  t.same((await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories, [], 'nothing stored');
});

t.test('provider failures: bounded retry on 429/5xx, then a generic 500', async (t) => {
  const scope = freshScope();
  let before = server.chatRequests().length;
  server.chat.push({ status: 429, json: { error: { message: 'slow down' } }, headers: { 'Retry-After': '0' } }, facts('The user likes jazz'));
  const retried = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(retried.status, 200, 'a 429 followed by success succeeds');
  t.equal(server.chatRequests().length - before, 2);

  before = server.chatRequests().length;
  const failure = { status: 500, json: { error: { message: 'UPSTREAM-SECRET-500 model crashed' } } };
  server.chat.push(failure, failure, failure, facts('never reached'));
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'UPSTREAM-SECRET-500', app.logs);
  t.equal(server.chatRequests().length - before, 3, 'one try and LLM_MAX_RETRIES = 2 retries');
  server.chat.length = 0;

  before = server.chatRequests().length;
  server.chat.push({ status: 400, json: { error: { message: 'BAD-REQUEST-SECRET' } } });
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'BAD-REQUEST-SECRET', app.logs);
  t.equal(server.chatRequests().length - before, 1, '4xx other than 429 is not retried');

  server.chat.push({ status: 200, raw: '{"choices": [ NOT-JSON-SECRET' });
  isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'chat' }), 'NOT-JSON-SECRET', app.logs);

  const started = Date.now();
  server.chat.push({ hang: true });
  const timedOut = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(timedOut.status, 500, 'a hanging provider times out (LLM_TIMEOUT_MS)');
  t.ok(Date.now() - started < 5000);
  t.ok(app.logs.some((l) => /did not answer within 1000 ms/.test(String(l.reason))));

  // A redirect is not followed: the user's text is not re-sent to wherever the provider points.
  const elsewhere = await startOpenAiServer({});
  t.teardown(() => elsewhere.close());
  for (const status of [301, 302, 307, 308]) {
    before = server.chatRequests().length;
    server.chat.push({ status, raw: '', headers: { Location: `${elsewhere.url}/chat/completions` } });
    isGeneric500(t, await app.memory('POST', '/v1/ingest', { scope, text: 'REDIRECTED-TEXT' }), `answered ${status} (a redirect, not followed`, app.logs);
    t.equal(server.chatRequests().length - before, 1, `${status}: not retried`);
  }
  t.equal(elsewhere.chatRequests().length, 0, 'the redirect target never received the text');

  const down = await startApp({ LLM_BASE_URL: 'http://127.0.0.1:9/v1', LLM_MAX_RETRIES: '0' });
  t.teardown(() => down.stop());
  t.equal((await down.memory('POST', '/v1/ingest', { scope, text: 'chat' })).status, 500, 'unreachable provider');
});

t.test('provider replies are logged up to 2,000 characters', async (t) => {
  const scope = freshScope();
  const logged = async (body: string) => {
    server.chat.push({ status: 400, raw: body });
    const res = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
    t.equal(res.status, 500);
    return app.logs.find((l) => l.request_id === res.body.instance && 'upstream_body' in l)?.upstream_body;
  };
  const atLimit = `A${'x'.repeat(1998)}Z`;
  t.equal(await logged(atLimit), atLimit, '2,000 characters: logged whole');
  t.equal(await logged(`${atLimit}!`), atLimit, '2,001 characters: the first 2,000');
  server.chat.push(`Z${'y'.repeat(1999)}?`);
  const unreadable = await app.memory('POST', '/v1/ingest', { scope, text: 'chat' });
  t.equal(unreadable.status, 500);
  t.equal(app.logs.find((l) => l.request_id === unreadable.body.instance && 'upstream_reply' in l)?.upstream_reply, `Z${'y'.repeat(1999)}`, 'an unreadable reply: the first 2,000 characters');
});

t.test('POST /v1/chat: one completion with personality and memories; stores neither query nor answer', async (t) => {
  const scope = freshScope();
  await app.memory('POST', '/v1/memories', { scope, text: 'The user is allergic to peanuts' });
  await app.memory('POST', '/v1/memories', { scope, text: 'The user works night shifts' });
  await app.memory('PUT', '/v1/personality', { scope, personality: 'You are Ava, gentle and precise.' });
  const head = await app.events.headPosition();
  const before = server.chatRequests().length;
  server.chat.push('Avoid the satay: it has peanuts. ANSWER-MARKER');
  const res = await app.memory('POST', '/v1/chat', { scope, query: 'Can I eat peanuts satay? QUERY-MARKER', mode: 'hybrid', limit: 1 });
  t.equal(res.status, 200, res.text);
  t.equal(res.body.answer, 'Avoid the satay: it has peanuts. ANSWER-MARKER');
  t.equal(res.body.context.personality, 'You are Ava, gentle and precise.');
  t.match(res.body.context.memories, [{ text: 'The user is allergic to peanuts', score: Number }]);
  t.equal(res.body.context.memories.length, 1);

  const request = server.chatRequests()[before]!;
  t.equal(server.chatRequests().length - before, 1, 'one completion');
  t.equal(request.body.stream, false);
  t.notOk(request.body.response_format);
  t.match(request.body.messages[0], { role: 'system', content: /You are Ava, gentle and precise\.[\s\S]*- The user is allergic to peanuts/ });
  t.same(request.body.messages[1], { role: 'user', content: 'Can I eat peanuts satay? QUERY-MARKER' });

  t.equal(await app.events.headPosition(), head, 'nothing appended');
  const exported = await app.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.notMatch(exported.text, /MARKER/);

  // A memory of several lines, one of them starting like a list item, stays one item of the prompt's list.
  const lines = freshScope();
  await app.memory('POST', '/v1/memories', { scope: lines, text: 'Shopping list of the user:\n- oat milk\r\n- rye bread' });
  server.chat.push('Noted.');
  t.equal((await app.memory('POST', '/v1/chat', { scope: lines, query: 'shopping list' })).status, 200);
  t.match(server.chatRequests().at(-1)!.body.messages[0].content, /\n- Shopping list of the user:\n {2}- oat milk\n {2}- rye bread\n/, 'continuation lines indented under their memory');

  const empty = freshScope();
  server.chat.push('I do not know you yet.');
  const fresh = await app.memory('POST', '/v1/chat', { scope: empty, query: 'who am I?' });
  t.same(fresh.body, { answer: 'I do not know you yet.', context: { personality: '', memories: [] } });

  server.chat.push({ status: 503, json: { error: 'CHAT-DOWN-SECRET' } }, { status: 503, json: { error: 'CHAT-DOWN-SECRET' } }, { status: 503, json: { error: 'CHAT-DOWN-SECRET' } });
  isGeneric500(t, await app.memory('POST', '/v1/chat', { scope, query: 'peanuts' }), 'CHAT-DOWN-SECRET', app.logs);
  server.chat.push({ status: 200, json: { choices: [{ message: { content: '' } }] } });
  t.equal((await app.memory('POST', '/v1/chat', { scope, query: 'peanuts' })).status, 500, 'an empty completion is a failure');
});

t.test('POST /v1/chat gives the prompt as many memories as fit in CHAT_MEMORY_MAX_BYTES, best first; the context says which', async (t) => {
  const small = await startApp(llmEnv(server, { CHAT_MEMORY_MAX_BYTES: '8192' }));
  t.teardown(() => small.stop());
  // Texts of `bytes` bytes (é is two) that all match the query, so each is retrieved.
  const text = (mark: string, bytes: number) => `budget ${mark} ${'é'.repeat((bytes - 8 - mark.length) >> 1)}${(bytes - 8 - mark.length) % 2 ? 'x' : ''}`;
  const ask = async (scope: { agent: string; user: string }, limit: number) => {
    const before = server.chatRequests().length;
    server.chat.push('ok');
    const res = await small.memory('POST', '/v1/chat', { scope, query: 'budget', limit });
    t.equal(res.status, 200, res.text);
    return { memories: res.body.context.memories as Array<{ text: string }>, prompt: server.chatRequests()[before]!.body.messages[0].content as string };
  };

  const exact = freshScope();
  for (const mark of ['A', 'B', 'C']) t.equal((await small.memory('POST', '/v1/memories', { scope: exact, text: text(mark, 4096) })).status, 200);
  t.equal(Buffer.byteLength(text('A', 4096)), 4096);
  const two = await ask(exact, 3);
  t.equal(two.memories.length, 2, 'two of 4,096 bytes: exactly at the limit, both given; the third would pass it');
  for (const m of two.memories) t.ok(two.prompt.includes(m.text), 'each memory of the context is in the prompt');
  const left = ['A', 'B', 'C'].map((mark) => text(mark, 4096)).find((x) => !two.memories.some((m) => m.text === x))!;
  t.notOk(two.prompt.includes(left), 'the one left out is not in the prompt');
  t.ok(small.logs.some((l) => l.msg === 'chat: memories left out of the prompt (CHAT_MEMORY_MAX_BYTES)' && l.retrieved === 3 && l.given === 2), 'logged');
  t.equal((await ask(exact, 2)).memories.length, 2, 'limit 2: nothing left out');

  const past = freshScope();
  for (const [mark, bytes] of [['D', 4096], ['E', 4097]] as const) {
    t.equal((await small.memory('POST', '/v1/memories', { scope: past, text: text(mark, bytes) })).status, 200);
  }
  t.equal((await ask(past, 5)).memories.length, 1, '4,096 + 4,097 bytes: one past the limit, only the best is given');

  const full = freshScope();
  t.equal((await small.memory('POST', '/v1/memories', { scope: full, text: text('F', 8192) })).status, 200);
  t.equal((await ask(full, 5)).memories.length, 1, 'one memory of 8,192 bytes fits the smallest budget');

  // The search itself is not cut: the same scope through /v1/context gives all three.
  t.equal((await small.memory('POST', '/v1/context', { scope: exact, query: 'budget', limit: 3 })).body.memories.length, 3);
});

t.test('chat after a delete never sees the deleted memory: not in the prompt, not in the context', async (t) => {
  const scope = freshScope();
  const kept = await app.memory('POST', '/v1/memories', { scope, text: 'The user walks a greyhound every morning' });
  const gone = await app.memory('POST', '/v1/memories', { scope, text: 'The user walks a greyhound named DELETED-MARKER' });
  const byId = await app.memory('POST', '/v1/memories', { scope, id: 'dog-note', text: 'A greyhound note BY-ID-MARKER' });
  t.equal((await app.memory('DELETE', `/v1/memories?agent=${scope.agent}&user=${scope.user}&id=${gone.body.id}`)).status, 200);
  t.equal((await app.memory('DELETE', `/v1/memories?agent=${scope.agent}&user=${scope.user}&id=${byId.body.id}`)).status, 200);
  for (const mode of ['lexical', 'semantic', 'hybrid']) {
    const before = server.chatRequests().length;
    server.chat.push('A walk at dawn.');
    const res = await app.memory('POST', '/v1/chat', { scope, query: 'greyhound walks', mode, limit: 100 });
    t.equal(res.status, 200, mode);
    t.same(res.body.context.memories.map((m: { id: string }) => m.id), [kept.body.id], `${mode}: only the live memory is in the context`);
    const prompt = JSON.stringify(server.chatRequests()[before]!.body.messages);
    t.match(prompt, 'The user walks a greyhound every morning', `${mode}: the live memory is in the prompt`);
    t.notMatch(prompt, /DELETED-MARKER|BY-ID-MARKER/, `${mode}: the deleted ones are not`);
  }

  await app.memory('PUT', '/v1/personality', { scope, personality: 'You are PERSONALITY-MARKER.' });
  t.equal((await app.memory('DELETE', `/v1/scope?agent=${scope.agent}&user=${scope.user}`)).status, 200);
  const before = server.chatRequests().length;
  server.chat.push('Who are you?');
  const after = await app.memory('POST', '/v1/chat', { scope, query: 'greyhound walks', mode: 'hybrid' });
  t.same(after.body.context, { personality: '', memories: [] }, 'after DELETE /v1/scope: nothing');
  t.notMatch(JSON.stringify(server.chatRequests()[before]!.body.messages), /greyhound every morning|PERSONALITY-MARKER/, 'and nothing of the scope in the prompt');
});

t.test('ingest and chat without LLM_BASE_URL: 503 naming it; validation first', async (t) => {
  const bare = await startApp({});
  t.teardown(() => bare.stop());
  const scope = freshScope();
  for (const [path, body] of [['/v1/ingest', { scope, text: 'x' }], ['/v1/chat', { scope, query: 'x' }]] as const) {
    const res = await bare.memory('POST', path, body);
    t.equal(res.status, 503, path);
    t.match(res.body.detail, /LLM_BASE_URL/);
  }
  t.equal((await bare.memory('POST', '/v1/ingest', { scope, text: '' })).status, 400);
});

t.test('EMBEDDINGS_PROVIDER=none: semantic and hybrid are 400 naming it; lexical works; export has no vectors', async (t) => {
  const plain = await startApp({ EMBEDDINGS_PROVIDER: 'none' });
  t.teardown(() => plain.stop());
  const scope = freshScope();
  await plain.memory('POST', '/v1/memories', { scope, text: 'lexical only memory' });
  for (const path of ['/v1/search', '/v1/context', '/v1/chat']) {
    for (const mode of ['semantic', 'hybrid']) {
      const res = await plain.memory('POST', path, { scope, query: 'memory', mode });
      t.equal(res.status, 400, `${path} ${mode}`);
      t.match(res.body.detail, /EMBEDDINGS_PROVIDER/);
    }
  }
  t.equal((await plain.memory('POST', '/v1/search', { scope, query: 'memory' })).body.results.length, 1);
  const exported = await plain.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.status, 200);
  t.notOk('vector' in exported.body.memories[0]);
});

t.test('EMBEDDINGS_PROVIDER=openai: vectors from the provider, stored with model and dimension', async (t) => {
  const embedServer = await startOpenAiServer();
  t.teardown(() => embedServer.close());
  const remote = await startApp({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: embedServer.url, LLM_EMBEDDING_MODEL: 'test-embed-16', LLM_TIMEOUT_MS: EMBED_TIMEOUT_MS, LLM_MAX_RETRIES: '0' });
  t.teardown(() => remote.stop());
  const scope = freshScope();
  const a = await remote.memory('POST', '/v1/memories', { scope, text: 'apples and pears' });
  await remote.memory('POST', '/v1/memories', { scope, text: 'trains and buses' });
  const semantic = await remote.memory('POST', '/v1/search', { scope, query: 'pears', mode: 'semantic', limit: 1 });
  t.equal(semantic.status, 200, semantic.text);
  t.same(semantic.body.results.map((r: { id: string }) => r.id), [a.body.id]);
  const requests = embedServer.embeddingRequests();
  t.ok(requests.every((r) => r.body.model === 'test-embed-16'));
  t.ok(requests.some((r) => JSON.stringify(r.body.input) === JSON.stringify(['pears'])), 'the query is embedded by the provider');

  const exported = await remote.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.body.memories[0].vector_model, 'test-embed-16');
  t.equal(exported.body.memories[0].vector.length, 16);
  const doc = await remote.reads.find('memory_vectors', { where: { agent: scope.agent, user: scope.user }, limit: 10 });
  t.match(doc.items[0], { model: 'test-embed-16', dim: 16 });

  embedServer.embeddings.push({ status: 500, json: { error: 'EMBED-SECRET' } });
  isGeneric500(t, await remote.memory('POST', '/v1/search', { scope, query: 'pears', mode: 'hybrid' }), 'EMBED-SECRET', remote.logs);
  t.equal((await remote.memory('POST', '/v1/search', { scope, query: 'pears' })).status, 200, 'lexical does not need the provider');
});

t.test('EMBEDDINGS_PROVIDER=openai: components beyond Float32\'s range still make a unit vector, never a NaN score', async (t) => {
  const embedServer = await startOpenAiServer();
  t.teardown(() => embedServer.close());
  // A server that does not normalise, with components that are finite in JSON but not as Float32 (> 3.4e38).
  const away = (bagOfWords('pears').findIndex((x) => x > 0) + 1) % 16;
  embedServer.embed = (text) => (text.includes('huge') ? Array.from({ length: 16 }, (_, i) => (i === away ? 1e39 : 0)) : bagOfWords(text));
  const remote = await startApp({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: embedServer.url, LLM_EMBEDDING_MODEL: 'test-embed-16', LLM_TIMEOUT_MS: EMBED_TIMEOUT_MS, LLM_MAX_RETRIES: '0' });
  t.teardown(() => remote.stop());
  const scope = freshScope();
  const huge = await remote.memory('POST', '/v1/memories', { scope, text: 'huge numbers' });
  const apples = await remote.memory('POST', '/v1/memories', { scope, text: 'apples and pears' });
  const pears = await remote.memory('POST', '/v1/search', { scope, query: 'pears', mode: 'semantic', limit: 10 });
  t.equal(pears.status, 200, pears.text);
  t.same(pears.body.results.map((r: { id: string }) => r.id), [apples.body.id, huge.body.id]);
  t.ok(pears.body.results.every((r: { score: unknown }) => typeof r.score === 'number' && Number.isFinite(r.score)), pears.text);
  const same = await remote.memory('POST', '/v1/search', { scope, query: 'huge', mode: 'semantic', limit: 1 });
  t.equal(same.body.results[0].id, huge.body.id);
  t.ok(Math.abs(same.body.results[0].score - 1) < 1e-6, `cosine with itself is 1 (${same.body.results[0].score})`);
  const exported = await remote.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.same(exported.body.memories.find((m: { id: string }) => m.id === huge.body.id).vector[away], 1, 'exported as a unit vector');
});

t.test('export pairs each memory with the vector of its own text, also while the vectors projection is behind a later update', async (t) => {
  const embedServer = await startOpenAiServer();
  t.teardown(() => embedServer.close());
  // Holds the provider's reply for a text until the test lets it go.
  const held = new Map<string, { arrived: () => void; arrival: Promise<void>; release: () => void; released: Promise<void> }>();
  const hold = (text: string) => {
    let arrived!: () => void, release!: () => void;
    const arrival = new Promise<void>((r) => { arrived = r; });
    const released = new Promise<void>((r) => { release = r; });
    held.set(text, { arrived, arrival, release, released });
    return held.get(text)!;
  };
  embedServer.beforeEmbeddings = async (inputs) => {
    for (const input of inputs) {
      const h = held.get(input);
      if (h) { h.arrived(); await h.released; }
    }
  };
  const remote = await startApp({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: embedServer.url, LLM_EMBEDDING_MODEL: 'test-embed-16', LLM_TIMEOUT_MS: '5000', LLM_MAX_RETRIES: '0' });
  t.teardown(() => remote.stop());
  const scope = freshScope();
  const exportPath = `/v1/export?agent=${scope.agent}&user=${scope.user}`;
  const dims = (v: number[]) => v.flatMap((x, i) => (x !== 0 ? [i] : []));
  await remote.memory('POST', '/v1/memories', { scope, id: 'fav', text: 'apples and pears' });
  t.same(dims((await remote.memory('GET', exportPath)).body.memories[0].vector), dims(bagOfWords('apples and pears')));

  const second = hold('trains and buses');
  const third = hold('violins');
  await remote.memory('POST', '/v1/memories', { scope, id: 'fav', text: 'trains and buses' });
  await second.arrival;
  // This export waits for the vectors of every write acknowledged before it: the second text's.
  const exported = remote.memory('GET', exportPath);
  const updated = await remote.memory('POST', '/v1/memories', { scope, id: 'fav', text: 'violins' });
  const seen = await fetch(`${remote.memoryUrl}/v1/search`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Min-Position': updated.headers.get('x-event-position')! },
    body: JSON.stringify({ scope, query: 'violins' }),
  });
  t.equal(seen.status, 200, 'the memories read model has the third text');
  second.release();
  await third.arrival;
  third.release();
  const memory = (await exported).body.memories[0];
  t.equal(memory.text, 'violins');
  t.same(dims(memory.vector), dims(bagOfWords('violins')), 'the vector of the exported text, never the one of a text it held before');
});

for (const thread of ['true', 'false']) t.test(`embeddings: a text the provider refuses for good gets no vector, and the projection carries on (PROJECTIONS_THREAD=${thread})`, async (t) => {
  const embedServer = await startOpenAiServer();
  t.teardown(() => embedServer.close());
  const remote = await startApp({
    EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: embedServer.url, LLM_EMBEDDING_MODEL: 'test-embed-16',
    LLM_TIMEOUT_MS: EMBED_TIMEOUT_MS, LLM_MAX_RETRIES: '0', CONSISTENCY_TIMEOUT_MS: '1500', PROJECTIONS_THREAD: thread,
  });
  t.teardown(() => remote.stop());
  const scope = freshScope();
  // Refused as a batch and then on its own (e.g. over the model's context length).
  const refusal = { status: 400, json: { error: { message: 'REFUSED-SECRET: maximum context length exceeded' } } };
  embedServer.embeddings.push(refusal, refusal);
  const bad = await remote.memory('POST', '/v1/memories', { scope, text: 'a text the model refuses' });
  t.equal(bad.status, 200, 'storing does not depend on the provider');
  const good = await remote.memory('POST', '/v1/memories', { scope, text: 'apples and pears' });
  // Past the refused text to the next one: a projection that stopped at it never gets there, one that retried it until
  // the provider took it gave it a vector (checked below).
  await caughtUp(remote, [MEMORIES_PROJECTION, VECTORS_PROJECTION]);
  const semantic = await remote.memory('POST', '/v1/search', { scope, query: 'pears', mode: 'semantic' });
  t.equal(semantic.status, 200, semantic.text);
  t.same(semantic.body.results.map((r: { id: string }) => r.id), [good.body.id], 'later memories are embedded; the refused one has no vector');
  const lexical = await remote.memory('POST', '/v1/search', { scope, query: 'refuses' });
  t.same(lexical.body.results.map((r: { id: string }) => r.id), [bad.body.id], 'the refused memory is still found lexically');
  const exported = await remote.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.status, 200);
  const byId = new Map(exported.body.memories.map((m: { id: string }) => [m.id, m]));
  t.equal((byId.get(bad.body.id) as { vector?: unknown }).vector, undefined, 'exported without a vector');
  t.equal((byId.get(good.body.id) as { vector: number[] }).vector.length, 16);
  if (thread === 'false') {
    // (The projection thread logs to the process's stdout, which this test does not capture.)
    const logged = remote.logs.find((l) => l.memory_id === bad.body.id);
    t.ok(logged, 'the refusal is logged with the memory');
    t.match(JSON.stringify(logged), /REFUSED-SECRET/);
  }

  // Updating the refused memory to a text the provider takes gives it a vector.
  const fixed = await remote.memory('POST', '/v1/memories', { scope, id: bad.body.id, text: 'pears, shorter' });
  t.equal(fixed.status, 200);
  await caughtUp(remote, [MEMORIES_PROJECTION, VECTORS_PROJECTION]);
  const again = await remote.memory('POST', '/v1/search', { scope, query: 'pears', mode: 'semantic' });
  t.same(again.body.results.map((r: { id: string }) => r.id).sort(), [good.body.id, bad.body.id].sort());
});

t.test('embeddings: while the provider is down, reads that need vectors answer 503 and catch up after', async (t) => {
  const embedServer = await startOpenAiServer();
  t.teardown(() => embedServer.close());
  const remote = await startApp({
    EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: embedServer.url, LLM_EMBEDDING_MODEL: 'test-embed-16',
    LLM_TIMEOUT_MS: EMBED_TIMEOUT_MS, LLM_MAX_RETRIES: '0', CONSISTENCY_TIMEOUT_MS: '1200',
  });
  t.teardown(() => remote.stop());
  const scope = freshScope();
  for (let i = 0; i < 30; i++) embedServer.embeddings.push({ status: 503, json: { error: 'DOWN' } });
  const stored = await remote.memory('POST', '/v1/memories', { scope, text: 'stored while embeddings are down' });
  t.equal(stored.status, 200, 'storing does not depend on the provider');
  // The lexical read model has the memory first; the search must then not wait for the vectors as well, which cannot
  // catch up while the provider is down.
  await caughtUp(remote, [MEMORIES_PROJECTION]);
  const lexical = await remote.memory('POST', '/v1/search', { scope, query: 'down' });
  t.equal(lexical.status, 200, 'lexical search does not wait for vectors');
  t.same(lexical.body.results.map((r: { id: string }) => r.id), [stored.body.id]);
  const waiting = await remote.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(waiting.status, 503, 'export waits for the vectors, bounded');
  t.equal(waiting.headers.get('retry-after'), '1');
  embedServer.embeddings.length = 0; // the provider is back
  // The runner retries a provider's failure after waits that double from 1 s up to 10 s (retryDelay), whatever load
  // the machine is under: it has the vector well within this bound, and never does if it gave up on the event.
  await caughtUp(remote, [MEMORIES_PROJECTION, PERSONALITY_PROJECTION, VECTORS_PROJECTION]); // what an export reads
  const exported = await remote.memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.status, 200, 'caught up once the provider answers');
  t.equal(exported.body.memories[0].vector.length, 16);
});

t.test('ingest and chat limits at their edges, with a provider configured', async (t) => {
  const scope = freshScope();
  const text8192 = 'ü'.repeat(4096);
  server.chat.push(facts('edge fact'));
  const atLimit = await app.memory('POST', '/v1/ingest', { scope, text: text8192, session: 'é'.repeat(64) });
  t.equal(atLimit.status, 200, 'ingest: 8,192 bytes of text and a 128-byte session pass');
  t.equal(atLimit.body.facts[0].session, 'é'.repeat(64));
  const calls = server.chatRequests().length;
  for (const [body, where] of [
    [{ scope, text: `${text8192}.` }, 'body.text'],
    [{ scope, text: '   ' }, 'body.text'],
    [{ scope, text: 'x', session: `${'é'.repeat(64)}.` }, 'body.session'],
  ] as const) {
    const res = await app.memory('POST', '/v1/ingest', body);
    t.equal(res.status, 400, `ingest: ${where} refused`);
    t.match(JSON.stringify(res.body.errors), where);
  }
  t.equal(server.chatRequests().length, calls, 'refused before the provider is asked');
  const chat = await app.memory('POST', '/v1/chat', { scope, query: text8192 });
  t.equal(chat.status, 200, 'chat: an 8,192-byte query passes');
  const chatCalls = server.chatRequests().length;
  const blank = await app.memory('POST', '/v1/chat', { scope, query: ' \n\t ' });
  t.equal(blank.status, 400, 'chat: a whitespace-only query is refused');
  t.match(JSON.stringify(blank.body.errors), 'body.query');
  t.equal(server.chatRequests().length, chatCalls, '... before the provider is asked');
});

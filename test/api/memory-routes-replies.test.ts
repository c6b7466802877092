import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import t from 'tap';
import { startCairn } from '../../api/app.js';
import { loadConfig } from '../../infra/config.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * Replies of reasoning models (DeepSeek-R1, Qwen3, QwQ, Magistral) served by vLLM without a reasoning
 * parser, llama.cpp with `--reasoning-format none` or older Ollama: the reasoning stays in the message
 * content, before the answer, and it can hold drafts of the answer. Ingest stores the facts of the answer,
 * never those of a draft; chat returns the answer without the reasoning. And a degenerate reply (a fence
 * opened before an endless run of newlines) is read in bounded time. A real local HTTP server speaking the
 * OpenAI protocol plays the provider.
 */

const server = await startOpenAiServer({ apiKey: 'sk-test-key' });
t.teardown(() => server.close());
const dataDir = mkdtempSync(join(tmpdir(), 'cairn-mem-reasoning-'));
const logs: Array<Record<string, unknown>> = [];
const sink = new Writable({
  write(chunk, _encoding, done) {
    for (const line of chunk.toString().split('\n')) if (line) logs.push(JSON.parse(line));
    done();
  },
});
const cairn = await startCairn({
  config: loadConfig({ LLM_BASE_URL: server.url, LLM_API_KEY: 'sk-test-key', LLM_MAX_RETRIES: '0', DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1' }),
  log: pino({ level: 'info' }, sink),
});
t.teardown(async () => {
  await cairn.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function memory(method: string, path: string, json?: unknown) {
  const res = await fetch(cairn.memoryUrl + path, {
    method, headers: json !== undefined ? { 'Content-Type': 'application/json' } : {}, body: json !== undefined ? JSON.stringify(json) : undefined,
  });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : undefined };
}

let n = 0;
const freshScope = () => ({ agent: 'reasoning', user: `u${++n}` });
const texts = (list: Array<{ text: string }>) => list.map((m) => m.text);
const exported = async (scope: { agent: string; user: string }) => texts((await memory('GET', `/v1/export?agent=${scope.agent}&user=${scope.user}`)).body.memories);

t.test('ingest stores the facts of the answer, never those of a draft in the reasoning', async (t) => {
  const replies: Array<[string, string]> = [
    ['a <think> block with a draft, then the answer',
      '<think>\nThe user mentions tea. A first draft: {"facts": ["DRAFT: the user drinks coffee"]}. No, they said tea.\n</think>\n\n{"facts": ["The user likes green tea"]}'],
    ['a chat template that opened the block itself (only its end tag is in the reply)',
      'Okay, the user talks about tea. Draft: {"facts": ["DRAFT: the user drinks coffee"]}\n</think>\n\n{"facts": ["The user likes green tea"]}'],
    ['a fenced draft in the reasoning, then a fenced answer',
      '<think>I will answer ```json\n{"facts": ["DRAFT: the user drinks coffee"]}\n``` or similar.</think>\n```json\n{"facts": ["The user likes green tea"]}\n```'],
    ['upper-case tags', '<THINK>["DRAFT: the user drinks coffee"]</THINK>{"facts": ["The user likes green tea"]}'],
    ['Magistral\'s [THINK] block', '[THINK]Draft: {"facts": ["DRAFT: the user drinks coffee"]}[/THINK]{"facts": ["The user likes green tea"]}'],    ['gpt-oss (harmony): the analysis channel, then the final one',
      '<|channel|>analysis<|message|>Draft: {"facts": ["DRAFT: the user drinks coffee"]}<|end|><|start|>assistant<|channel|>final<|message|>{"facts": ["The user likes green tea"]}<|return|>'],
  ];
  for (const [what, reply] of replies) {
    const scope = freshScope();
    server.chat.push(reply);
    const res = await memory('POST', '/v1/ingest', { scope, text: 'I drink green tea every morning.' });
    t.equal(res.status, 200, `${what}: ${res.text}`);
    t.same(texts(res.body.facts ?? []), ['The user likes green tea'], what);
    t.same(await exported(scope), ['The user likes green tea'], `${what}: nothing of the draft is stored`);
  }
});

t.test('ingest: a reply that is all reasoning (its block never ends) is a 500, its draft is not stored', async (t) => {
  const scope = freshScope();
  server.chat.push('<think>The facts are {"facts": ["DRAFT: the user drinks coffee"]} but let me check REASONING-ONLY-1');
  const res = await memory('POST', '/v1/ingest', { scope, text: 'I drink green tea every morning.' });
  t.equal(res.status, 500, res.text);
  t.equal(res.body.type, 'https://cairn.dev/problems/provider-failure');
  t.notMatch(res.text, 'REASONING-ONLY-1');
  t.same(await exported(scope), [], 'nothing stored');
});

t.test('ingest: a reply without reasoning that mentions the tags is read as before', async (t) => {
  const scope = freshScope();
  server.chat.push('{"facts": ["The user writes <think> blocks in prompts", "The user strips </think> tags from replies"]}');
  const res = await memory('POST', '/v1/ingest', { scope, text: 'I write <think> blocks and strip </think> tags.' });
  t.equal(res.status, 200, res.text);
  t.same(texts(res.body.facts), ['The user writes <think> blocks in prompts', 'The user strips </think> tags from replies']);
});

t.test('chat returns the answer without the model\'s reasoning', async (t) => {
  const scope = freshScope();
  t.equal((await memory('POST', '/v1/memories', { scope, text: 'The user likes green tea' })).status, 200);
  const replies: Array<[string, string]> = [
    ['a <think> block', '<think>The memories say green tea. SECRET-REASONING-2</think>\n\nYou like green tea.'],
    ['a block opened by the chat template', 'The memories say green tea. SECRET-REASONING-3\n</think>\n\nYou like green tea.'],
    ['gpt-oss (harmony)', '<|channel|>analysis<|message|>Green tea. SECRET-REASONING-5<|end|><|start|>assistant<|channel|>final<|message|>You like green tea.<|return|>'],
    ['no reasoning', 'You like green tea.'],
  ];
  for (const [what, reply] of replies) {
    server.chat.push(reply);
    const res = await memory('POST', '/v1/chat', { scope, query: 'What tea do I like?' });
    t.equal(res.status, 200, `${what}: ${res.text}`);
    t.equal(res.body.answer, 'You like green tea.', what);
    t.same(texts(res.body.context.memories), ['The user likes green tea'], what);
  }
  for (const answer of ['Use a <think> tag, then answer.', 'Close the block with </think> and then answer.', 'Close it with [/THINK].']) {
    server.chat.push(answer);
    t.equal((await memory('POST', '/v1/chat', { scope, query: 'How do reasoning models format?' })).body.answer, answer, `an answer that only mentions a tag is returned whole: ${answer}`);
  }
});

t.test('chat: a reply that is all reasoning is a 500 that does not return it', async (t) => {
  const scope = freshScope();
  for (const reply of ['<think>Let me think about tea. SECRET-REASONING-4', '<think>Tea. SECRET-REASONING-4</think>\n  ', '<|channel|>analysis<|message|>Tea. SECRET-REASONING-4<|end|>']) {
    server.chat.push(reply);
    const res = await memory('POST', '/v1/chat', { scope, query: 'What tea do I like?' });
    t.equal(res.status, 500, res.text);
    t.equal(res.body.detail, 'the model provider could not complete the request');
    t.notMatch(res.text, 'SECRET-REASONING-4');
  }
  t.ok(logs.some((l) => l.msg === 'chat: the chat provider\'s reply has reasoning and no answer' && String(l.upstream_reply).includes('SECRET-REASONING-4')), 'the reply is in the log');
});

t.test('ingest: a fence opened before a long run of newlines that never closes is read in linear time', async (t) => {
  // A local model stuck emitting newlines after opening its fence (150,000 of them: 15 s of the event loop
  // with a pattern whose whitespace skip overlapped its lazy group).
  const scope = freshScope();
  server.chat.push(`\`\`\`json\n${'\n'.repeat(150_000)}DEGENERATE-REPLY-6`);
  const started = performance.now();
  const res = await memory('POST', '/v1/ingest', { scope, text: 'I drink green tea every morning.' });
  const elapsed = performance.now() - started;
  t.equal(res.status, 500, 'unreadable: a provider failure');
  t.notMatch(res.text, 'DEGENERATE-REPLY-6');
  t.ok(elapsed < 3000, `answered in ${Math.round(elapsed)} ms`);
  // The same run before a fence that does close is read.
  server.chat.push(`\`\`\`json${'\n'.repeat(150_000)}{"facts": ["The user likes green tea"]}\n\`\`\``);
  const fenced = await memory('POST', '/v1/ingest', { scope, text: 'I drink green tea every morning.' });
  t.equal(fenced.status, 200, fenced.text);
  t.same(texts(fenced.body.facts), ['The user likes green tea']);
});

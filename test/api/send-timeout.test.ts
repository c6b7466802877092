import http, { type IncomingMessage } from 'node:http';
import t from 'tap';
import { EXPORT_CHUNK } from '../../api/memory/export.js';
import { STREAM_PIECE_BYTES } from '../../api/http/routes.js';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger, until } from '../support/logs.js';
import { type Scope, seedMemories, textOf } from '../support/memory-seed.js';

/**
 * SEND_TIMEOUT_MS: a streamed answer (GET /v1/export) whose client takes none of it for that long is cut, so a
 * client that stops reading cannot hold the connection and the chunk being sent for ever; a client that reads
 * slowly but steadily (faster than a 64 KiB piece per SEND_TIMEOUT_MS) is never cut, however long the whole answer takes.
 */

const SEND_TIMEOUT_MS = 1000;
const { log, lines } = capturingLogger();
const app = await startTestCairn({ SEND_TIMEOUT_MS: String(SEND_TIMEOUT_MS), CONSISTENCY_TIMEOUT_MS: '60000' }, { log });
t.teardown(() => app.stop());
// About 14 KB a memory with its vector: 1,000 of them are about 14 MB, more than the sockets buffer ahead of a
// paused client, and one chunk of EXPORT_CHUNK memories is about 3.5 MB, far more than a piece.
const WORDS = 2000;
const scope: Scope = { agent: 'send', user: 'timeout' };
await seedMemories(app, scope, 1000, { words: WORDS });
t.ok(Buffer.byteLength(textOf(0, WORDS)) * EXPORT_CHUNK > 16 * STREAM_PIECE_BYTES, 'a chunk is many pieces');

const stalls = () => lines.filter((l) => l.level === 40 && /took none of the answer within SEND_TIMEOUT_MS/.test(l.msg));

/** GET /v1/export on a connection of its own; `read` decides how the client takes the answer. */
function exportTo(read: (res: IncomingMessage) => void): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    http.get(`${app.memoryUrl}/v1/export?agent=${scope.agent}&user=${scope.user}`, { agent: false }, (res) => {
      read(res);
      resolve(res);
    }).on('error', reject);
  });
}

/** The rest of an answer; rejects when the connection ends before the answer does. */
async function rest(res: IncomingMessage, received: Buffer[]): Promise<string> {
  for await (const chunk of res) received.push(chunk as Buffer);
  return Buffer.concat(received).toString('utf8');
}

t.test('a client that stops reading is cut after SEND_TIMEOUT_MS', async (t) => {
  const received: Buffer[] = [];
  const started = performance.now();
  const res = await exportTo((res) => res.once('data', (chunk: Buffer) => {
    res.pause();
    received.push(chunk);
  }));
  t.equal(res.statusCode, 200);
  await until('the server gives up on the client', () => stalls().length === 1, 30_000);
  t.ok(performance.now() - started >= SEND_TIMEOUT_MS, 'not before SEND_TIMEOUT_MS');
  // What the sockets held is still delivered, then the answer ends incomplete: never complete-looking JSON.
  await t.rejects(rest(res, received), 'the client sees an incomplete answer');
  t.match(Buffer.concat(received).toString('utf8'), /^\{"scope":/);
  t.equal((await app.memory('/healthz')).status, 200, 'the server goes on');
});

t.test('a client that reads slowly but steadily gets the whole answer, however long it takes', async (t) => {
  const before = stalls().length;
  const received: Buffer[] = [];
  const started = performance.now();
  // 256 KB every 100 ms: about 2.5 MB/s, so the answer takes several times SEND_TIMEOUT_MS, and so does one
  // chunk of it; the client takes a piece far more often than that.
  const res = await exportTo((res) => {
    let taken = 0;
    res.on('data', (chunk: Buffer) => {
      received.push(chunk);
      taken += chunk.length;
      if (taken < 256 * 1024) return;
      taken = 0;
      res.pause();
      setTimeout(() => res.resume(), 100);
    });
  });
  await new Promise<void>((resolve, reject) => res.once('end', resolve).once('error', reject).once('aborted', () => reject(new Error('aborted'))));
  const elapsed = performance.now() - started;
  const body = JSON.parse(Buffer.concat(received).toString('utf8')) as { memories: unknown[] };
  t.equal(body.memories.length, 1000, 'every memory');
  t.ok(elapsed > 2 * SEND_TIMEOUT_MS, `the answer took longer than SEND_TIMEOUT_MS (${Math.round(elapsed)} ms)`);
  t.equal(stalls().length, before, 'never cut');
});

t.test('a large answer that is not streamed (100 search results of long memories) is sent under the same timeout, with its length', async (t) => {
  const long: Scope = { agent: 'send', user: 'search' };
  // 8,008 bytes a memory, under the 8,192-byte limit, mostly control characters, which JSON sends as six bytes each
  // (\u0001): 100 results are about 4.8 MB of JSON, more than a paused client's connection takes on loopback (2-4 MB).
  await seedMemories(app, long, 150, { vectors: false, text: (i) => `memory ${String(i).padStart(3, '0')} ${'\u0001'.repeat(7996)}` });
  const body = JSON.stringify({ scope: long, query: 'memory', limit: 100 });
  const search = (read: (res: IncomingMessage) => void) => new Promise<IncomingMessage>((resolve, reject) => {
    const req = http.request(`${app.memoryUrl}/v1/search`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      read(res);
      resolve(res);
    });
    req.on('error', reject);
    req.end(body);
  });
  const whole = await search(() => {});
  const text = await rest(whole, []);
  t.equal(whole.statusCode, 200);
  t.equal(Number(whole.headers['content-length']), Buffer.byteLength(text), 'Content-Length is the answer\'s length');
  t.ok(Buffer.byteLength(text) > 4_500_000, `more than the sockets buffer ahead of a paused client (${Buffer.byteLength(text)} bytes)`);
  t.equal((JSON.parse(text) as { results: unknown[] }).results.length, 100);

  const before = stalls().length;
  const received: Buffer[] = [];
  const started = performance.now();
  const res = await search((res) => res.once('data', (chunk: Buffer) => {
    res.pause();
    received.push(chunk);
  }));
  t.equal(res.statusCode, 200);
  await until('the server gives up on the client', () => stalls().length === before + 1, 30_000);
  t.ok(performance.now() - started >= SEND_TIMEOUT_MS, 'not before SEND_TIMEOUT_MS');
  await t.rejects(rest(res, received), 'the client sees an incomplete answer');
  t.equal((await app.memory('/healthz')).status, 200, 'the server goes on');
});

import http, { type IncomingMessage } from 'node:http';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { EXPORT_CHUNK, EXPORT_READ_PAGE } from '../../api/memory/export.js';
import { LOCAL_EMBEDDING_MODEL, LocalHashEmbedder } from '../../infra/providers/embeddings.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';
import { type Exported, type Scope, seedMemories } from '../support/memory-seed.js';

/**
 * GET /v1/export of scopes larger than one read page, sent as it is read: the same JSON as the whole answer
 * made at once, pages read as the client takes the answer, and a failure after the answer began cuts it.
 */

const q = (scope: Scope) => `agent=${scope.agent}&user=${scope.user}`;

async function deleteMemory(app: TestCairn, scope: Scope, id: string): Promise<void> {
  const res = await app.memory(`/v1/memories?${q(scope)}&id=${id}`, { method: 'DELETE' });
  if (res.status !== 200) throw new Error(`delete answered ${res.status}`);
}

const embedder = new LocalHashEmbedder();
const withVector = (m: Exported): Exported => ({ ...m, vector: Array.from(embedder.embedOne(m.text), (x) => Number(x.toPrecision(9))), vector_model: LOCAL_EMBEDDING_MODEL });

/** GET /v1/export on a connection of its own, read until its first bytes, then paused: the client holds the answer. */
function heldExport(app: TestCairn, scope: Scope, headers: Record<string, string> = {}): Promise<{ res: IncomingMessage; received: Buffer[] }> {
  return new Promise((resolve, reject) => {
    http.get(`${app.memoryUrl}/v1/export?${q(scope)}`, { agent: false, headers }, (res) => {
      const received: Buffer[] = [];
      res.once('data', (chunk: Buffer) => {
        res.pause();
        received.push(chunk);
        resolve({ res, received });
      });
    }).on('error', reject);
  });
}

/** Reads the rest of a held export; rejects when the connection ends before the answer does. */
async function rest({ res, received }: { res: IncomingMessage; received: Buffer[] }): Promise<string> {
  for await (const chunk of res) received.push(chunk as Buffer);
  return Buffer.concat(received).toString('utf8');
}

/** Projecting thousands of memories can take longer than the default wait on a busy machine. */
const SEEDING = { CONSISTENCY_TIMEOUT_MS: '60000' };
const { log, lines } = capturingLogger();
const app = await startTestCairn(SEEDING, { log });
t.teardown(() => app.stop());
// Two read pages, and many chunks: 12,000 memories of about 1 KB, about 25 MB with their vectors.
const scope = { agent: 'export', user: 'large' };
const seeded = await seedMemories(app, scope, EXPORT_READ_PAGE + 2_000);

t.test('a streamed export is exactly the whole answer, across chunks and read pages, without deleted memories', async (t) => {
  t.ok(seeded.length > EXPORT_READ_PAGE && EXPORT_READ_PAGE % EXPORT_CHUNK === 0, 'more than one read page');
  // Deleted: the first and the last, each side of a chunk boundary and of the read page boundary.
  const deleted = new Set([0, EXPORT_CHUNK - 1, EXPORT_CHUNK, EXPORT_READ_PAGE - 1, EXPORT_READ_PAGE, seeded.length - 1].map((i) => seeded[i]!.id));
  for (const id of deleted) await deleteMemory(app, scope, id);
  const put = await app.memory('/v1/personality', { method: 'PUT', json: { scope, personality: 'Calm "and" precise.' } });
  t.equal(put.status, 200);

  const res = await app.memory(`/v1/export?${q(scope)}`);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^application\/json/);
  const expected = { scope, personality: 'Calm "and" precise.', memories: seeded.filter((m) => !deleted.has(m.id)).map(withVector) };
  // The same text JSON.stringify makes of the whole answer: nothing doubled or lost at a chunk's edge.
  t.equal(await res.text(), JSON.stringify(expected));
});

t.test('without embeddings, the memories are exported without vectors', async (t) => {
  const plain = await startTestCairn({ ...SEEDING, EMBEDDINGS_PROVIDER: 'none' });
  t.teardown(() => plain.stop());
  const small = { agent: 'export', user: 'plain' };
  const memories = await seedMemories(plain, small, 3 * EXPORT_CHUNK + 10, { words: 5, vectors: false });
  await deleteMemory(plain, small, memories[EXPORT_CHUNK]!.id);
  const res = await plain.memory(`/v1/export?${q(small)}`);
  t.equal(res.status, 200);
  t.equal(await res.text(), JSON.stringify({ scope: small, personality: '', memories: memories.filter((_, i) => i !== EXPORT_CHUNK) }));
});

t.test('an export reads its pages as the client takes its answer, and the process answers others meanwhile', async (t) => {
  const live = await app.memory(`/v1/export?${q(scope)}`).then((res) => res.json()) as { memories: Exported[] };
  const [first, last] = [live.memories[0]!, live.memories.at(-1)!];
  const held = await heldExport(app, scope);
  // While the client holds the first bytes (the server is at most a few MB ahead, in socket buffers, far
  // from the second read page): other requests are answered, and change memories the export has not read.
  t.equal((await app.memory('/healthz')).status, 200);
  await deleteMemory(app, scope, last.id);
  // Deleted and stored again with the same id: a new created_at puts it after the memories already sent.
  await deleteMemory(app, scope, first.id);
  const again = await app.memory('/v1/memories', { method: 'POST', json: { scope, id: first.id, text: first.text, session: first.session } });
  t.equal(again.status, 200);
  const body = JSON.parse(await rest(held)) as { memories: Exported[] };
  const ids = body.memories.map((m) => m.id);
  t.notOk(ids.includes(last.id), 'the last page was read after the deletion');
  t.equal(ids.filter((id) => id === first.id).length, 1, 'a memory stored again meanwhile is exported once');
  t.equal(ids.length, live.memories.length - 1);
});

t.test('a memory changed after its page was read, before its chunk was sent, is exported once, with the vector of the text it is exported with', async (t) => {
  // About 7 KB a text: the server is at most a chunk or two ahead of a paused client, far from the first page's last chunk.
  const big = { agent: 'export', user: 'changed-meanwhile' };
  const memories = await seedMemories(app, big, EXPORT_READ_PAGE + 1, { words: 1000 });
  const [deleted, relabelled, corrected] = [memories[EXPORT_READ_PAGE - 3]!, memories[EXPORT_READ_PAGE - 2]!, memories[EXPORT_READ_PAGE - 1]!];
  const held = await heldExport(app, big);
  // In the first page, read before the answer began, in its last chunk: changed while the client holds the answer.
  await deleteMemory(app, big, deleted.id);
  const a = await app.memory('/v1/memories', { method: 'POST', json: { scope: big, id: relabelled.id, text: relabelled.text, session: 'relabelled' } });
  const b = await app.memory('/v1/memories', { method: 'POST', json: { scope: big, id: corrected.id, text: 'corrected meanwhile' } });
  t.same([a.status, b.status], [200, 200]);
  await app.waitFor(['memories', 'memory-vectors'], await app.events.headPosition());
  const body = JSON.parse(await rest(held)) as { memories: Exported[] };
  t.equal(new Set(body.memories.map((m) => m.id)).size, body.memories.length, 'no memory twice');
  t.ok(body.memories.length >= memories.length - 1, 'no other memory left out');
  t.ok(body.memories.every((m) => m.vector), 'every memory with a vector: one deleted meanwhile is exported as it was or not at all');
  for (const id of [relabelled.id, corrected.id]) {
    const exported = body.memories.filter((m) => m.id === id);
    t.equal(exported.length, 1, 'exported once');
    t.same(exported[0]!.vector, withVector(exported[0]!).vector, 'with the vector of the text it is exported with');
  }
});

/** GET /v1/export read whole, as the bytes that came (not decompressed), on a connection of its own. */
function rawExport(app: TestCairn, scope: Scope, headers: Record<string, string>): Promise<{ res: IncomingMessage; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    http.get(`${app.memoryUrl}/v1/export?${q(scope)}`, { agent: false, headers }, (res) => {
      const received: Buffer[] = [];
      res.on('data', (chunk: Buffer) => received.push(chunk)).once('end', () => resolve({ res, bytes: Buffer.concat(received) })).once('error', reject);
    }).on('error', reject);
  });
}

t.test('an export is gzip-compressed for a client that takes gzip, and only then', async (t) => {
  const plain = await rawExport(app, scope, {});
  t.equal(plain.res.headers['content-encoding'], undefined);
  t.match(plain.res.headers.vary, /accept-encoding/i, 'caches keep the two apart');
  const zipped = await rawExport(app, scope, { 'Accept-Encoding': 'br;q=1, gzip;q=0.5' });
  t.equal(zipped.res.headers['content-encoding'], 'gzip');
  t.match(zipped.res.headers.vary, /accept-encoding/i);
  t.ok(gunzipSync(zipped.bytes).equals(plain.bytes), 'the same JSON, byte for byte');
  t.ok(zipped.bytes.length * 3 < plain.bytes.length, `smaller (${zipped.bytes.length} of ${plain.bytes.length} bytes)`);
  const old = await rawExport(app, scope, { 'Accept-Encoding': 'x-gzip' });
  t.equal(old.res.headers['content-encoding'], 'gzip', 'x-gzip, gzip\'s old name, is taken as gzip (RFC 9110)');
  t.ok(gunzipSync(old.bytes).equals(plain.bytes));
  for (const refused of ['gzip;q=0', 'identity', 'br', '*;q=0, identity']) {
    const answer = await rawExport(app, scope, { 'Accept-Encoding': refused });
    t.equal(answer.res.headers['content-encoding'], undefined, `not compressed for ${refused}`);
    t.ok(answer.bytes.equals(plain.bytes));
  }
});

t.test('a read that fails after the answer began cuts the connection; before, it is a problem', async (t) => {
  const held = await heldExport(app, scope);
  const zipped = await heldExport(app, scope, { 'Accept-Encoding': 'gzip' });
  t.match(Buffer.concat(held.received).toString(), /^\{"scope":/);
  t.equal(zipped.res.headers['content-encoding'], 'gzip');
  // The read store fails (here: closed) while the clients hold the answers.
  await app.reads.close();
  await t.rejects(rest(held), 'the client sees an incomplete answer, not complete-looking JSON');
  await t.rejects(rest(zipped), 'compressed too: the connection is cut before the end of the gzip stream');
  t.ok(lines.some((l) => l.level === 50 && /^export failed after its answer began/.test(l.msg)), 'logged');
  const res = await app.memory(`/v1/export?${q(scope)}`);
  t.equal(res.status, 500);
  t.match(res.headers.get('content-type'), /^application\/problem\+json/);
});

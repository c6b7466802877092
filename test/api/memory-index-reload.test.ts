import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger, until } from '../support/logs.js';

/**
 * The in-process BM25 and vector indexes are reloaded from the read models when a projection thread is
 * replaced (or a rebuilt generation goes live). A reload clears the index first; one whose reads fail (the
 * read store briefly unreachable: a MongoDB election, a network blip) must not leave a half-filled index that
 * searches use as if it were whole.
 */

t.test('an index reload that fails leaves no half-filled index behind: the next search reloads it', async (t) => {
  const { log, lines } = capturingLogger();
  const app = await startTestCairn({}, { log });
  t.teardown(() => app.stop());
  const scope = { agent: 'reload', user: 'u' };
  const search = async (mode: string) => {
    const res = await app.memory('/v1/search', { method: 'POST', json: { scope, query: 'green tea', mode } });
    t.equal(res.status, 200);
    return ((await res.json()) as { results: Array<{ text: string }> }).results.map((r) => r.text);
  };
  t.equal((await app.memory('/v1/memories', { method: 'POST', json: { scope, text: 'I love green tea' } })).status, 200);
  t.same(await search('lexical'), ['I love green tea']);

  // The read store fails (this process's connection) while the replacement of a dead projection thread has the
  // indexes reloaded: both reloads fail and are logged.
  const reads = app.reads;
  const find = reads.find.bind(reads);
  reads.find = async () => { throw new Error('read store briefly unreachable'); };
  const failedReloads = () => lines.filter((l) => l.msg === 'could not reload an in-process index').length;
  const first = app.projections.thread!;
  await first.terminate();
  try {
    await until('both index reloads have failed', () => failedReloads() >= 2, 10_000);
  } finally {
    reads.find = find;
  }

  // The read store answers again: the memory is found in every mode, before and after the next write.
  for (const mode of ['lexical', 'semantic', 'hybrid']) t.same(await search(mode), ['I love green tea'], `${mode}: not missing from a half-filled index`);
  t.equal((await app.memory('/v1/memories', { method: 'POST', json: { scope, text: 'green tea again' } })).status, 200);
  for (const mode of ['lexical', 'semantic']) t.same((await search(mode)).sort(), ['I love green tea', 'green tea again'], `${mode}: after a later store`);
});

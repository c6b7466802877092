import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { THREAD_STOP_TIMEOUT_MS } from '../../projections/host.js';
import type { Projection } from '../../projections/projection.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { ProjectionRunner } from '../../projections/runner.js';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';
import { startOpenAiServer } from '../support/openai-server.js';
import { tempDir } from '../support/temp.js';

/**
 * Stopping while a batch waits on a model provider that does not answer (a hung embeddings server, LLM_TIMEOUT_MS up to
 * 5 minutes): the stop must not wait for the provider. The batch is not written, and is applied at the next start.
 */

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };

for (const mode of ['thread', 'inline'] as const) {
  t.test(`a graceful stop does not wait for an embeddings provider that does not answer (projections: ${mode})`, async (t) => {
    const provider = await startOpenAiServer();
    t.teardown(() => provider.close());
    const env = {
      EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: provider.url, LLM_TIMEOUT_MS: '300000', CONSISTENCY_TIMEOUT_MS: '500',
      PROJECTIONS_THREAD: mode === 'thread' ? 'true' : 'false',
    };
    const { lines, log } = capturingLogger();
    const app = await startTestCairn(env, { log });
    t.equal(app.projections.mode, mode);
    const scope = { agent: 'a', user: 'u' };
    provider.embeddings.push({ hang: true });
    const asked = provider.nextRequest();
    t.equal((await app.memory('/v1/memories', { method: 'POST', json: { scope, text: 'I take my coffee black' } })).status, 200);
    await asked; // memory-vectors' batch now waits for the provider, for up to 300 s

    const started = performance.now();
    await app.stop({ keepData: true });
    const took = performance.now() - started;
    // The stop takes the read-model wait (0.5 s): the runner's signal ends the provider call. Without it, the thread
    // was terminated after THREAD_STOP_TIMEOUT_MS, and inline runners waited for the provider's 300 s.
    t.ok(took < THREAD_STOP_TIMEOUT_MS, `stopped in ${Math.round(took)} ms, not after LLM_TIMEOUT_MS (300 s)`);
    t.notOk(lines.some((l) => l.msg.startsWith('the projection thread did not stop in time')), 'the thread stopped by itself');
    t.notOk(lines.some((l) => l.level >= 50), 'and no error was logged: a stop during a batch is no failure');
    await t.rejects(app.reads.listCheckpoints(), /not open/, 'and the stores are closed');

    // The batch was not written: the next start applies it (the provider answers now).
    const again = await startTestCairn(env, { dataDir: app.dataDir });
    t.teardown(async () => {
      await again.stop();
      rmSync(app.dataDir, { recursive: true, force: true });
    });
    const found = await again.memory('/v1/search', { method: 'POST', json: { scope, query: 'coffee', mode: 'semantic', limit: 1 } });
    t.equal(found.status, 200);
    t.equal((await found.json()).results[0]?.text, 'I take my coffee black', 'the vector was made and applied after the restart');
  });
}

/** A projection whose prepare waits for a provider call that never answers, ended only by its signal (as the HTTP embedder is). */
function waitingOnProvider(name: string) {
  let calls = 0;
  let hang = true;
  let called!: () => void;
  const first = new Promise<void>((resolve) => { called = resolve; });
  const projection: Projection = {
    name, collections: [{ name: `${name}_docs` }], canHandle: ['Wanted'],
    async prepare(_events, _log, _reads, signal) {
      calls++;
      called();
      if (!hang) return;
      await new Promise<void>((_, reject) => {
        if (signal?.aborted) reject(signal.reason);
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    },
    async apply(e, w) { await w.put(`${name}_docs`, { id: e.id }, e.position); },
  };
  return { projection, first, calls: () => calls, answer: () => { hang = false; } };
}

function stores(t: Test) {
  const dir = tempDir(t, 'cairn-projection-stop-');
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); });
  return { events, reads };
}

t.test('a runner stopped or paused while its batch is prepared ends the provider call, records no failure, and applies the batch when it starts again', async (t) => {
  const { events, reads } = stores(t);
  const { projection, first, calls, answer } = waitingOnProvider('prepared');
  const failures: unknown[] = [];
  const runner = new ProjectionRunner(projection, events, reads);
  runner.onFailure((f) => failures.push(f));
  await runner.start();
  const wanted = await events.append('a', [{ id: randomUUID(), type: 'Wanted', data: {}, metadata }], 'no_stream');
  await first;

  let started = performance.now();
  const paused = await Promise.race([runner.pause().then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 5000))]);
  t.ok(paused, `paused in ${Math.round(performance.now() - started)} ms, not when the provider answers (never)`);
  t.equal((await reads.checkpoint('prepared')).position, 0, 'nothing of the batch was written');
  await runner.resume();
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(calls(), 2, 'resumed: the batch is prepared again');

  started = performance.now();
  const stopped = await Promise.race([runner.stop().then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 5000))]);
  t.ok(stopped, `stopped in ${Math.round(performance.now() - started)} ms`);
  t.strictSame(failures, [], 'a stop or pause is no failure');
  t.notOk('failure' in (await reads.checkpoint('prepared')), 'none recorded beside the checkpoint');

  answer();
  const next = new ProjectionRunner(projection, events, reads);
  await next.start();
  await next.waitFor(wanted.position, 5000);
  t.ok(await reads.get('prepared_docs', (await events.readAll(0))[0]!.id), 'applied once started again');
  await next.stop();
});

t.test('a rebuild stopped while its batch is prepared ends the provider call and leaves nothing behind', async (t) => {
  const { events, reads } = stores(t);
  const { projection, first } = waitingOnProvider('rebuilt');
  await reads.register('rebuilt', projection.collections);
  await events.append('a', [{ id: randomUUID(), type: 'Wanted', data: {}, metadata }], 'no_stream');
  const abort = new AbortController();
  const rebuild = rebuildProjection(events, reads, projection, undefined, abort.signal);
  await first;
  const started = performance.now();
  abort.abort(new Error('stopped by the operator'));
  const ended = await Promise.race([rebuild.then(() => 'swapped', (error: Error) => error.message), new Promise((resolve) => setTimeout(() => resolve('still waiting'), 5000))]);
  t.equal(ended, 'stopped by the operator', `ended by the signal in ${Math.round(performance.now() - started)} ms`);
  t.equal(await reads.rebuildCheckpoint('rebuilt'), undefined, 'its unfinished generation is dropped');
  t.equal((await reads.checkpoint('rebuilt')).generation, 1, 'the live one is unchanged');
});

import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import type { Projection } from '../../projections/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';
import { until } from '../support/logs.js';

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = (type: string) => ({ id: randomUUID(), type, data: {}, metadata });

t.test('the idle checkpoint, queued behind a slow batch commit, never moves the stored checkpoint back', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-runner-cp-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  // The batch with documents is held after its commit (a slow MongoDB round trip) until the idle
  // checkpoint of an earlier, ignored event has been taken and queued behind it.
  let release!: () => void;
  const held = new Promise<void>((resolve) => { release = resolve; });
  const stored: number[] = [];
  const slow = new Proxy(reads, {
    get(target, prop) {
      if (prop === 'applyBatch') {
        return async (...args: Parameters<ReadStore['applyBatch']>) => {
          let documents = false;
          const [name, expected, position, fn, rebuild] = args;
          const ok = await target.applyBatch(name, expected, position, async (w) => fn({ ...w, put: async (...p: Parameters<typeof w.put>) => { documents = true; return w.put(...p); } }), rebuild);
          stored.push(position);
          if (documents) await held;
          return ok;
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const projection: Projection = {
    name: 'toy', collections: [{ name: 'toy_docs' }], canHandle: ['Wanted'],
    async apply(e, w) { await w.put('toy_docs', { id: e.id }, e.position); },
  };
  const runner = new ProjectionRunner(projection, events, slow);
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  await runner.start();
  const ignored = await events.append('a', [event('Other')], 'no_stream'); // passed: its checkpoint is stored lazily
  await runner.waitFor(ignored.position, 5000);
  // The idle checkpoint's timer (private: nothing else tells when it fired) is set once the ignored event is passed.
  const idleTimer = () => (runner as unknown as { persistTimer: NodeJS.Timeout | undefined }).persistTimer;
  t.ok(idleTimer(), 'an idle checkpoint is scheduled for the ignored event');
  const wanted = await events.append('b', [event('Wanted')], 'no_stream'); // applied; its commit is held
  await until('the batch of the wanted event is committed and held', () => stored.length === 1);
  // The idle checkpoint fires within a second of the first event and queues behind the held commit: waited
  // for, not slept on, so a loaded machine that fires it late cannot let the test pass without the race.
  await until('the idle checkpoint has fired', () => idleTimer() === undefined, 10_000);
  release();
  await runner.waitFor(wanted.position, 5000);
  await runner.stop(); // drains the queued writes
  t.equal((await reads.checkpoint('toy')).position, wanted.position, 'the stored checkpoint is the applied one');
  t.same(stored, [wanted.position], 'the idle checkpoint found nothing left to store');
});

t.test('a batch that fails before its commit is retried without resetting the projection\'s in-process state', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-runner-reset-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  let failures = 2;
  let resets = 0;
  let afterCommitFailures = 0;
  const projection: Projection = {
    name: 'flaky', collections: [{ name: 'flaky_docs' }], canHandle: ['Wanted'],
    // An embeddings provider that is down for a while: prepare fails, nothing is written.
    async prepare() { if (failures-- > 0) throw new Error('provider down'); },
    async apply(e, w) { await w.put('flaky_docs', { id: e.id }, e.position); },
    afterCommit() { if (afterCommitFailures > 0) { afterCommitFailures--; throw new Error('index update failed'); } },
    async reset() { resets++; },
  };
  const runner = new ProjectionRunner(projection, events, reads);
  await runner.start();
  t.equal(resets, 1, 'reset once at start');
  const first = await events.append('a', [event('Wanted')], 'no_stream');
  await runner.waitFor(first.position, 10_000);
  t.equal(resets, 1, 'two failed attempts, retried from the checkpoint, reset nothing');
  // A failure after the commit (the in-process state may be half updated) does reset.
  afterCommitFailures = 1;
  const second = await events.append('b', [event('Wanted')], 'no_stream');
  await runner.waitFor(second.position, 10_000);
  await until('the in-process state is reset', () => resets >= 2, 10_000);
  t.equal(resets, 2, 'a failure in afterCommit resets the in-process state (once)');
  t.equal(afterCommitFailures, 0, 'afterCommit did fail');
  // Later failures before a commit (the provider down again) reset nothing again: the index is not reloaded in full on every retry.
  failures = 2;
  const third = await events.append('c', [event('Wanted')], 'no_stream');
  await runner.waitFor(third.position, 10_000);
  t.equal(failures, -1, 'prepare failed twice more');
  t.equal(resets, 2, 'and those retries reset nothing');
  await runner.stop();
});

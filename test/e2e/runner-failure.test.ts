import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import { ProviderError } from '../../infra/providers/http.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { ProjectionFailure } from '../../infra/readstore/port.js';
import type { Projection } from '../../projections/projection.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { ProjectionRunner, retryDelay } from '../../projections/runner.js';
import { capturingLogger } from '../support/logs.js';

/** How a runner reports its failures: in memory (what /readyz shows) and beside its checkpoint (what `ops projections status` shows). */

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = (type: string) => ({ id: randomUUID(), type, data: {}, metadata });

function stores(t: Test) {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-runner-failure-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  return { events, reads };
}

/** The failures a runner reports, in order (null: over), and a way to wait for one. */
function watch(runner: ProjectionRunner) {
  const seen: Array<ProjectionFailure | null> = [];
  const waiting = new Set<() => void>();
  runner.onFailure((failure) => {
    seen.push(failure);
    for (const check of waiting) check();
  });
  const until = (test: (f: ProjectionFailure | null) => boolean, timeoutMs = 10_000) => new Promise<void>((resolve, reject) => {
    const check = () => {
      if (!seen.some(test)) return;
      clearTimeout(timer);
      waiting.delete(check);
      resolve();
    };
    const timer = setTimeout(() => { waiting.delete(check); reject(new Error(`not reported within ${timeoutMs} ms: ${JSON.stringify(seen)}`)); }, timeoutMs);
    waiting.add(check);
    check();
  });
  return { seen, until };
}

const flaky = (name: string, fail: () => boolean | Promise<boolean>, error: () => Error): Projection => ({
  name, collections: [{ name: `${name}_docs` }], canHandle: ['Wanted'],
  async prepare() { if (await fail()) throw error(); },
  async apply(e, w) { await w.put(`${name}_docs`, { id: e.id }, e.position); },
});

t.test('a failing batch is counted, sanitized, recorded beside the checkpoint, and over once that batch is applied', async (t) => {
  const { events, reads } = stores(t);
  let failures = 3;
  // The third attempt is held until the record beside the checkpoint has been compared: the runner reports a failure
  // first (health, /readyz) and records it after (queued with its commits), and its next attempt (100 ms later here)
  // counts on. A poll that a loaded machine delays past that attempt never sees count 2 stored (it saw 3, then nothing).
  let release!: () => void;
  const held = new Promise<void>((resolve) => { release = resolve; });
  const projection = flaky('flaky', async () => {
    if (failures === 1) await held;
    return failures-- > 0;
  }, () => new ProviderError('embeddings',
    'embeddings provider unreachable (https://user:hunter2@embed.example/v1/embeddings?api-key=sk-abcdefgh1234): connect ECONNREFUSED\n    at TCPConnectWrap.afterConnect'));
  // A short quiet period: it must not end a failure inside a batch (only applying the batch does). Short retries.
  const runner = new ProjectionRunner(projection, events, reads, undefined, { recoveredAfterMs: 50, retryDelayMs: 50 });
  const reported = watch(runner);
  await runner.start();
  t.equal(runner.failure, undefined, 'not failing at start');
  const wanted = await events.append('a', [event('Wanted')], 'no_stream');

  await reported.until((f) => f?.count === 2);
  const failing = runner.failure!;
  t.match(failing, { count: 2, since: reported.seen[0]!.since, last_at: String });
  t.equal(failing.message, 'ProviderError: embeddings provider unreachable (https://[redacted]@embed.example/v1/embeddings?[redacted]): connect ECONNREFUSED',
    'class and first line only, the URL\'s credentials and query redacted');
  let stored = (await reads.checkpoint('flaky')).failure;
  for (let i = 0; i < 500 && stored?.count !== 2; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    stored = (await reads.checkpoint('flaky')).failure;
  }
  t.strictSame(stored, failing, 'recorded beside the checkpoint, for the operator CLI: the same failure, field for field');
  t.strictSame(runner.failure, failing, 'and the runner still reports that one (its next attempt is held)');
  release();

  await runner.waitFor(wanted.position, 10_000);
  t.equal(runner.failure, undefined, 'over: the batch that failed is applied');
  t.same(reported.seen.map((f) => f?.count ?? null), [1, 2, 3, null], 'counted in a row, then over; never over in between');
  t.ok(reported.seen.slice(0, 3).every((f) => f!.since === failing.since), 'since the first failure');
  await runner.stop(); // drains the store writes
  t.notOk('failure' in (await reads.checkpoint('flaky')), 'cleared beside the checkpoint too');
});

/** The read store as the runner sees it: its first `lose.failing` records of a failure, and `lose.over` of none, fail (busy, a primary stepping down). */
function losingRecords(reads: EmbeddedReadStore, lose: { failing: number; over: number }): EmbeddedReadStore {
  return new Proxy(reads, {
    get(target, prop) {
      if (prop === 'recordFailure') {
        return async (name: string, failure: ProjectionFailure | null) => {
          if (failure ? lose.failing-- > 0 : lose.over-- > 0) throw new Error('SqliteError: database is locked');
          return target.recordFailure(name, failure);
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** The failure recorded beside `name`'s checkpoint once `want` holds of it, or as it is after 5 s. */
async function recorded(reads: EmbeddedReadStore, name: string, want: (f: ProjectionFailure | undefined) => boolean) {
  let failure = (await reads.checkpoint(name)).failure;
  for (let i = 0; i < 250 && !want(failure); i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    failure = (await reads.checkpoint(name)).failure;
  }
  return failure;
}

t.test('a failure record whose write fails is written again: ops status neither misses a failure nor keeps one that is over', async (t) => {
  const { events, reads } = stores(t);
  const { lines, log } = capturingLogger();

  // The batch's next attempt is 10 s away: until then only writing the record again shows the failure.
  const lose = { failing: 1, over: 1 };
  const slow = new ProjectionRunner(poisonable('missed', () => true).projection, events, losingRecords(reads, lose), log, { retryDelayMs: 10_000 });
  const slowly = watch(slow);
  await slow.start();
  await events.append('a', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await slowly.until((f) => f?.count === 1);
  t.match(await recorded(reads, 'missed', (f) => f !== undefined), { count: 1, message: /^poison/ }, 'recorded within 5 s although its first write failed');
  t.equal(lose.failing, -1, 'written twice: the first write failed');
  await slow.stop();

  // Past the failure, the write clearing it fails once: ops status showed it failing until its next failure, if ever.
  let poisoned = true;
  const lost = { failing: 0, over: 1 };
  const runner = new ProjectionRunner(poisonable('over', () => poisoned).projection, events, losingRecords(reads, lost), log, { retryDelayMs: 50 });
  const reported = watch(runner);
  await runner.start();
  const poison = await events.append('b', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until((f) => f?.count === 2);
  t.match(await recorded(reads, 'over', (f) => f !== undefined), { message: /^poison/ }, 'failing, recorded');
  poisoned = false;
  await runner.waitFor(poison.position, 10_000);
  await reported.until((f) => f === null);
  t.equal(await recorded(reads, 'over', (f) => f === undefined), undefined, 'cleared within 5 s of being over, although the write clearing it failed');
  t.equal(lost.over, -1, 'written twice: the first write failed');
  t.equal(lines.filter((l) => l.msg.startsWith('could not record the projection\'s failure')).length, 2, 'each lost write is logged');
  await runner.stop();
});

t.test('a failure outside a batch (reading the log) is over once the retried subscription runs quietly', async (t) => {
  const { events, reads } = stores(t);
  let broken = 1;
  const unreachable = new Proxy(events, {
    get(target, prop) {
      if (prop === 'subscribeToAll') {
        return (...args: Parameters<EventStore['subscribeToAll']>) => {
          if (broken-- > 0) return (async function* () { throw new Error('event store unreachable'); })();
          return target.subscribeToAll(...args);
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const runner = new ProjectionRunner(flaky('idle', () => false, () => new Error('unused')), unreachable, reads, undefined, { recoveredAfterMs: 200 });
  const reported = watch(runner);
  await runner.start();
  await reported.until((f) => f === null);
  t.same(reported.seen.map((f) => f && { message: f.message, count: f.count }), [{ message: 'event store unreachable', count: 1 }, null],
    'reported, then over without any event to apply');
  const wanted = await events.append('a', [event('Wanted')], 'no_stream');
  await runner.waitFor(wanted.position, 5000);
  await runner.stop();
  t.notOk('failure' in (await reads.checkpoint('idle')));
});

t.test('a failure recorded before the runner started goes on: same since, counted on; over as any other', async (t) => {
  const { events, reads } = stores(t);
  const before = { message: 'ProviderError: embeddings provider answered 503', since: '2026-01-01T00:00:00.000Z', count: 5, last_at: '2026-01-01T00:01:00.000Z' };
  await reads.register('carried', [{ name: 'carried_docs' }]);
  await reads.recordFailure('carried', before);
  let failures = 1;
  const runner = new ProjectionRunner(flaky('carried', () => failures-- > 0, () => new Error('still down')), events, reads);
  const reported = watch(runner);
  await runner.start();
  t.same(runner.failure, before, 'failing from the start (a restarted thread, a restarted server)');
  const wanted = await events.append('a', [event('Wanted')], 'no_stream');
  await reported.until((f) => f?.count === 6);
  t.match(runner.failure, { message: 'still down', since: before.since, count: 6 });
  await runner.waitFor(wanted.position, 10_000);
  t.equal(runner.failure, undefined);
  await runner.stop();
  t.notOk('failure' in (await reads.checkpoint('carried')));

  // Nothing to apply: the stale record is over once the subscription has run quietly.
  await reads.register('stale', [{ name: 'stale_docs' }]);
  await reads.recordFailure('stale', before);
  const idle = new ProjectionRunner(flaky('stale', () => false, () => new Error('unused')), events, reads, undefined, { recoveredAfterMs: 100 });
  const idleReported = watch(idle);
  await idle.start();
  await idleReported.until((f) => f === null);
  t.same(idleReported.seen, [before, null]);
  await idle.stop();
  t.notOk('failure' in (await reads.checkpoint('stale')));
});

t.test('an event whose apply fails is named: by type and position in the failure, with its stream and id in the log', async (t) => {
  const { events, reads } = stores(t);
  const { lines, log } = capturingLogger();
  let poisoned = true;
  const projection: Projection = {
    name: 'poisoned', collections: [{ name: 'poisoned_docs' }], canHandle: ['Wanted'],
    async apply(e, w) {
      if (poisoned && (e.data as { poison?: boolean }).poison) throw new TypeError('Cannot read properties of undefined (reading \'text\')');
      await w.put('poisoned_docs', { id: e.id }, e.position);
    },
  };
  const runner = new ProjectionRunner(projection, events, reads, log, { retryDelayMs: 50 });
  const reported = watch(runner);
  await runner.start();
  // One batch: a good event, then the poison one.
  const appended = await events.append('scope-a', [event('Wanted'), { ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until((f) => f !== null);
  const message = `TypeError: Cannot read properties of undefined (reading 'text') (applying Wanted at position ${appended.position})`;
  t.equal(runner.failure!.message, message, 'the failure names the event by type and position (/readyz is public: no stream)');
  const failed = lines.find((l) => l.msg === 'projection failed; retrying from its checkpoint')!;
  t.match(failed, { projection: 'poisoned', event: { position: appended.position, type: 'Wanted', stream: 'scope-a', id: String } }, 'the log has the event, with its stream and id');
  let stored = (await reads.checkpoint('poisoned')).failure;
  for (let i = 0; i < 100 && stored === undefined; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    stored = (await reads.checkpoint('poisoned')).failure;
  }
  t.equal(stored?.message, message, 'and so does the failure beside the checkpoint (ops projections status)');
  t.equal((await reads.checkpoint('poisoned')).position, appended.position - 2, 'the batch was not committed');

  await reported.until((f) => f !== null && f.count >= 3);
  const logged = lines.filter((l) => /^projection (still )?failing|^projection failed/.test(l.msg));
  t.equal(logged.length, 1, 'retried again and again, the same failure is logged once (then once a minute), not on every attempt');
  t.match(failed, { retry_in_ms: 50 }, 'with the wait before the next attempt');

  poisoned = false; // a fixed projection
  await runner.waitFor(appended.position, 10_000);
  t.equal(runner.failure, undefined);
  t.match(lines.find((l) => l.msg === 'projection recovered'), { projection: 'poisoned', attempts: Number }, 'its end is logged');
  await runner.stop();
});

/** A projection that fails on every event marked `poison` while `poisoned()`; the times of its failed attempts. */
function poisonable(name: string, poisoned: () => boolean) {
  const attempts: number[] = [];
  const projection: Projection = {
    name, collections: [{ name: `${name}_docs` }], canHandle: ['Wanted'],
    async apply(e, w) {
      if (poisoned() && (e.data as { poison?: boolean }).poison) {
        attempts.push(performance.now());
        throw new Error('poison');
      }
      await w.put(`${name}_docs`, { id: e.id }, e.position);
    },
  };
  const gaps = (from = 0) => attempts.slice(from + 1).map((at, i) => Math.round(at - attempts[from + i]!));
  return { projection, attempts, gaps };
}

t.test('a poison event is retried after waits that double up to a cap, back to the first once the runner is past it', async (t) => {
  const { events, reads } = stores(t);
  let poisoned = true;
  const { projection, attempts, gaps } = poisonable('backoff', () => poisoned);
  // The waits: 50, 100, 200, 400 ms, then 400 ms each (uncapped they would go on to 800, 1,600 ms).
  const runner = new ProjectionRunner(projection, events, reads, undefined, { retryDelayMs: 50, retryDelayMaxMs: 400 });
  const reported = watch(runner);
  await runner.start();
  const poison = await events.append('a', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until((f) => f?.count === 7);
  const waited = gaps();
  t.comment(`waits between attempts: ${waited.join(', ')} ms`);
  [50, 100, 200, 400, 400, 400].forEach((wait, i) => t.ok(waited[i]! >= wait - 2, `wait ${i + 1} is at least ${wait} ms (${waited[i]})`));
  t.ok(waited[0]! < 400, `the first wait is the first delay, not a second (${waited[0]} ms)`);
  t.ok(waited[5]! < 1200, `the sixth wait is capped at 400 ms, not 1,600 (${waited[5]} ms)`);
  // What was reported, not runner.failure: a stall of the test past the next wait (400 ms) would let an eighth attempt count on.
  t.same(reported.seen.slice(0, 7).map((f) => f?.count), [1, 2, 3, 4, 5, 6, 7], 'every attempt is counted, as before');
  t.match(reported.seen[6], { message: `poison (applying Wanted at position ${poison.position})` });
  let stored = (await reads.checkpoint('backoff')).failure;
  for (let i = 0; i < 100 && (stored?.count ?? 0) < 7; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    stored = (await reads.checkpoint('backoff')).failure;
  }
  t.ok(stored && stored.count >= 7, 'and recorded beside the checkpoint (ops projections status)');

  poisoned = false; // the projection is fixed: applied at the next attempt, at most 400 ms later
  await runner.waitFor(poison.position, 5000);
  t.equal(runner.failure, undefined, 'past it');

  // A new failure starts again from the first delay.
  poisoned = true;
  const before = attempts.length;
  await events.append('b', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until(() => attempts.length >= before + 3);
  const again = gaps(before);
  t.ok(again[0]! < 400 && again[1]! < 600, `waits start at 50 ms again after progress (${again.join(', ')} ms)`);
  await runner.stop();
});

t.test('a pause, resume or stop does not wait for the wait before a retry', async (t) => {
  const { events, reads } = stores(t);
  const { projection, attempts } = poisonable('patient', () => true);
  // The first wait is 10 s, the next ones 20 s, 40 s…: the test would time out waiting for any of them.
  const runner = new ProjectionRunner(projection, events, reads, undefined, { retryDelayMs: 10_000 });
  const reported = watch(runner);
  await runner.start();
  await events.append('a', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until((f) => f?.count === 1);

  let started = performance.now();
  await runner.pause();
  // Bounds well under the waits (10 s, then 20 s) they tell apart, not near the time it takes (ms): a loaded machine does not fail them.
  t.ok(performance.now() - started < 5000, `paused at once during the 10 s wait (${Math.round(performance.now() - started)} ms)`);
  t.equal(attempts.length, 1, 'no attempt while paused');
  await runner.resume();
  await reported.until((f) => f?.count === 2, 5000);
  t.pass('resumed: retried at once, not after the wait');
  started = performance.now();
  await runner.stop();
  t.ok(performance.now() - started < 10_000, `stopped at once during the 20 s wait (${Math.round(performance.now() - started)} ms)`);
  t.equal(attempts.length, 2);
});

t.test('a rebuild swapped in while a failing runner waits before its retry is taken up then, not after the wait', async (t) => {
  const { events, reads } = stores(t);
  const { projection, attempts } = poisonable('swapped', () => true);
  // Waits of 100, 200, 400, 800, 1,600, then 3,200 ms; the stored checkpoint is looked at every 100 ms meanwhile.
  const runner = new ProjectionRunner(projection, events, reads, undefined, { retryDelayMs: 100 });
  const reported = watch(runner);
  await runner.start();
  const poison = await events.append('a', [{ ...event('Wanted'), data: { poison: true } }], 'no_stream');
  await reported.until((f) => f?.count === 6);
  // The operator's fix: a rebuild with a projection that applies the event (as `ops projections rebuild` with fixed code).
  const { projection: fixed } = poisonable('swapped', () => false);
  const swapped = await rebuildProjection(events, reads, fixed);
  const at = performance.now();
  t.ok(swapped.position >= poison.position, 'the rebuilt generation has the event');
  await runner.waitFor(poison.position, 2500);
  t.ok(performance.now() - at < 2500, `the runner follows the swap within ${Math.round(performance.now() - at)} ms, during a wait of 3.2 s`);
  t.equal(attempts.length, 6, 'without another attempt at the poison event');
  await reported.until((f) => f === null);
  t.equal(runner.failure, undefined, 'and is past the failure: the rebuilt generation starts without it');
  await runner.stop();
});

t.test('retry waits: 1 s doubling to 60 s; a model provider\'s failure (it heals by itself) at most 10 s', async (t) => {
  const waits = (error: unknown) => Array.from({ length: 9 }, (_, i) => retryDelay(i + 1, error));
  t.same(waits(new Error('poison')), [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000]);
  t.same(waits(new ProviderError('embeddings', 'embeddings provider answered 503')), [1000, 2000, 4000, 8000, 10_000, 10_000, 10_000, 10_000, 10_000]);
  t.equal(retryDelay(1000, new Error('x')), 60_000, 'no overflow after many attempts');
  t.same([retryDelay(3, new Error('x'), 50, 400), retryDelay(5, new ProviderError('chat', 'down'), 50, 400)], [200, 400], 'the options shorten both (tests)');
});

import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { promiseHooks } from 'node:v8';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { Projection } from '../../projections/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';
import { rebuildProjection } from '../../projections/rebuild.js';

/**
 * A runner waiting for its next event looks at its stored checkpoint every CHECKPOINT_CHECK_MS (a rebuild swapped in).
 * A projection whose events are rare waits for days: each look must leave nothing behind on the subscription's pending
 * `next()`, which only an event releases (a Promise.race per look added a reaction to it every look, for ever).
 */

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = (type: string) => ({ id: randomUUID(), type, data: {}, metadata });
const CHECK_MS = 5;

t.test('a runner that waits long for an event holds no more on the pending next() than when it began', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-runner-idle-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  const projection: Projection = {
    name: 'rare', collections: [{ name: 'rare_docs' }], canHandle: ['Rare'],
    async apply(e, w) { await w.put('rare_docs', { id: e.id }, e.position); },
  };
  const runner = new ProjectionRunner(projection, events, reads, undefined, { checkpointCheckMs: CHECK_MS });
  await runner.start();
  const first = await events.append('rare-1', [event('Rare')], 'no_stream');
  await runner.waitFor(first.position, 5000);

  // Promises made on another one (then, await, Promise.race) while the runner waits, counted by the promise they wait on.
  const children = new WeakMap<Promise<unknown>, number>();
  let most = 0;
  const stopCounting = promiseHooks.onInit((_promise, parent) => {
    if (!parent) return;
    const n = (children.get(parent) ?? 0) + 1;
    children.set(parent, n);
    most = Math.max(most, n);
  });
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 200 * CHECK_MS));
  stopCounting();
  const checks = Math.floor((performance.now() - started) / CHECK_MS);
  t.ok(checks >= 100, `the wait spanned many checks (${checks})`);
  t.ok(most <= 5, `no promise gathered a reaction per check (most on one: ${most})`);

  // The runner still takes the next event, and still finds a rebuild swapped in while it waits.
  const second = await events.append('rare-2', [event('Rare')], 'no_stream');
  await runner.waitFor(second.position, 5000);
  const rebuilt = await rebuildProjection(events, reads, projection);
  const third = await events.append('rare-3', [event('Rare')], 'no_stream');
  await runner.waitFor(third.position, 5000);
  await runner.stop();
  const checkpoint = await reads.checkpoint('rare');
  t.equal(checkpoint.generation, rebuilt.generation, 'the runner went on in the rebuilt generation');
  t.equal(checkpoint.position, third.position);
  t.equal((await reads.find('rare_docs', {})).items.length, 3, 'every event applied once, in the live generation');
});

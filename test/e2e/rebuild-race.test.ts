import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { configStream } from '../../domain/config/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { CheckpointInfo, ReadStore } from '../../infra/readstore/port.js';
import { configDocId, configProjection } from '../../projections/config/projection.js';
import { rebuildProjection, RebuildSupersededError } from '../../projections/rebuild.js';
import { ProjectionRunner } from '../../projections/runner.js';

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const setValue = (key: string, value: unknown) => ({
  id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'p', key, value, set_at: '2026-01-01T00:00:00.000Z' }, metadata,
});

t.test('a rebuild is swapped in only once it has every event the live runner applied', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-rebuild-race-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  const live = new ProjectionRunner(configProjection, events, reads);
  t.teardown(async () => { await live.stop(); await reads.close(); await events.close(); });
  await live.start();
  let at = await events.append(configStream('p'), [setValue('a', 1), setValue('b', 2)], 'no_stream');
  await live.waitFor(at.position, 5000);

  // An event arrives after the rebuild's last read and before its swap; the live runner applies it to
  // the old generation and reports its position, so a reader waiting for it is let through.
  let late: number | undefined;
  const racing = new Proxy(reads, {
    get(target, property, receiver) {
      if (property !== 'finishRebuild') return Reflect.get(target, property, receiver);
      return async (...args: Parameters<ReadStore['finishRebuild']>) => {
        if (late === undefined) {
          at = await events.append(configStream('p'), [setValue('late', 3)], at.revision);
          late = at.position;
          await live.waitFor(late, 5000);
        }
        return target.finishRebuild(...args);
      };
    },
  }) as ReadStore;
  const swapped = await rebuildProjection(events, racing, configProjection);
  t.ok(late !== undefined, 'the late event came in between');
  t.ok(swapped.position >= late!, `the rebuilt generation went live at ${swapped.position}, not before ${late}`);
  t.ok(live.currentPosition >= late!);
  t.match(await reads.get('config_values', configDocId('p', 'late')), { value: 3 }, 'the late value is in the live generation');
  t.match(await reads.get('config_values', configDocId('p', 'a')), { value: 1 });
});

/**
 * Two rebuilds of one projection at once (two `ops projections rebuild NAME`, or one and a node's own re-embedding
 * rebuild): each started a generation of its own, and the later start superseded the earlier. `first` reaches its swap
 * after `second` started; `second` (another process) is held at `hold` until the test lets it go.
 */
async function twoRebuilds(t: Test, hold: 'finishRebuild' | 'applyBatch', setUp?: (reads: EmbeddedReadStore) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-rebuild-race-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  const other = new EmbeddedReadStore(join(dir, 'readmodels.db'), { checkpointer: false });
  t.teardown(async () => { await other.close(); await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  await events.append(configStream('p'), [setValue('a', 1), setValue('b', 2)], 'no_stream');
  await reads.register(configProjection.name, configProjection.collections);
  await setUp?.(reads);
  const live = await reads.checkpoint(configProjection.name);

  let held!: () => void;
  const holding = new Promise<void>((resolve) => { held = resolve; });
  let release!: () => void;
  const released = new Promise<void>((resolve) => { release = resolve; });
  const secondStore = new Proxy(other, {
    get(target, property, receiver) {
      if (property !== hold) return Reflect.get(target, property, receiver);
      return async (...args: unknown[]) => {
        held();
        await released;
        return (target[hold] as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as ReadStore;
  let second: Promise<CheckpointInfo> | undefined;
  let secondStart: CheckpointInfo | undefined;
  const firstStore = new Proxy(reads, {
    get(target, property, receiver) {
      if (property !== 'finishRebuild') return Reflect.get(target, property, receiver);
      return async (...args: Parameters<ReadStore['finishRebuild']>) => {
        if (!second) {
          second = rebuildProjection(events, secondStore, configProjection);
          second.catch(() => undefined);
          await holding;
          secondStart = await other.rebuildCheckpoint(configProjection.name);
        }
        return target.finishRebuild(...args);
      };
    },
  }) as ReadStore;
  const first = await rebuildProjection(events, firstStore, configProjection).then((cp) => ({ cp }), (error: unknown) => ({ error }));
  return { reads, live, first, secondStart: secondStart!, finishSecond: () => { release(); return second!; } };
}

t.test('two rebuilds at once: the superseded one does not swap in the generation the other is still finishing', async (t) => {
  const { reads, live, first, secondStart, finishSecond } = await twoRebuilds(t, 'finishRebuild');
  t.match(secondStart, { position: 2, generation: live.generation + 2 }, 'the second rebuild has caught up and waits at its swap');
  t.match(first, { error: RebuildSupersededError }, 'the first fails as superseded, rather than report the other\'s generation as its own');
  t.same(await reads.checkpoint(configProjection.name), live, 'the live generation is unchanged meanwhile');
  const second = await finishSecond();
  t.match(second, { position: 2, generation: secondStart.generation }, 'the second swaps its own generation in');
  t.match(await reads.get('config_values', configDocId('p', 'b')), { value: 2 });
});

t.test('two rebuilds at once, the live checkpoint past the log\'s end: the superseded one does not swap in the other\'s empty generation', async (t) => {
  // A read model of a longer log (see readModelsAhead): each rebuild may swap in behind that checkpoint.
  const { reads, live, first, secondStart, finishSecond } = await twoRebuilds(t, 'applyBatch', async (reads) => {
    t.equal(await reads.applyBatch(configProjection.name, { position: 0, generation: 1 }, 40, async (w) => {
      await w.put('config_values', { id: configDocId('p', 'a'), value: 'from a longer log' }, 40);
    }), true);
  });
  t.match(secondStart, { position: 0 }, 'the second rebuild has started and not applied a batch yet');
  t.match(first, { error: RebuildSupersededError }, 'the first fails as superseded');
  t.same(await reads.checkpoint(configProjection.name), live, 'the live checkpoint is unchanged, not an empty generation at 0');
  t.match(await reads.get('config_values', configDocId('p', 'a')), { value: 'from a longer log' }, 'queries read what they read before');
  const second = await finishSecond();
  t.match(second, { position: 2, generation: secondStart.generation }, 'the second builds its generation and swaps it in');
  t.match(await reads.get('config_values', configDocId('p', 'a')), { value: 1 });
});

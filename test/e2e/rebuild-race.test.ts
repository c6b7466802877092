import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { configStream } from '../../domain/config/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { configDocId, configProjection } from '../../projections/config/projection.js';
import { rebuildProjection } from '../../projections/rebuild.js';
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
      return async (name: string) => {
        if (late === undefined) {
          at = await events.append(configStream('p'), [setValue('late', 3)], at.revision);
          late = at.position;
          await live.waitFor(late, 5000);
        }
        return target.finishRebuild(name);
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

import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream } from '../../domain/config/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';

const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};
const set = (value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key: 'k', value } });

t.test('commands pipeline on a hot stream, and recover when another writer moved it', async (t) => {
  const file = join(mkdtempSync(join(tmpdir(), 'cairn-bus-')), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file); // another process or node writing the same stream
  t.teardown(async () => { await store.close(); await other.close(); });
  const bus = new CommandBus(store);
  const stream = configStream('p');

  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => bus.handle(stream, configDecider, set(i), meta())));
  t.same(many.map((r) => r.revision), Array.from({ length: 20 }, (_, i) => i), 'twenty concurrent commands, no conflict, in order');

  // The bus's cached state is now stale: the other writer appended revision 20.
  await other.append(stream, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'p', key: 'k', value: 'x', set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 19);
  // The first is decided on the stale state and its append fails; the second decides "nothing to do"
  // on the first's optimistic state. Both must end up right, not with an error.
  const [first, second] = await Promise.all([bus.handle(stream, configDecider, set(100), meta()), bus.handle(stream, configDecider, set(100), meta())]);
  t.equal(first.revision, 21, 'retried after the conflict, on fresh state');
  t.same(second.events, [], 'the same value again: nothing appended');
  t.equal(second.position, first.position);
  const events = await store.readStream(stream);
  t.equal(events.length, 22);
  t.same(events.at(-1)!.data, { project_id: 'p', key: 'k', value: 100, set_at: events.at(-1)!.data.set_at });
});

import t from 'tap';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import type { Decider, DomainEvent } from '../../domain/shared/decider.js';
import { configDecider, configStream } from '../../domain/config/decider.js';
import { memoryDecider, memoryStream } from '../../domain/memory/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { tempDir } from '../support/temp.js';

const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};

type Added = DomainEvent<'Added', { n: number }>;
/** A list that grows by one item per command and says so as its size; it counts the events it applies (reads from the log included). */
function listDecider() {
  const applied = { count: 0 };
  const decider: Decider<number[], { n: number }, Added> = {
    initialState: () => [],
    decide: (command) => [{ type: 'Added', data: { n: command.n } }],
    evolve: (state, event) => {
      applied.count++;
      return [...state, event.data.n];
    },
    size: (state) => state.length,
  };
  return { decider, applied };
}

t.test('the cached states are bounded by their weight: the least recently written go first, and are read again from the log', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store, undefined, { maxEntries: 100, maxWeight: 10 });
  const { decider, applied } = listDecider();
  for (let n = 0; n < 5; n++) await bus.handle('a', decider, { n }, meta());
  for (let n = 0; n < 5; n++) await bus.handle('b', decider, { n }, meta());
  t.strictSame(bus.cacheStats, { entries: 2, weight: 10 }, 'exactly at the limit: both kept');
  applied.count = 0;
  await bus.handle('a', decider, { n: 5 }, meta());
  t.equal(applied.count, 1, 'a was cached: only its new event was applied');
  t.strictSame(bus.cacheStats, { entries: 1, weight: 6 }, 'one past the limit: b, the least recently written, went');
  applied.count = 0;
  const b = await bus.handle('b', decider, { n: 5 }, meta());
  t.equal(applied.count, 6, 'b was read again from the log (5 events) before its new one was applied');
  t.strictSame(b.state, [0, 1, 2, 3, 4, 5], 'and decided on the log\'s state');
  t.strictSame(bus.cacheStats, { entries: 1, weight: 6 }, 'a went in turn');
});

t.test('a state heavier than the whole budget is still cached: its stream is not read again for every command', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store, undefined, { maxEntries: 100, maxWeight: 3 });
  const { decider, applied } = listDecider();
  for (let n = 0; n < 8; n++) await bus.handle('big', decider, { n }, meta());
  t.equal(applied.count, 8, 'each event applied once');
  t.strictSame(bus.cacheStats, { entries: 1, weight: 8 });
  await bus.handle('small', decider, { n: 0 }, meta());
  t.strictSame(bus.cacheStats, { entries: 1, weight: 1 }, 'the next stream written pushes it out');
});

t.test('the cached states are bounded by their number', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store, undefined, { maxEntries: 2, maxWeight: 1_000 });
  const { decider, applied } = listDecider();
  for (const stream of ['x', 'y']) await bus.handle(stream, decider, { n: 0 }, meta());
  t.strictSame(bus.cacheStats, { entries: 2, weight: 2 }, 'exactly at the limit');
  await bus.handle('z', decider, { n: 0 }, meta());
  t.strictSame(bus.cacheStats, { entries: 2, weight: 2 }, 'one past: x went');
  applied.count = 0;
  await bus.handle('x', decider, { n: 1 }, meta());
  t.equal(applied.count, 2, 'x read again from the log');
});

t.test('a memory scope weighs its live memories, also when its state is read again for an answer (CommandBus.state)', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const other = new CommandBus(store); // another node
  const scope = { agent: 'a', user: 'u' };
  const stream = memoryStream('a', 'u');
  for (let i = 0; i < 30; i++) await bus.handle(stream, memoryDecider, { type: 'StoreMemory', data: { ...scope, text: `fact ${i}` } }, meta());
  t.strictSame(bus.cacheStats, { entries: 1, weight: 31 }, 'thirty memories and the scope');
  await other.handle(stream, memoryDecider, { type: 'StoreMemory', data: { ...scope, text: 'fact 30' } }, meta());
  const { state } = await bus.state(stream, memoryDecider, meta());
  t.equal(state.memories.size, 31, 'the other node\'s memory read into the state');
  t.strictSame(bus.cacheStats, { entries: 1, weight: 32 }, 'weighed as it was read again');
});

t.test('a project\'s configuration weighs its keys', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  for (let i = 0; i < 12; i++) await bus.handle(configStream('p'), configDecider, { type: 'SetConfigValue', data: { project_id: 'p', key: `k${i}`, value: i } }, meta());
  t.strictSame(bus.cacheStats, { entries: 1, weight: 13 }, 'twelve keys and the project');
});

t.test('a scope updated many times weighs its memories, not its updates', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-cache-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const scope = { agent: 'a', user: 'u' };
  const stream = memoryStream('a', 'u');
  await Promise.all(Array.from({ length: 50 }, (_, i) => bus.handle(stream, memoryDecider, { type: 'StoreMemory', data: { ...scope, memory_id: 'm1', text: `version ${i}` } }, meta())));
  t.strictSame(bus.cacheStats, { entries: 1, weight: 3 }, 'one memory and the scope, plus the last update\'s one event as a bound');
});

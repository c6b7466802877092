import t from 'tap';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream, valueHash } from '../../domain/config/decider.js';
import type { Decider } from '../../domain/shared/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { StreamAppend } from '../../infra/eventstore/port.js';
import { tempDir } from '../support/temp.js';


const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};
const set = (value: unknown) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key: 'k', value } });

t.test('evolve throwing while a pending decision is applied leaves no half-applied state cached', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const stream = configStream('p');
  // An evolve that fails once (a bug met on one state, memory pressure…) on the event setting 'boom'.
  let armed = false;
  const fragile: typeof configDecider = {
    ...configDecider,
    evolve: (state, event) => {
      if (armed && event.type === 'ConfigValueSet' && event.data.value === 'boom') { armed = false; throw new Error('evolve failed'); }
      return configDecider.evolve(state, event);
    },
  };
  await bus.handle(stream, fragile, set(1), meta());
  armed = true;
  // The second is decided on the first's pending state, whose events are applied to the cached state then, and evolve throws.
  const [first, second] = await Promise.allSettled([bus.handle(stream, fragile, set('boom'), meta()), bus.handle(stream, fragile, set(2), meta())]);
  t.match(second, { status: 'rejected', reason: { message: 'evolve failed' } }, 'the command decided on it fails with evolve\'s error');
  if (first.status === 'fulfilled') t.ok(first.value.state, 'an answer that has a state'); // never a state of undefined
  t.strictSame((await store.readStream(stream)).map((e) => e.data.value), [1, 'boom'], 'the first was written, the second not');
  // The bus's state is the log's again: setting 3 is decided, written and seen.
  const third = await bus.handle(stream, fragile, set(3), meta());
  t.equal(third.events.length, 1);
  t.equal(third.state.values.get('k'), valueHash(3));
  const again = await bus.handle(stream, fragile, set('boom'), meta());
  t.equal(again.events.length, 1, '"boom" again is a change from 3');
  t.strictSame((await store.readStream(stream)).map((e) => e.data.value), [1, 'boom', 3, 'boom']);
});

/** A counter: every Increment appends one Incremented, whatever the stream (the stream is not in the command). */
const counter: Decider<{ n: number }, { type: 'Increment' }, { type: 'Incremented'; data: Record<string, never> }> = {
  initialState: () => ({ n: 0 }),
  decide: () => [{ type: 'Incremented', data: {} }],
  evolve: (state) => ({ n: state.n + 1 }),
};

t.test('event ids: two requests with different Idempotency-Keys on different streams never share an id, whatever the keys and streams hold', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const keyed = (key: string): RequestMeta => ({ ...meta(), request_key: `idem:${key}` });
  // Joined with '/': "idem:a/b" + "/" + "c" and "idem:a" + "/" + "b/c" are one name.
  const one = await bus.handle('c', counter, { type: 'Increment' }, keyed('a/b'));
  const two = await bus.handle('b/c', counter, { type: 'Increment' }, keyed('a'));
  t.strictSame([one.revision, two.revision], [0, 0]);
  const [c, bc] = [await store.readStream('c'), await store.readStream('b/c')];
  t.equal(bc.length, 1, 'the second request is written to its own stream');
  t.not(c[0]!.id, bc[0]!.id);
  // Escaping keeps distinct keys distinct: '%2F' sent as such is not '/'.
  const three = await bus.handle('x', counter, { type: 'Increment' }, keyed('a%2Fb'));
  const four = await bus.handle('x', counter, { type: 'Increment' }, keyed('a/b'));
  t.strictSame([three.revision, four.revision], [0, 1], 'both written');
  // And a repeat is still a replay.
  const repeat = await bus.handle('b/c', counter, { type: 'Increment' }, keyed('a'));
  t.strictSame([repeat.revision, repeat.position], [two.revision, two.position]);
  t.equal((await store.readStream('b/c')).length, 1);
});

t.test('handleAll: a step that changes nothing, decided behind an append that fails, leaves none of the call\'s other steps written', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-'), 'events.db'));
  t.teardown(() => store.close());
  // The next append to stream p fails (the writer died before writing it).
  let failNext = false;
  const failing = Object.assign(Object.create(store) as EmbeddedEventStore, {
    appendAll: async (appends: StreamAppend[]) => {
      if (failNext && appends.some((a) => a.stream === configStream('p'))) { failNext = false; throw new Error('store failed'); }
      return store.appendAll(appends);
    },
  });
  const bus = new CommandBus(failing);
  const [p, q] = [configStream('p'), configStream('q')];
  const setIn = (project: string, value: unknown) => ({ type: 'SetConfigValue' as const, data: { project_id: project, key: 'k', value } });
  await bus.handle(p, configDecider, setIn('p', 1), meta());
  failNext = true;
  // The pair is decided behind w's append: its step on p changes nothing on w's state, its step on q sets a value.
  const [w, pair] = await Promise.allSettled([
    bus.handle(p, configDecider, setIn('p', 5), meta()),
    bus.handleAll([{ stream: p, decider: configDecider, command: setIn('p', 5) }, { stream: q, decider: configDecider, command: setIn('q', 1) }], meta()),
  ]);
  t.match(w, { status: 'rejected', reason: { message: 'store failed' } });
  const written = await store.readStream(q);
  if (pair.status === 'rejected') t.strictSame(written, [], 'the pair failed: nothing of it is written');
  else {
    // Decided again, on the log's state: p = 5 is a change now, written in one transaction with q's event.
    t.equal(pair.value[1]!.events.length, 1);
    const onP = (await store.readStream(p)).filter((e) => e.metadata.correlation_id === written[0]!.metadata.correlation_id);
    t.strictSame(onP.map((e) => e.position + 1), [written[0]!.position], 'its steps committed together');
  }
  t.strictSame((await store.readStream(p)).map((e) => e.data.value), pair.status === 'rejected' ? [1] : [1, 5], 'p as the answer says');
});

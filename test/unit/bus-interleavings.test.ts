import t, { type Test } from 'tap';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream, type ConfigCommand, type ConfigEvent } from '../../domain/config/decider.js';
import { fold } from '../../domain/shared/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import type { EventStore, StreamAppend } from '../../infra/eventstore/port.js';
import { random } from '../contract/fixtures/writers.js';
import { tempDir } from '../support/temp.js';


/**
 * A run's seeded generator (the seed printed: BUS_SEED repeats the run; mulberry32, as the contract suite's writers)
 * and two event stores on one temporary file, the two nodes' logs.
 */
function twoNodes(t: Test) {
  const seed = Number(process.env.BUS_SEED ?? Date.now() % 1_000_000);
  t.comment(`seed ${seed} (BUS_SEED=${seed} repeats this run)`);
  const rnd = random(seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  t.teardown(async () => { await storeA.close(); await storeB.close(); });
  return { rnd, pick, storeA, storeB };
}

const values = (events: Array<{ type: string; data: Record<string, unknown> }>) => [...fold(configDecider, events as ConfigEvent[]).values.entries()].sort();

/** How node A's store misbehaves in a run: as it is, failing appends (before or after writing), or not checking the last event id (as EventStoreDB). */
type Wrap = (store: EmbeddedEventStore, rnd: () => number) => EventStore;

async function interleave(t: Test, wrap: Wrap) {
  const { rnd, pick, storeA, storeB } = twoNodes(t);
  const nodes = [new CommandBus(wrap(storeA, rnd), () => new Date('2026-01-01T00:00:00.000Z')), new CommandBus(storeB, () => new Date('2026-01-02T00:00:00.000Z'))];
  const stream = configStream('p');
  const keyed: Array<{ key: string; command: ConfigCommand }> = [];
  let conflicts = 0;
  let checked = 0;

  for (let round = 0; round < 12; round++) {
    const calls = Array.from({ length: 16 }, async () => {
      // Some spread: a command may be queued behind a pending append, or arrive after it was written.
      for (let n = Math.floor(rnd() * 3); n > 0; n--) await new Promise((resolve) => setImmediate(resolve));
      const node = pick(nodes);
      let command: ConfigCommand;
      let request_key: string = randomUUID();
      if (keyed.length > 0 && rnd() < 0.2) ({ key: request_key, command } = pick(keyed)); // a repeat
      else {
        const key = pick(['a', 'b', 'c']);
        command = rnd() < 0.3 ? { type: 'DeleteConfigValue', data: { project_id: 'p', key } } : { type: 'SetConfigValue', data: { project_id: 'p', key, value: pick([1, 2]) } };
        if (rnd() < 0.3) { request_key = `idem:${randomUUID()}`; keyed.push({ key: request_key, command }); }
      }
      const meta: RequestMeta = { correlation_id: request_key, causation_id: request_key, actor: 't', request_key, sequence: { next: 0 } };
      try {
        return { command, result: await node.handle(stream, configDecider, command, meta) };
      } catch (error) {
        if (error instanceof WrongExpectedVersionError) { conflicts++; return undefined; } // bounded retries ran out: a 409
        if ((error as { kind?: string }).kind === 'not_found') return undefined;
        if ((error as Error).message === 'store failed') return undefined; // the client got a 500
        throw error;
      }
    });
    const outcomes = await Promise.all(calls);
    const log = await storeA.readStream(stream);
    for (const outcome of outcomes) {
      if (!outcome) continue;
      const { command, result } = outcome;
      const upTo = log.slice(0, result.revision + 1);
      t.equal(upTo.at(-1)?.position ?? 0, result.position, 'the position is the log\'s at the answered revision');
      if (result.events.length > 0) {
        t.strictSame(result.events.map((e) => e.data), log.slice(result.revision - result.events.length + 1, result.revision + 1).map((e) => e.data), 'the events answered are the ones written');
      } else if (command.type === 'SetConfigValue') {
        t.ok(values(upTo).some(([k, v]) => k === command.data.key && v === fold(configDecider, [{ type: 'ConfigValueSet', data: { ...command.data, set_at: '' } }]).values.get(command.data.key)), 'nothing to change: the log held that value then');
      } else {
        t.notOk(values(upTo).some(([k]) => k === command.data.key), 'nothing to delete: the log did not hold the key then');
      }
      checked++;
    }
    for (const [i, node] of nodes.entries()) {
      const seen = await node.state(stream, configDecider, { correlation_id: 's', causation_id: 's', actor: 't', request_key: randomUUID(), sequence: { next: 0 } });
      t.strictSame([...seen.state.values.entries()].sort(), values(log), `round ${round}: node ${i}'s state is the log's`);
    }
  }
  t.comment(`${checked} answers checked, ${conflicts} gave up after bounded retries`);
}

t.test('random interleavings of commands on one stream through two nodes: every answer is what the log holds, and each node ends on the log\'s state', (t) =>
  interleave(t, (store) => store));

t.test('the same with node A\'s appends failing at random, before or after they are written (the outcome unknown to the bus)', (t) =>
  interleave(t, (store, rnd) => Object.assign(Object.create(store) as EmbeddedEventStore, {
    appendAll: async (appends: StreamAppend[]) => {
      const fate = rnd();
      if (fate < 0.1) throw new Error('store failed');
      const result = await store.appendAll(appends);
      if (fate < 0.2) throw new Error('store failed');
      return result;
    },
  })));

t.test('the same on a store that does not check the last event id (as EventStoreDB)', (t) =>
  interleave(t, (store) => Object.assign(Object.create(store) as EmbeddedEventStore, {
    verifiesLastEventId: false,
    appendAll: (appends: StreamAppend[]) => store.appendAll(appends.map(({ expectedLastEventId: _, ...rest }) => rest)),
  })));

t.test('random interleavings of handleAll over two streams and single commands, through two nodes, with node A\'s appends failing at random', async (t) => {
  const { rnd, pick, storeA, storeB } = twoNodes(t);
  const failing = Object.assign(Object.create(storeA) as EmbeddedEventStore, {
    appendAll: async (appends: StreamAppend[]) => {
      const fate = rnd();
      if (fate < 0.05) throw new Error('store failed');
      const result = await storeA.appendAll(appends);
      if (fate < 0.1) throw new Error('store failed');
      return result;
    },
  });
  const nodes = [new CommandBus(failing), new CommandBus(storeB)];
  const projects = ['p', 'q'];
  const keyed: Array<{ key: string; projects: string[]; commands: ConfigCommand[] }> = [];
  const command = (project: string): ConfigCommand => {
    const key = pick(['a', 'b']);
    return rnd() < 0.25 ? { type: 'DeleteConfigValue', data: { project_id: project, key } } : { type: 'SetConfigValue', data: { project_id: project, key, value: pick([1, 2]) } };
  };
  let checked = 0;
  for (let round = 0; round < 10; round++) {
    await Promise.all(Array.from({ length: 16 }, async () => {
      for (let n = Math.floor(rnd() * 3); n > 0; n--) await new Promise((resolve) => setImmediate(resolve));
      const node = pick(nodes);
      let request_key: string = randomUUID();
      let chosen: { projects: string[]; commands: ConfigCommand[] };
      if (keyed.length > 0 && rnd() < 0.2) ({ key: request_key, ...chosen } = pick(keyed));
      else {
        const which = rnd() < 0.5 ? projects : [pick(projects)];
        chosen = { projects: which, commands: which.map(command) };
        if (rnd() < 0.3) { request_key = `idem:${randomUUID()}`; keyed.push({ key: request_key, ...chosen }); }
      }
      // A correlation id per call (a repeat is another call): what one handleAll wrote is told apart from what its repeats write.
      const call = randomUUID();
      const meta: RequestMeta = { correlation_id: call, causation_id: call, actor: 't', request_key, sequence: { next: 0 } };
      let results;
      try {
        results = await node.handleAll(chosen.projects.map((p, i) => ({ stream: configStream(p), decider: configDecider, command: chosen.commands[i]! })), meta);
      } catch (error) {
        if (error instanceof WrongExpectedVersionError || (error as { kind?: string }).kind === 'not_found' || (error as Error).message === 'store failed') return;
        throw error;
      }
      for (const [i, result] of results.entries()) {
        const log = await storeA.readStream(configStream(chosen.projects[i]!));
        t.equal(log[result.revision]?.position ?? 0, result.position, 'the position is the log\'s at the answered revision');
        if (result.events.length > 0) t.strictSame(result.events.map((e) => e.data), log.slice(result.revision - result.events.length + 1, result.revision + 1).map((e) => e.data), 'the events answered are the ones written');
        checked++;
      }
    }));
    for (const [i, node] of nodes.entries()) {
      for (const p of projects) {
        const seen = await node.state(configStream(p), configDecider, { correlation_id: 's', causation_id: 's', actor: 't', request_key: randomUUID(), sequence: { next: 0 } });
        t.strictSame([...seen.state.values.entries()].sort(), values(await storeA.readStream(configStream(p))), `round ${round}: node ${i}'s state of ${p} is the log's`);
      }
    }
  }
  // One transaction per handleAll on the embedded log: the events of one call sit side by side in global order. (Not
  // per request: a keyed pair whose step on one stream changed nothing is not remembered there, so a repeat made after
  // that stream changed writes that step then: the config decider's rule, not the bus's.)
  const all = await storeA.readAll(0, { limit: 100_000 });
  const byRequest = new Map<string, number[]>();
  for (const e of all) byRequest.set(e.metadata.correlation_id, [...(byRequest.get(e.metadata.correlation_id) ?? []), e.position]);
  const split = [...byRequest.entries()].filter(([, ps]) => !ps.every((p, i) => i === 0 || p === ps[i - 1]! + 1));
  if (split.length) console.error(JSON.stringify(split.map(([c]) => all.filter((e) => e.metadata.correlation_id === c).map((e) => [e.position, e.stream, e.type, e.data.key, e.data.value])), null, 0));
  t.strictSame(split, [], 'no request\'s events are split by another\'s');
  t.comment(`${checked} answers checked`);
});

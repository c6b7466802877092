import t, { type Test } from 'tap';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { memoryDecider, memoryStream } from '../../domain/memory/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import type { StreamAppend } from '../../infra/eventstore/port.js';
import { tempDir } from '../support/temp.js';

/**
 * Two nodes writing one memory scope (two connections to one embedded log, as two servers on one DATA_DIR): node B
 * takes 8 concurrent writers' stores, and node A stores a memory of its own just before B's append of each of B's
 * commands that would otherwise be written, once per command. So every command of B meets one conflict with another
 * writer, no more: none of these commutative stores may end in a 409 (concurrency-conflict).
 *
 * The interleaving is fixed, not raced: B's appends reach its store one at a time, in the order B made them, each
 * once the one before it is answered (as a store that commits every append on its own), and A's write is committed
 * before B's append goes on. What the bus makes of it (which command is decided on which state) is its own.
 */
const scope = { agent: 'ava', user: 'u-contention' };
const stream = memoryStream(scope.agent, scope.user);
const meta = (actor: string): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor, request_key: id, sequence: { next: 0 } };
};
const store = (text: string) => ({ type: 'StoreMemory' as const, data: { ...scope, text, session: null } });

async function contend(t: Test, { checksLastEventId }: { checksLastEventId: boolean }) {
  const file = join(tempDir(t, 'cairn-bus-contention-'), 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  t.teardown(async () => { await storeA.close(); await storeB.close(); });
  const nodeA = new CommandBus(storeA);

  const appends = new Map<string, number>(); // appends sent per command (its first event id: the same on every attempt)
  const met = new Set<string>();
  let ownConflicts = 0; // B's appends decided on a state the log holds, that B's own appends got ahead of
  let turn: Promise<unknown> = Promise.resolve();
  const viaB = Object.assign(Object.create(storeB) as EmbeddedEventStore, {
    verifiesLastEventId: checksLastEventId,
    appendAll: (sent: StreamAppend[]) => {
      const command = sent[0]!.events[0]!.id;
      appends.set(command, (appends.get(command) ?? 0) + 1);
      const answered = turn.then(async () => {
        const { expected, expectedLastEventId } = sent[0]!;
        const head = await storeB.streamInfo(stream);
        const last = head ? (await storeB.readStream(stream, { fromRevision: head.revision, limit: 1 }))[0]!.id : undefined;
        const wouldBeWritten = expected === (head ? head.revision : 'no_stream') && expectedLastEventId === last;
        if (!wouldBeWritten && expected !== 'no_stream') {
          const [base, next] = await storeB.readStream(stream, { fromRevision: expected as number, limit: 2 });
          if (base?.id === expectedLastEventId && next?.metadata.actor === 'node-b') ownConflicts++;
        }
        if (wouldBeWritten && !met.has(command)) {
          met.add(command);
          await nodeA.handle(stream, memoryDecider, store(`A, just before ${command}`), meta('node-a'));
        }
        // A store that does not check the last event id (as EventStoreDB) is not sent it.
        return storeB.appendAll(checksLastEventId ? sent : sent.map(({ expectedLastEventId: _, ...rest }) => rest));
      });
      turn = answered.catch(() => undefined);
      return answered;
    },
  });
  const nodeB = new CommandBus(viaB);

  let conflicts = 0;
  const written: string[] = [];
  await Promise.all(Array.from({ length: 8 }, async (_, writer) => {
    for (let i = 0; i < 3; i++) {
      const text = `B, writer ${writer}, store ${i}`;
      try {
        await nodeB.handle(stream, memoryDecider, store(text), meta('node-b'));
        written.push(text);
      } catch (error) {
        if (!(error instanceof WrongExpectedVersionError)) throw error;
        conflicts++;
      }
    }
  }));
  const sent = [...appends.values()].sort((x, y) => x - y);
  t.comment(`appends per command: p50 ${sent[Math.floor(sent.length / 2)]}, max ${sent.at(-1)}; ${met.size} conflicts with node A`);
  t.equal(ownConflicts, 0, 'no append of B\'s was decided without an append of B\'s that was on its way');
  t.equal(conflicts, 0, 'no store ended in a concurrency conflict');
  t.equal(met.size, 24, 'every command of B met a write of A\'s');
  const log = await storeA.readStream(stream);
  t.strictSame(log.filter((e) => e.metadata.actor === 'node-b').map((e) => e.data.text).sort(), written.sort(), 'B\'s stores are in the log, each once');
  t.equal(log.filter((e) => e.metadata.actor === 'node-a').length, 24, 'and A\'s');
}

t.test('two nodes, one scope: one conflict with another writer per command costs no command its answer', (t) =>
  contend(t, { checksLastEventId: true }));

t.test('the same on a store that does not check the last event id (as EventStoreDB)', (t) =>
  contend(t, { checksLastEventId: false }));

t.test('a command that meets another writer on every decision still gives up, after 5 conflicts (a 409), and writes nothing', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-contention-'), 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  t.teardown(async () => { await storeA.close(); await storeB.close(); });
  const nodeA = new CommandBus(storeA);
  let sent = 0;
  const nodeB = new CommandBus(Object.assign(Object.create(storeB) as EmbeddedEventStore, {
    appendAll: async (appends: StreamAppend[]) => {
      sent++;
      await nodeA.handle(stream, memoryDecider, store(`A, before B's append ${sent}`), meta('node-a'));
      return storeB.appendAll(appends);
    },
  }));
  await t.rejects(nodeB.handle(stream, memoryDecider, store('B, never first'), meta('node-b')), WrongExpectedVersionError);
  t.equal(sent, 5, 'decided and sent five times');
  t.strictSame((await storeA.readStream(stream)).map((e) => e.metadata.actor), Array(5).fill('node-a'), 'only A\'s stores are in the log');
});

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { DuplicateEventIdError } from '../../infra/eventstore/errors.js';
import { REPEAT_LOOKBACK, type EventStore, type NewEvent } from '../../infra/eventstore/port.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';
import { appendPaths, EsdbStandin } from '../support/esdb-standin.js';
import { tempDir } from '../support/temp.js';

/**
 * A request repeated with its Idempotency-Key after its stream has moved on (a client's retry that arrives after
 * later changes) writes nothing and undoes nothing. Its events get the first request's ids: the embedded log finds
 * them wherever they are and answers a replay. EventStoreDB keeps no index of event ids and recognises a repeated
 * append only at the revision it was first written at (IndexWriter.CheckCommit: an append at the stream's current
 * revision is written without looking at its ids), so there the repeat was written again, at the end of the stream:
 * the configuration value set by a later request was set back, a deleted memory came back.
 */
const newEvent = (type: string): NewEvent => ({
  id: randomUUID(), type, data: {}, metadata: { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2024-01-01T00:00:00.000Z' },
});

/**
 * The adapter's part: an append marked `repeat` (StreamAppend's `repeat`, which the command bus sets for a request
 * sent with an Idempotency-Key) finds its events among the stream's last REPEAT_LOOKBACK events and answers as the
 * embedded log does.
 */
t.test('an append marked as a possible repeat finds its events in the stream, as the embedded log does', async (t) => {
  const embedded = new EmbeddedEventStore(join(tempDir(t, 'cairn-repeats-'), 'events.db'));
  t.teardown(() => embedded.close());
  const subjects: Array<{ name: string; store: EventStore; held: (stream: string) => Promise<number> }> = [{ name: 'embedded', store: embedded, held: async (stream: string) => (await embedded.readStream(stream)).length }];
  for await (const { name, esdb, store } of appendPaths(t)) subjects.push({ name: `esdb stand-in, ${name}`, store, held: async (stream) => esdb.streams.get(stream)?.length ?? 0 });
  for (const { name, store, held } of subjects) {
    const [a, b, c] = [newEvent('A'), newEvent('B'), newEvent('C')];
    const first = await store.append('config-1', [a, b], 'no_stream');
    await store.append('config-1', [c], 1);
    const repeat = (events: NewEvent[], expected: number) => store.appendAll([{ stream: 'config-1', events, expected, repeat: true }]);
    t.match(await repeat([a, b], 2), [{ revision: 1, position: first.position, written: false }], `${name}: the first append's place, nothing written`);
    t.equal(await held('config-1'), 3, `${name}: the stream as it was`);
    await t.rejects(repeat([b, newEvent('D')], 2), DuplicateEventIdError, `${name}: held in part: refused`);
    await t.rejects(repeat([newEvent('D'), a], 2), DuplicateEventIdError, `${name}: held in part, not first: refused`);
    await t.rejects(repeat([b, a], 2), DuplicateEventIdError, `${name}: held, but not in this order: refused`);
    t.equal(await held('config-1'), 3, `${name}: none of them written`);
    t.match(await repeat([newEvent('D')], 2), [{ revision: 3 }], `${name}: events the stream does not hold are appended`);
    t.match(await store.appendAll([{ stream: 'config-2', events: [newEvent('E')], expected: 'no_stream', repeat: true }]), [{ revision: 0 }], `${name}: to a new stream too`);
  }
});

t.test('EventStoreDB: a repeat is looked for among the stream\'s last REPEAT_LOOKBACK events, exactly', async (t) => {
  for await (const { name, esdb, store } of appendPaths(t)) {
    for (const later of [REPEAT_LOOKBACK - 1, REPEAT_LOOKBACK]) {
      const stream = `config-lookback-${later}`;
      const first = newEvent('A');
      await store.append(stream, [first], 'no_stream');
      await store.append(stream, Array.from({ length: later }, () => newEvent('B')), 0);
      const [answer] = await store.appendAll([{ stream, events: [first], expected: later, repeat: true }]);
      if (later < REPEAT_LOOKBACK) {
        t.match(answer, { revision: 0, written: false }, `${name}: ${later} events later, among the last ${REPEAT_LOOKBACK}: a replay`);
        t.equal(esdb.streams.get(stream)?.length, later + 1, `${name}: nothing written`);
      } else {
        t.match(answer, { revision: later + 1 }, `${name}: ${later} events later, past them: written again, as documented`);
      }
    }
  }
});

const scope = { agent: 'ava', user: 'u-1' };
const q = `agent=${scope.agent}&user=${scope.user}`;

for (const target of ['embedded', 'esdb stand-in'] as const) {
  t.test(`${target}: a repeat after later changes writes nothing and undoes nothing`, async (t) => {
    const env: Record<string, string> = {};
    let esdb: EsdbStandin | undefined;
    if (target === 'esdb stand-in') {
      esdb = await EsdbStandin.start(t);
      esdb.batchAppend = true;
      env.EVENTSTORE_URL = esdb.url;
    }
    const app = await startTestCairn(env);
    t.teardown(() => app.stop());
    const { projectId, key } = await projectWithKey(app, 'tenant-repeats');
    const path = `/projects/${projectId}/config/greeting`;
    const put = (value: string, idempotencyKey?: string) => app.platform(path, {
      method: 'PUT', headers: { ...bearer(key), ...(idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {}) }, json: value,
    });

    t.equal((await put('first', 'set-1')).status, 200);
    const second = await put('second');
    t.equal(second.status, 200);
    const repeat = await put('first', 'set-1');
    t.equal(repeat.status, 200, 'the repeat is answered');
    // Read after the later of the two: the repeat answers the first request's (earlier) position.
    const latest = Math.max(...[second, repeat].map((res) => Number(res.headers.get('x-event-position'))));
    const read = await app.platform(path, { headers: { ...bearer(key), 'X-Min-Position': String(latest) } });
    t.strictSame(await read.json(), 'second', 'the later value stands');

    const store = () => app.memory('/v1/memories', { method: 'POST', headers: { 'Idempotency-Key': 'store-1' }, json: { scope, text: 'Ava has a cat' } });
    const stored = await store();
    t.equal(stored.status, 200);
    const { id } = await stored.json() as { id: string };
    t.equal((await app.memory(`/v1/memories?${q}&id=${id}`, { method: 'DELETE' })).status, 200);
    const again = await store();
    t.equal(again.status, 200, 'the repeat is answered');
    const exported = await (await app.memory(`/v1/export?${q}`)).json() as { memories: Array<{ id: string }> };
    t.strictSame(exported.memories, [], 'the deleted memory does not come back');
    if (esdb) {
      const ids = [...esdb.streams.values()].flat().filter((e) => !e.type.startsWith('$')).map((e) => e.id);
      t.equal(new Set(ids).size, ids.length, 'no event id twice in the log');
    }
  });
}

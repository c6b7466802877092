import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Document } from 'mongodb';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { readiness, STORE_PROBE_TIMEOUT_MS, type HostHealth } from '../../projections/health.js';
import { cursorReply, fakeMongo } from '../support/mongo-wire.js';
import { timed, within } from '../support/settling.js';

/**
 * The readiness probe's read-store query, bounded in the MongoDB driver itself: without a MongoDB server
 * here, the store talks to a stand-in speaking MongoDB's wire protocol that answers the handshake and
 * the store's set-up, then never answers the probe's `find` (a server that hangs), or stops listening
 * (a server that is gone, where the driver waits 30 s for a server to select). The client must give up
 * in time and leave nothing behind: the query carries `maxTimeMS`, and its connection is closed.
 */

/** Answers everything but the probe's query (a find on `_checkpoints`), which it never answers. */
const hangingProbe = (name: string, body: Document): Document | undefined => {
  if (name === 'find' && body.find === '_checkpoints') return undefined;
  if (name === 'find') return cursorReply(body, []);
  return { ok: 1 };
};

t.test('listCheckpoints with timeoutMs: a server that never answers', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const store = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => store.close());

  const probe = await timed(store.listCheckpoints({ timeoutMs: 300 }), 20_000);
  t.equal(probe.outcome, 'rejected', `the call gave up (after ${Math.round(probe.ms)} ms: ${String(probe.error)})`);
  t.ok(probe.ms >= 250 && probe.ms < 5000, 'at about timeoutMs (a busy machine may fire its timer late; unbounded, it would wait 10–30 s or for ever)');
  const find = mongo.received.find((c) => c.name === 'find' && c.body.find === '_checkpoints');
  t.equal(find?.body.maxTimeMS, 300, 'the server is told to end the query after timeoutMs');
  t.ok(find && await within(find.closed, 5000), 'and the connection waiting for its answer is closed: nothing is left waiting');
});

t.test('listCheckpoints with timeoutMs: a server that is gone', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const store = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => store.close());
  await mongo.stop();

  // Without a bound the driver waits for a server to select for serverSelectionTimeoutMS (30 s).
  const probe = await timed(store.listCheckpoints({ timeoutMs: 300 }), 20_000);
  t.equal(probe.outcome, 'rejected', `the call gave up (after ${Math.round(probe.ms)} ms: ${String(probe.error)})`);
  t.ok(probe.ms < 5000, 'at about timeoutMs (a busy machine may fire its timer late; unbounded, it would wait 10–30 s or for ever)');
});

t.test('readiness bounds the read store\'s probe query to STORE_PROBE_TIMEOUT_MS in the driver', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const reads = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => reads.close());
  const dir = mkdtempSync(join(tmpdir(), 'cairn-probe-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  t.teardown(async () => { await events.close(); rmSync(dir, { recursive: true, force: true }); });
  const host = { health: (): HostHealth => ({ thread: { mode: 'inline', state: 'running', heartbeat_at: null, restarts: 0 }, projections: [] }) };

  const answer = await readiness(host, { events, reads });
  t.match(answer, { ready: false, stores: { events: 'ok', reads: 'timeout' } });
  const find = mongo.received.find((c) => c.name === 'find' && c.body.find === '_checkpoints');
  t.ok(typeof find?.body.maxTimeMS === 'number' && find.body.maxTimeMS <= STORE_PROBE_TIMEOUT_MS && find.body.maxTimeMS > STORE_PROBE_TIMEOUT_MS - 500,
    `the query carried the probe's remaining time as maxTimeMS (${find?.body.maxTimeMS})`);
  t.ok(find && await within(find.closed, 5000), 'its connection is closed soon after the probe gave up: probes do not pile up');
});

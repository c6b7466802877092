import t from 'tap';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { cursorReply, fakeMongo } from '../support/mongo-wire.js';

/**
 * The store reads from the primary whatever read preference MONGODB_URL names: its guarantees need it. A query
 * after the runner reached a position (X-Min-Position) must see that batch, committed on the primary; a query
 * checks the live checkpoint after reading (onLive) on the same node it read from; rebuilds and batches compare
 * checkpoints they just read. A secondary lags behind all of these. Against a stand-in mongos, to which the
 * driver names every read preference but primary in the command (`$readPreference`).
 */
t.test('reads go to the primary even when the URL asks for secondaries', async (t) => {
  const mongo = await fakeMongo(t, (name, body) => {
    if (name === 'find' && body.find === '_checkpoints') {
      return cursorReply(body, [{ _id: 'p:live', projection: 'p', slot: 'live', position: 3, generation: 1, updated_at: null }]);
    }
    if (name === 'find' && body.find === '_collections') return cursorReply(body, [{ _id: 'items', projection: 'p', indexes: [] }]);
    if (name === 'find') return cursorReply(body, [{ id: 'i1', _position: 3 }]);
    if (name === 'aggregate') return { cursor: { id: 0n, ns: `${body.$db}.${body.aggregate}`, firstBatch: [{ _id: 1, n: 1 }] }, ok: 1 };
    return { ok: 1 };
  }, { hello: { msg: 'isdbgrid' } });
  const store = await MongoReadStore.connect(`${mongo.url}&readPreference=secondaryPreferred`, 'cairn_reads');
  t.teardown(() => store.close());

  t.match(await store.get('items', 'i1'), { id: 'i1' });
  t.match(await store.find('items'), { items: [{ id: 'i1' }] });
  t.equal(await store.count('items'), 1);
  t.match(await store.checkpoint('p'), { position: 3 });
  t.match(await store.listCheckpoints(), [{ projection: 'p' }]);
  const reads = mongo.received.filter((c) => c.name === 'find' || c.name === 'aggregate');
  t.ok(reads.length >= 8, `${reads.length} reads`);
  t.strictSame(reads.filter((c) => c.body.$readPreference !== undefined).map((c) => `${c.name} ${c.body.find ?? c.body.aggregate}: ${JSON.stringify(c.body.$readPreference)}`), [],
    'none names another read preference than primary');
});

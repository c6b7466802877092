import { BSON, type Document } from 'mongodb';
import t from 'tap';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { cursorReply, fakeMongo } from '../support/mongo-wire.js';

/**
 * A read-model document holds values a client chose (a configuration value is any JSON), and its keys may be what BSON
 * cannot hold (a NUL byte: the driver refuses to serialise it) or what MongoDB reads as a path or an operator (`.`, a
 * leading `$`). The embedded store keeps them as written (its JSON column); the MongoDB store must too, rather than fail
 * the projection's batch on every retry (the projection stuck behind that event for good). So must a `_bsontype` key, which
 * the driver's serializer takes for a BSON class of its own and refuses. Against a stand-in standalone
 * server that speaks MongoDB's wire protocol and keeps the documents written to `items__g1` as the update's literal says.
 */
t.test('keys BSON cannot hold, or MongoDB would read as paths or operators, or the driver as a BSON class, are stored and read back as written', async (t) => {
  const stored = new Map<string, Document>();
  const sent: Document[] = [];
  const mongo = await fakeMongo(t, (name, body) => {
    if (name === 'find' && body.find === '_checkpoints') {
      return cursorReply(body, [{ _id: 'p:live', projection: 'p', slot: 'live', position: 0, generation: 1, updated_at: null }]);
    }
    if (name === 'find' && body.find === '_collections') return cursorReply(body, [{ _id: 'items', projection: 'p', indexes: [] }]);
    if (name === 'update' && body.update === 'items__g1') {
      const { q, u } = (body.updates as Document[])[0]!;
      const literal = (u as Document[])[0]!.$replaceWith.$cond.then.$literal as Document;
      sent.push(literal);
      stored.set(q._id as string, literal);
      return { n: 1, nModified: 1, ok: 1 };
    }
    if (name === 'update') return { n: 1, nModified: 1, ok: 1 };
    if (name === 'find' && body.find === 'items__g1') {
      const id = (body.filter as Document)._id as string | undefined;
      const docs = id === undefined ? [...stored.values()] : [stored.get(id)].filter((d) => d !== undefined);
      return cursorReply(body, docs.map(({ _id, _deleted, ...visible }) => visible));
    }
    return { ok: 1 };
  });
  const store = await MongoReadStore.connect(mongo.url, 'cairn_keys');
  t.teardown(() => store.close());
  t.equal(store.transactions, false, 'a standalone server');

  const value = {
    'a\u0000b': 1, 'dotted.key': { '$set': { x: 1 } }, '$inc': [{ '': 'empty key', '50%': '%2E' }], '%': '%', 'Zoë 🎉 鍵': 'Unicode',
    plain: { nested: ['x', { ok: true }] },
    // The driver's serializer reads an object with this key as one of its BSON classes, and refuses it (BSONVersionError).
    meta: { _bsontype: 'ObjectId', id: 'x' }, list: [{ _bsontype: 'Long' }], '%5Fbsontype': 1, _bsontype_: 2,
  };
  const doc = { id: 'c1', project_id: 'p1', key: 'k', value };
  t.equal(await store.applyBatch('p', { position: 0, generation: 1 }, 5, async (w) => { await w.put('items', doc, 5); }), true);

  t.equal(sent.length, 1, 'the document was sent');
  const keys = (v: unknown): string[] => (v !== null && typeof v === 'object' ? Object.entries(v).flatMap(([k, x]) => [k, ...keys(x)]) : []);
  t.strictSame(keys(sent[0]).filter((k) => /\0|\.|^\$|^_bsontype$/.test(k)), [], 'no key as sent holds a NUL byte or a `.`, nor starts with `$`, nor is `_bsontype`');
  t.doesNotThrow(() => BSON.serialize(sent[0]!), 'and BSON holds it');
  t.strictSame(await store.get('items', 'c1'), { ...doc, _position: 5 }, 'get answers the document as written');
  t.strictSame(await store.find('items'), { items: [{ ...doc, _position: 5 }], next_cursor: null }, 'and so does find');
});

t.test('a document without such keys is stored as it is, unmarked', async (t) => {
  const sent: Document[] = [];
  const mongo = await fakeMongo(t, (name, body) => {
    if (name === 'find' && body.find === '_checkpoints') {
      return cursorReply(body, [{ _id: 'p:live', projection: 'p', slot: 'live', position: 0, generation: 1, updated_at: null }]);
    }
    if (name === 'find' && body.find === '_collections') return cursorReply(body, [{ _id: 'items', projection: 'p', indexes: [] }]);
    if (name === 'update' && body.update === 'items__g1') sent.push((body.updates as Document[])[0]!.u[0].$replaceWith.$cond.then.$literal as Document);
    if (name === 'update') return { n: 1, nModified: 1, ok: 1 };
    return { ok: 1 };
  });
  const store = await MongoReadStore.connect(mongo.url, 'cairn_keys');
  t.teardown(() => store.close());
  const doc = { id: 'c2', value: { a: [1, { b: 'c.d $e %' }] } };
  t.equal(await store.applyBatch('p', { position: 0, generation: 1 }, 5, async (w) => { await w.put('items', doc, 5); }), true);
  t.strictSame(sent, [{ _id: 'c2', ...doc, _position: 5, _deleted: false }], 'values are never escaped, only keys');
});

import type { Document } from 'mongodb';
import t, { type Test } from 'tap';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { cursorReply, fakeMongo } from '../support/mongo-wire.js';

/**
 * Generations left behind: a swap moves the live checkpoint, then drops the old generation's collections, and a
 * process killed in between (or a drop that fails) leaves them. The next registration (every node registers its
 * projections at start) or swap drops them, and only them: never the live generation, the rebuild slot's, or one
 * above the live one (a swap in another process may be about to make it live), nor any other collection. A startRebuild
 * stalled between its reads and its claim while whole rebuilds ran elsewhere drops no live generation either, and
 * hands out none at or below the live one. A finishRebuild whose generation another start superseded (before its reads,
 * or between them and its mark) swaps nothing in. Pause records of several hosts sit side by side on a live checkpoint.
 *
 * Against a stand-in standalone server that speaks MongoDB's wire protocol and keeps what the store needs:
 * which collections exist, and the documents of `_checkpoints` and `_collections`. Several stores on it are
 * several processes sharing one database.
 */

interface Server {
  collections: Set<string>;
  /** `_checkpoints` and `_collections`: `_id` → document. */
  tables: Map<string, Map<string, Document>>;
  /** Replaces the answer to `drop` of a collection (e.g. an error); undefined: dropped. */
  onDrop?: (name: string) => Document | undefined;
  /** The collections dropped, in order. */
  dropped: string[];
  /** Runs before a command is answered, when it returns a promise: the answer then reflects what it did meanwhile. */
  before?: (name: string, body: Document) => Promise<void> | undefined;
}

const NOT_FOUND = { ok: 0, code: 26, codeName: 'NamespaceNotFound', errmsg: 'ns not found' };
const INTERRUPTED = { ok: 0, code: 11601, codeName: 'Interrupted', errmsg: 'operation was interrupted' };

function matches(doc: Document, filter: Document = {}): boolean {
  return Object.entries(filter).every(([field, value]) => {
    if (value === null || typeof value !== 'object') return doc[field] === value;
    if ('$lte' in value) return doc[field] <= value.$lte;
    if ('$exists' in value) return field in doc === value.$exists;
    throw new Error(`the stand-in does not know the condition ${JSON.stringify(value)}`);
  });
}

/** `update` as MongoDB applies it: a replacement, or `$set`/`$unset` of fields or dotted paths (and `$setOnInsert` on an insert). */
function updated(doc: Document | undefined, filter: Document, update: Document): Document {
  if (!Object.keys(update).some((k) => k.startsWith('$'))) return { _id: doc?._id ?? filter._id, ...update };
  const next: Document = structuredClone(doc ?? { _id: filter._id, ...update.$setOnInsert });
  /** The document holding the path's last field (made on the way when `make`), and that field. */
  const parent = (path: string, make: boolean): [Document | undefined, string] => {
    const fields = path.split('.');
    let at: Document | undefined = next;
    for (const field of fields.slice(0, -1)) at = at && (at[field] ??= make ? {} : undefined);
    return [at, fields.at(-1)!];
  };
  for (const [path, value] of Object.entries(update.$set ?? {})) {
    const [at, field] = parent(path, true);
    at![field] = value;
  }
  for (const path of Object.keys(update.$unset ?? {})) {
    const [at, field] = parent(path, false);
    if (at) delete at[field];
  }
  return next;
}

function answer(server: Server, name: string, body: Document): Document {
  const table = (collection: string) => {
    server.collections.add(collection);
    if (!server.tables.has(collection)) server.tables.set(collection, new Map());
    return server.tables.get(collection)!;
  };
  const stored = (collection: string) => (collection.startsWith('_') ? table(collection) : undefined);
  switch (name) {
    case 'listCollections':
      return { cursor: { id: 0n, ns: `${body.$db}.$cmd.listCollections`, firstBatch: [...server.collections].map((c) => ({ name: c, type: 'collection' })) }, ok: 1 };
    case 'create':
      if (server.collections.has(body.create)) return { ok: 0, code: 48, codeName: 'NamespaceExists', errmsg: 'collection already exists' };
      server.collections.add(body.create);
      return { ok: 1 };
    case 'createIndexes':
      server.collections.add(body.createIndexes);
      return { ok: 1 };
    case 'drop': {
      const refused = server.onDrop?.(body.drop);
      if (refused) return refused;
      if (!server.collections.delete(body.drop)) return NOT_FOUND;
      server.tables.delete(body.drop);
      server.dropped.push(body.drop);
      return { ok: 1 };
    }
    case 'find':
      return cursorReply(body, [...(stored(body.find)?.values() ?? [])].filter((d) => matches(d, body.filter)));
    case 'insert': {
      const docs = table(body.insert);
      const writeErrors: Document[] = [];
      (body.documents as Document[]).forEach((d, index) => {
        if (docs.has(d._id)) writeErrors.push({ index, code: 11000, errmsg: 'E11000 duplicate key error' });
        else docs.set(d._id, d);
      });
      return writeErrors.length > 0 ? { n: 0, writeErrors, ok: 1 } : { n: body.documents.length, ok: 1 };
    }
    case 'update': {
      const docs = stored(body.update);
      const [{ q, u, upsert }] = body.updates as [Document];
      server.collections.add(body.update);
      if (!docs) return { n: 1, nModified: 1, ok: 1 }; // a document of a read model: only the collection matters here
      const doc = [...docs.values()].find((d) => matches(d, q));
      if (doc) {
        docs.set(doc._id, updated(doc, q, u));
        return { n: 1, nModified: 1, ok: 1 };
      }
      if (!upsert) return { n: 0, nModified: 0, ok: 1 };
      docs.set(q._id, updated(undefined, q, u));
      return { n: 1, nModified: 0, upserted: [{ index: 0, _id: q._id }], ok: 1 };
    }
    case 'findAndModify': {
      const docs = table(body.findAndModify);
      const doc = [...docs.values()].find((d) => matches(d, body.query));
      if (doc) docs.set(doc._id, updated(doc, body.query, body.update));
      return { lastErrorObject: { n: doc ? 1 : 0, updatedExisting: !!doc }, value: doc ?? null, ok: 1 };
    }
    case 'delete': {
      const docs = table(body.delete);
      const [{ q }] = body.deletes as [Document];
      const doc = [...docs.values()].find((d) => matches(d, q));
      if (doc) docs.delete(doc._id);
      return { n: doc ? 1 : 0, ok: 1 };
    }
    default:
      return { ok: 1 };
  }
}

/** A database holding `collections` and the documents of `_checkpoints` and `_collections`. */
async function server(t: Test, state: { collections: string[]; checkpoints?: Document[]; registry?: Document[] }) {
  const s: Server = {
    collections: new Set(['_checkpoints', '_collections', ...state.collections]),
    tables: new Map([
      ['_checkpoints', new Map((state.checkpoints ?? []).map((d) => [d._id as string, d]))],
      ['_collections', new Map((state.registry ?? []).map((d) => [d._id as string, d]))],
    ]),
    dropped: [],
  };
  const mongo = await fakeMongo(t, (name, body) => {
    const waiting = s.before?.(name, body);
    return waiting ? waiting.then(() => answer(s, name, body)) : answer(s, name, body);
  });
  /** Another process on the same database. */
  const connect = async () => {
    const store = await MongoReadStore.connect(mongo.url, 'cairn_sweep');
    t.teardown(() => store.close());
    return store;
  };
  /** The generation-suffixed collections, and every other one but the store's own. */
  const collections = () => [...s.collections].filter((c) => !c.startsWith('_')).sort();
  const checkpoint = (id: string) => s.tables.get('_checkpoints')!.get(id);
  return { server: s, connect, collections, checkpoint };
}

const live = (projection: string, generation: number, position = 10) =>
  ({ _id: `${projection}:live`, projection, slot: 'live', position, generation, updated_at: null });
const rebuilding = (projection: string, generation: number, mark: { swapping?: true } = {}) =>
  ({ _id: `${projection}:rebuild`, projection, slot: 'rebuild', position: 10, generation, updated_at: null, ...mark });
const REGISTRY = [
  { _id: 'items', projection: 'p', indexes: [] },
  { _id: 'tags', projection: 'p', indexes: [] },
  { _id: 'notes', projection: 'q', indexes: [] },
];
const P = [{ name: 'items' }, { name: 'tags' }];

/** Names that are not one of `p`'s generations: another projection's, unregistered ones, ones that only look alike. */
const OTHERS = ['notes__g1', 'legacy__g1', 'items', 'items__g', 'items__g01', 'items__g1.bak', 'items__g1_old', 'itemsx__g1', 'xitems__g1'];

t.test('a swap killed before its drops: the next registration drops the old generation, and nothing else', async (t) => {
  // kill -9 after the swap's update and the clearing of the rebuild slot, before its drops.
  const db = await server(t, {
    collections: ['items__g1', 'items__g2', 'tags__g1', 'tags__g2', ...OTHERS],
    checkpoints: [live('p', 2), live('q', 1)],
    registry: REGISTRY,
  });
  const store = await db.connect();
  await store.register('p', P);
  t.strictSame(db.collections(), ['items__g2', 'tags__g2', ...OTHERS].sort(),
    'the old generation is gone; the live one, the other projection\'s (live at a lower generation) and other names are not');
  await store.register('p', P);
  t.strictSame(db.collections(), ['items__g2', 'tags__g2', ...OTHERS].sort(), 'registering again changes nothing');
});

t.test('a swap killed before clearing the rebuild slot: finishing again clears it and drops the old generation', async (t) => {
  const db = await server(t, {
    collections: ['items__g1', 'items__g2', 'tags__g1', 'tags__g2'],
    checkpoints: [live('p', 2), rebuilding('p', 2, { swapping: true })],
    registry: REGISTRY,
  });
  const store = await db.connect();
  t.match(await store.finishRebuild('p', { generation: 2 }), { swapped: true, live: { generation: 2 } });
  t.equal(db.checkpoint('p:rebuild'), undefined, 'the slot is cleared');
  t.strictSame(db.collections(), ['items__g2', 'tags__g2']);
});

t.test('a drop that fails after the swap: the next swap drops what it left', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const store = await db.connect();
  await store.register('p', P);
  t.match(await store.startRebuild('p'), { generation: 2 });
  db.server.onDrop = (name) => (name === 'tags__g1' ? INTERRUPTED : undefined);
  await t.rejects(store.finishRebuild('p', { generation: 2 }), /interrupted/);
  db.server.onDrop = undefined;
  t.match(await store.checkpoint('p'), { generation: 2 }, 'swapped in before the drop failed');
  t.strictSame(db.collections(), ['items__g2', 'tags__g1', 'tags__g2'], 'the collection whose drop failed is left');

  t.match(await store.startRebuild('p'), { generation: 3 });
  t.strictSame(db.collections(), ['items__g2', 'items__g3', 'tags__g1', 'tags__g2', 'tags__g3'], 'starting a rebuild drops no generation in use');
  t.match(await store.finishRebuild('p', { generation: 3 }), { swapped: true, live: { generation: 3 } });
  t.strictSame(db.collections(), ['items__g3', 'tags__g3'], 'the swap dropped the generation it replaced and the one left before');
});

t.test('with a rebuild running in another process: the live generation, the slot\'s and any a swap may make live survive', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const node = await db.connect();
  const rebuilder = await db.connect();
  const another = await db.connect();
  await node.register('p', P);
  t.match(await rebuilder.startRebuild('p'), { generation: 2 });
  await node.register('p', P);
  t.strictSame(db.collections(), ['items__g1', 'items__g2', 'tags__g1', 'tags__g2'], 'a node registering during a rebuild leaves its generation');

  // The rebuilder's finishRebuild marks generation 2 for its swap; a rebuild started in another process then supersedes it.
  db.checkpoint('p:rebuild')!.swapping = true;
  t.match(await another.startRebuild('p'), { generation: 3 });
  await node.register('p', P);
  t.strictSame(db.collections(), ['items__g1', 'items__g2', 'items__g3', 'tags__g1', 'tags__g2', 'tags__g3'],
    'a marked generation, which the rebuilder may yet swap in, is left; so is the new rebuild\'s');

  // The rebuilder's swap goes through (conditioned on the live generation 1, still live), and it is killed before its drops.
  Object.assign(db.checkpoint('p:live')!, { generation: 2 });
  await node.register('p', P);
  t.strictSame(db.collections(), ['items__g2', 'items__g3', 'tags__g2', 'tags__g3'], 'the next registration drops the generation swapped out');
  t.match(await another.finishRebuild('p', { generation: 3 }), { swapped: true, live: { generation: 3 } });
  t.strictSame(db.collections(), ['items__g3', 'tags__g3']);
});

t.test('the rebuild slot\'s generation is never dropped, even below the live one', async (t) => {
  // Not a state the store's own writes lead to but by a start that read the live checkpoint just before several swaps.
  const db = await server(t, {
    collections: ['items__g1', 'items__g2', 'items__g3', 'tags__g1', 'tags__g2', 'tags__g3'],
    checkpoints: [live('p', 3), rebuilding('p', 2)],
    registry: REGISTRY,
  });
  const store = await db.connect();
  await store.register('p', P);
  t.strictSame(db.collections(), ['items__g2', 'items__g3', 'tags__g2', 'tags__g3']);
});

/**
 * A start stalled (GC pause, VM freeze) between its read of the live checkpoint and its claim of the rebuild slot:
 * `during` (another process's work) runs when the next claim of `p`'s slot reaches the server, before it is answered.
 */
function stallClaim(db: Awaited<ReturnType<typeof server>>, during: () => Promise<void>) {
  db.server.before = (name, body) => {
    const claim = (name === 'insert' && body.insert === '_checkpoints' && body.documents[0]._id === 'p:rebuild')
      || (name === 'findAndModify' && body.findAndModify === '_checkpoints' && body.query._id === 'p:rebuild');
    if (!claim) return undefined;
    db.server.before = undefined;
    return during();
  };
}

t.test('a whole rebuild in another process between a start\'s reads and its claim: the live generation is not handed out', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const stalled = await db.connect();
  const other = await db.connect();
  await stalled.register('p', P);
  // The stalled start read the empty slot and live generation 1; the other process claims 2, swaps it in and empties the slot.
  stallClaim(db, async () => {
    t.match(await other.startRebuild('p'), { generation: 2 });
    t.match(await other.finishRebuild('p', { generation: 2 }), { swapped: true, live: { generation: 2 } });
  });
  t.match(await stalled.startRebuild('p'), { generation: 3 }, 'a generation above the live one');
  t.match(await stalled.checkpoint('p'), { generation: 2 });
  t.strictSame(db.server.dropped, ['items__g1', 'tags__g1'], 'only the generation swapped out was dropped, not the live one');
  t.strictSame(db.collections(), ['items__g2', 'items__g3', 'tags__g2', 'tags__g3']);
  t.match(db.checkpoint('p:rebuild'), { generation: 3 });
  t.match(await stalled.finishRebuild('p', { generation: 3 }), { swapped: true, live: { generation: 3 } });
});

t.test('whole rebuilds in another process between a start\'s reads and its claim: no generation below the live one', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const stalled = await db.connect();
  const other = await db.connect();
  await stalled.register('p', P);
  stallClaim(db, async () => {
    for (const generation of [2, 3]) {
      t.match(await other.startRebuild('p'), { generation });
      t.match(await other.finishRebuild('p', { generation }), { swapped: true, live: { generation } });
    }
  });
  t.match(await stalled.startRebuild('p'), { generation: 4 }, 'a generation above the live one');
  t.strictSame(db.collections(), ['items__g3', 'items__g4', 'tags__g3', 'tags__g4']);
  t.match(await stalled.finishRebuild('p', { generation: 4 }), { swapped: true, live: { generation: 4 } }, 'its swap moves the live generation forward');
});

t.test('finishRebuild of a generation another start superseded: nothing is swapped in, nothing dropped', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const rebuilder = await db.connect();
  const other = await db.connect();
  await rebuilder.register('p', P);
  t.match(await rebuilder.startRebuild('p'), { generation: 2 });
  t.match(await other.startRebuild('p'), { generation: 3 }, 'another process supersedes it (both have caught up: position 0)');
  const live = await rebuilder.checkpoint('p');
  const dropped = [...db.server.dropped];
  t.strictSame(await rebuilder.finishRebuild('p', { generation: 2 }), { swapped: false, live, superseded: true });
  t.strictSame(await rebuilder.checkpoint('p'), live, 'the live checkpoint is untouched');
  t.match(db.checkpoint('p:rebuild'), { position: 0, generation: 3 }, 'the other keeps the slot');
  t.notOk(db.checkpoint('p:rebuild')!.swapping, 'not marked for a swap');
  t.strictSame(db.server.dropped, dropped, 'nothing dropped');
  t.strictSame(db.collections(), ['items__g1', 'items__g3', 'tags__g1', 'tags__g3']);
  t.match(await other.finishRebuild('p', { generation: 3 }), { swapped: true, live: { generation: 3 } }, 'the other swaps its own in');
  t.match(await rebuilder.finishRebuild('p', { generation: 2 }), { swapped: false, superseded: true, live: { generation: 3 } }, 'an empty slot: superseded too');
});

t.test('a start superseding the generation between finishRebuild\'s reads and its mark: the finish reads again and swaps nothing in', async (t) => {
  const db = await server(t, { collections: [], registry: REGISTRY });
  const rebuilder = await db.connect();
  const other = await db.connect();
  await rebuilder.register('p', P);
  t.match(await rebuilder.startRebuild('p'), { generation: 2 });
  // When the finish's mark of generation 2 reaches the server, another process's start takes the slot first.
  let started = false;
  db.server.before = (name, body) => {
    if (name !== 'update' || body.update !== '_checkpoints' || !(body.updates as Document[])[0]!.u.$set?.swapping) return undefined;
    db.server.before = undefined;
    return other.startRebuild('p').then((cp) => { started = cp.generation === 3; });
  };
  const live = await rebuilder.checkpoint('p');
  t.strictSame(await rebuilder.finishRebuild('p', { generation: 2 }), { swapped: false, live, superseded: true });
  t.ok(started, 'the other start (generation 3) came in between');
  t.strictSame(await rebuilder.checkpoint('p'), live, 'generation 3, which the slot holds now, is not swapped in');
  t.notOk(db.checkpoint('p:rebuild')!.swapping, 'nor marked for a swap');
  t.match(db.checkpoint('p:rebuild'), { generation: 3 });
  t.strictSame(db.collections(), ['items__g1', 'items__g3', 'tags__g1', 'tags__g3']);
  t.match(await other.finishRebuild('p', { generation: 3 }), { swapped: true, live: { generation: 3 } });
});

t.test('recordPause: each host\'s record in a field of its own, side by side, kept through a swap', async (t) => {
  const db = await server(t, { collections: ['items__g1', 'tags__g1'], checkpoints: [live('p', 1)], registry: REGISTRY });
  const a = await db.connect();
  const b = await db.connect();
  const holderA = { host: 'node-a', pid: 101, id: 'a1' };
  const holderB = { host: 'node-b', pid: 202, id: 'b2' };
  const [t0, t1] = ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z'];
  await a.recordPause('p', holderA, t1);
  await b.recordPause('p', holderB, t0);
  t.strictSame(db.checkpoint('p:live')!.paused_by, { a1: { host: 'node-a', pid: 101, since: t1 }, b2: { host: 'node-b', pid: 202, since: t0 } }, 'stored by holder id');
  const both = { paused_at: t0, paused_by: [{ ...holderB, since: t0 }, { ...holderA, since: t1 }] };
  t.strictSame(await a.checkpoint('p'), { projection: 'p', position: 10, generation: 1, updated_at: null, ...both }, 'earliest first; paused_at the earliest');
  t.match(await b.listCheckpoints(), [{ projection: 'p', ...both }]);

  t.match(await a.startRebuild('p'), { generation: 2 });
  Object.assign(db.checkpoint('p:rebuild')!, { position: 10 });
  t.match(await a.finishRebuild('p', { generation: 2 }), { swapped: true, live: { generation: 2, ...both } }, 'a swap keeps them');

  await b.recordPause('p', holderB, null);
  t.match(await a.checkpoint('p'), { generation: 2, paused_at: t1 });
  t.strictSame((await a.checkpoint('p')).paused_by, [{ ...holderA, since: t1 }], 'a host clears only its own');
  await a.recordPause('p', holderA, null);
  t.strictSame(db.checkpoint('p:live')!.paused_by, {}, 'an empty field left');
  const cleared = await a.checkpoint('p');
  t.notOk('paused_at' in cleared || 'paused_by' in cleared, 'reads as none');
  // A pause recorded by the version before holders: whose it is, is unknown; it is not read.
  Object.assign(db.checkpoint('p:live')!, { paused_at: t0 });
  t.notOk('paused_at' in (await a.checkpoint('p')));
  await t.rejects(a.recordPause('p', { ...holderA, id: 'a.b' }, t1), /invalid pause holder id/, 'an id that is no field name is refused');
});

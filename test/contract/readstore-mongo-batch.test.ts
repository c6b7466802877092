import type { Document } from 'mongodb';
import t, { type Test } from 'tap';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { cursorReply, fakeMongo } from '../support/mongo-wire.js';

/**
 * applyBatch on a replica set (a transaction), against a stand-in primary that speaks MongoDB's wire protocol
 * and holds one projection `p` (collection `items`, generation 1, live checkpoint at 0). Each test makes one of
 * the stand-in's answers what a real primary answers when other processes write at the same time: a write
 * conflict (TransientTransactionError) on a write of the batch, or a commit whose outcome is unknown.
 */

const WRITE_CONFLICT = {
  ok: 0, code: 112, codeName: 'WriteConflict', errorLabels: ['TransientTransactionError'],
  errmsg: 'Caused by :: Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction.',
};

interface Primary {
  /** The live checkpoint as stored. */
  checkpoint: { position: number; generation: number };
  /** Replaces the answer to a write of the batch (`update` on `_checkpoints` or on `items__g1`); undefined: answered as written. */
  onUpdate?: (collection: string) => Document | undefined;
  /** Replaces the answer to commitTransaction. */
  onCommit?: () => Document | undefined;
}

async function primary(t: Test, state: Primary) {
  const mongo = await fakeMongo(t, (name, body) => {
    if (name === 'find' && body.find === '_checkpoints') {
      return cursorReply(body, [{ _id: 'p:live', projection: 'p', slot: 'live', ...state.checkpoint, updated_at: null }]);
    }
    if (name === 'find' && body.find === '_collections') return cursorReply(body, [{ _id: 'items', projection: 'p', indexes: [] }]);
    if (name === 'update') {
      const answer = state.onUpdate?.(body.update as string);
      if (answer) return answer;
      if (body.update === '_checkpoints') state.checkpoint.position = (body.updates as Document[])[0]!.u.$set.position as number;
      return { n: 1, nModified: 1, ok: 1 };
    }
    if (name === 'commitTransaction') return state.onCommit?.() ?? { ok: 1 };
    return { ok: 1 };
  }, { hello: { setName: 'rs0' } });
  const store = await MongoReadStore.connect(mongo.url, 'cairn_batch');
  t.teardown(() => store.close());
  t.equal(store.transactions, true, 'a replica set member: batches run in transactions');
  const commands = (name: string) => mongo.received.filter((c) => c.name === name).length;
  return { store, commands };
}

t.test('a batch that loses the race for the checkpoint to another process\'s batch returns false', async (t) => {
  // Another node's runner commits the same projection's batch while this one's transaction is open: the
  // guarded checkpoint update conflicts with it. That is "the checkpoint moved", not a failure of the batch.
  const state: Primary = { checkpoint: { position: 0, generation: 1 } };
  state.onUpdate = (collection) => {
    if (collection !== '_checkpoints' || state.checkpoint.position !== 0) return undefined;
    state.checkpoint.position = 7;
    return WRITE_CONFLICT;
  };
  const { store, commands } = await primary(t, state);
  let runs = 0;
  const applied = await store.applyBatch('p', { position: 0, generation: 1 }, 5, async (w) => {
    runs++;
    await w.put('items', { id: 'i1' }, 5);
  });
  t.equal(applied, false, 'false: the runner re-reads the checkpoint, as after any other process moved it');
  t.equal(runs, 1, 'the batch ran once: the second attempt found the checkpoint moved before running it');
  t.equal(commands('commitTransaction'), 0, 'nothing was committed');
  t.strictSame(state.checkpoint, { position: 7, generation: 1 }, 'the other process\'s checkpoint stands');
});

t.test('a write conflict while the checkpoint is still the expected one: the batch runs again and commits', async (t) => {
  // E.g. a failure recorded beside the checkpoint by another node, or a document written by a batch that then aborted.
  const state: Primary = { checkpoint: { position: 0, generation: 1 } };
  let conflicts = 1;
  state.onUpdate = (collection) => (collection === 'items__g1' && conflicts-- > 0 ? WRITE_CONFLICT : undefined);
  const { store, commands } = await primary(t, state);
  let runs = 0;
  const applied = await store.applyBatch('p', { position: 0, generation: 1 }, 5, async (w) => {
    runs++;
    await w.put('items', { id: 'i1' }, 5);
  });
  t.equal(applied, true);
  t.equal(runs, 2, 'the aborted attempt ran again in a new transaction');
  t.equal(commands('abortTransaction'), 1, 'the conflicting transaction was aborted');
  t.equal(commands('commitTransaction'), 1);
  t.strictSame(state.checkpoint, { position: 5, generation: 1 });
});

t.test('a commit whose outcome is unknown is committed again; a batch that throws is aborted and rethrown', async (t) => {
  const state: Primary = { checkpoint: { position: 0, generation: 1 } };
  let unknown = 1;
  state.onCommit = () => (unknown-- > 0
    ? { ok: 1, writeConcernError: { code: 64, codeName: 'WriteConcernFailed', errmsg: 'waiting for replication timed out', errInfo: { wtimeout: true } } }
    : undefined);
  const { store, commands } = await primary(t, state);
  let runs = 0;
  t.equal(await store.applyBatch('p', { position: 0, generation: 1 }, 5, async (w) => {
    runs++;
    await w.put('items', { id: 'i1' }, 5);
  }), true);
  t.equal(runs, 1, 'the batch itself ran once');
  t.equal(commands('commitTransaction'), 2, 'the commit was sent again');

  await t.rejects(store.applyBatch('p', { position: 5, generation: 1 }, 6, async (w) => {
    await w.put('items', { id: 'i2' }, 6);
    throw new Error('projection bug');
  }), /projection bug/);
  t.equal(commands('abortTransaction'), 1, 'the failed batch\'s transaction was aborted');
  t.equal(commands('commitTransaction'), 2, 'and not committed');
});

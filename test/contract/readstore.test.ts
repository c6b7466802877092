import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { MongoReadStore } from '../../infra/readstore/mongo.js';
import { InvalidCursorError, type CheckpointInfo, type Doc, type FindOptions, type PauseHolder, type ProjectionWriter, type ReadStore } from '../../infra/readstore/port.js';
import { putDocs, swapInThread, swapOn, type SwapSpec, type Swapper } from '../support/generation-swapper.js';
import { tempDir } from '../support/temp.js';

/*
 * Type checks (`npm test` runs tsc first): finishRebuild always takes the rebuild's own generation, in the port and in
 * both adapters, so that no caller can swap in whatever generation the slot holds (another rebuild's, still being written).
 */
type FinishArgs<S extends Pick<ReadStore, 'finishRebuild'>> = Parameters<S['finishRebuild']>;
// @ts-expect-error: no options
const finishWithoutOptions: FinishArgs<ReadStore> = ['p'];
// @ts-expect-error: options without the generation
const finishWithoutGeneration: FinishArgs<ReadStore> = ['p', { stale: { position: 1, generation: 1 } }];
// @ts-expect-error: the embedded adapter's own signature
const embeddedWithoutGeneration: FinishArgs<EmbeddedReadStore> = ['p', {}];
// @ts-expect-error: the MongoDB adapter's own signature
const mongoWithoutGeneration: FinishArgs<MongoReadStore> = ['p', {}];

/** What the contract needs to know about one adapter under test. */
interface Subject {
  store: ReadStore;
  /** applyBatch is all-or-nothing (a failing batch leaves no document behind). */
  atomicBatches: boolean;
  /** The physical tables/collections, as `<collection>@<generation>`, to see generations come and go. */
  physical(): Promise<string[]>;
  /**
   * Starts swapping rebuilt generations of `spec.projection` in on a second connection to the same data
   * (file or database), running while the test reads on `store`.
   */
  swapper(spec: SwapSpec): Promise<Swapper>;
  /** A second connection to the same data, as another process would have. */
  another(): Promise<ReadStore>;
}

interface TeamDoc extends Doc {
  score?: number;
  active: boolean;
  team?: string | null;
  meta: { level: number };
}

const DOCS: TeamDoc[] = [
  { id: 'd01', score: 3, active: true, team: 'red', meta: { level: 1 } },
  { id: 'd02', score: 1, active: false, team: 'blue', meta: { level: 2 } },
  { id: 'd03', score: 2, active: true, team: null, meta: { level: 1 } },
  { id: 'd04', score: 3, active: true, team: 'green', meta: { level: 2 } },
  { id: 'd05', score: 1, active: true, team: 'red', meta: { level: 3 } },
  { id: 'd06', score: 2, active: false, team: 'blue', meta: { level: 1 } },
  { id: 'd07', score: 3, active: false, team: null, meta: { level: 2 } },
  { id: 'd08', score: 5, active: true, team: 'red', meta: { level: 1 } },
  { id: 'd09', score: 1, active: true, team: 'green', meta: { level: 2 } },
  { id: 'd10', score: 2, active: true, team: 'blue', meta: { level: 3 } },
  { id: 'd11', score: 4, active: false, team: 'red', meta: { level: 1 } },
  { id: 'd12', score: 3, active: true, team: 'blue', meta: { level: 2 } },
  { id: 'd14', score: 2, active: false, meta: { level: 1 } }, // no team at all
];

/** The one contract, run against every adapter. */
async function readStoreContract(t: Test, open: () => Promise<Subject>): Promise<void> {
  const subject = await open();
  const { store } = subject;
  t.teardown(() => store.close());
  /** Runs a live batch from the stored checkpoint. */
  const apply = async (projection: string, position: number, fn: (w: ProjectionWriter) => Promise<void>) =>
    store.applyBatch(projection, await store.checkpoint(projection), position, fn);

  await t.test('register, put and get', async (t) => {
    await store.register('alpha', [{ name: 'agents', indexes: [['project_id', 'name']] }, { name: 'docs', indexes: [['score'], ['team']] }]);
    await store.register('beta', [{ name: 'others' }]);
    t.strictSame(await store.checkpoint('alpha'), { projection: 'alpha', position: 0, generation: 1, updated_at: null });
    t.equal(await apply('alpha', 10, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Ann', project_id: 'p1', tags: ['x'], profile: { age: 3 } }, 10);
      await w.put('agents', { id: 'a2', at: new Date(0), gone: undefined }, 10);
    }), true);
    t.strictSame(await store.get('agents', 'a1'), { id: 'a1', name: 'Ann', project_id: 'p1', tags: ['x'], profile: { age: 3 }, _position: 10 },
      'the domain fields and _position, nothing else');
    t.strictSame(await store.get('agents', 'a2'), { id: 'a2', at: '1970-01-01T00:00:00.000Z', _position: 10 }, 'stored as JSON');
    t.equal(await store.get('agents', 'nobody'), undefined);
    t.match(await store.checkpoint('alpha'), { projection: 'alpha', position: 10, generation: 1, updated_at: String });
    await store.register('alpha', [{ name: 'agents', indexes: [['project_id', 'name']] }, { name: 'docs', indexes: [['score'], ['team']] }]);
    t.match(await store.checkpoint('alpha'), { position: 10, generation: 1 }, 'registering again changes nothing');
    t.ok(await store.get('agents', 'a1'));
    await t.rejects(store.get('unregistered', 'x'), /unknown collection/);
    await t.rejects(store.register('alpha', [{ name: 'Bad-Name' }]), /invalid collection name/);
  });

  await t.test('put is guarded by position and replaces the document', async (t) => {
    t.equal(await apply('alpha', 20, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Older' }, 5);
      await w.put('agents', { id: 'a1', name: 'Same' }, 10);
    }), true);
    t.match(await store.get('agents', 'a1'), { name: 'Ann', _position: 10 }, 'an older or equal position does not overwrite');
    t.equal(await apply('alpha', 21, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Newer' }, 11);
      await w.put('agents', { id: 'a1', name: 'Twice' }, 12);
      await w.put('agents', { id: 'a1', name: 'Again' }, 12);
    }), true);
    t.strictSame(await store.get('agents', 'a1'), { id: 'a1', name: 'Twice', _position: 12 },
      'a newer position replaces the whole document; a second write at the same position is ignored');
  });

  await t.test('delete leaves an invisible tombstone', async (t) => {
    t.equal(await apply('alpha', 30, async (w) => { await w.delete('agents', 'a1', 13); }), true);
    t.equal(await store.get('agents', 'a1'), undefined);
    t.equal(await store.count('agents'), 1);
    t.strictSame((await store.find('agents')).items.map((d) => d.id), ['a2']);
    t.equal(await apply('alpha', 31, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Late' }, 12);
      await w.delete('agents', 'a1', 13);
    }), true);
    t.equal(await store.get('agents', 'a1'), undefined, 'an older put does not resurrect it');
    t.equal(await apply('alpha', 32, async (w) => { await w.put('agents', { id: 'a1', name: 'Back' }, 14); }), true);
    t.strictSame(await store.get('agents', 'a1'), { id: 'a1', name: 'Back', _position: 14 }, 'a newer one does');
  });

  await t.test('find: where, sort, limit', async (t) => {
    t.equal(await apply('alpha', 40, async (w) => {
      for (const d of DOCS) await w.put('docs', d, 40);
      await w.put('docs', { id: 'd13', score: 9, active: true, team: 'red', meta: { level: 1 } }, 40);
      await w.delete('docs', 'd13', 41);
    }), true);
    const where = async (w: FindOptions['where']) => (await store.find<TeamDoc>('docs', { where: w })).items.map((d) => d.id);
    const expected = (f: (d: TeamDoc) => boolean) => DOCS.filter(f).map((d) => d.id);
    t.strictSame(await where({}), expected(() => true), 'default order: id ascending, tombstones hidden');
    t.strictSame(await where({ active: true }), expected((d) => d.active), 'boolean');
    t.strictSame(await where({ team: null }), expected((d) => d.team == null), 'null matches null and missing');
    t.strictSame(await where({ team: { $in: ['red', 'green'] } }), expected((d) => d.team === 'red' || d.team === 'green'), '$in');
    t.strictSame(await where({ team: { $in: [] } }), [], 'empty $in');
    t.strictSame(await where({ team: { $in: ['green', null] } }), expected((d) => d.team === 'green' || d.team == null),
      '$in with null matches null and missing, as `team: null` does');
    t.equal(await store.count('docs', { team: { $in: [null] } }), DOCS.filter((d) => d.team == null).length);
    t.strictSame(await where({ active: true, team: 'red' }), expected((d) => d.active && d.team === 'red'), 'conjunction');
    t.strictSame(await where({ 'meta.level': 2 }), expected((d) => d.meta.level === 2), 'nested field');
    t.strictSame(await where({ score: 3 }), expected((d) => d.score === 3), 'number');
    t.strictSame(await where({ id: 'd05' }), ['d05'], 'by id');
    t.strictSame(await where({ id: { $in: ['d02', 'd01', 'd13'] } }), ['d01', 'd02'], 'ids, tombstone excluded');
    const sorted = async (order: 'asc' | 'desc') =>
      (await store.find<TeamDoc>('docs', { sort: { field: 'score', order } })).items.map((d) => d.id);
    t.strictSame(await sorted('asc'), inOrder(DOCS, 'score', 'asc'), 'ascending, ties by id');
    t.strictSame(await sorted('desc'), inOrder(DOCS, 'score', 'desc'), 'descending, ties by id descending');
    const page = await store.find<TeamDoc>('docs', { where: { active: true }, sort: { field: 'score', order: 'desc' }, limit: 3 });
    t.strictSame(page.items.map((d) => d.id), inOrder(DOCS.filter((d) => d.active), 'score', 'desc').slice(0, 3));
    t.type(page.next_cursor, 'string');
    t.strictSame(page.items[0], { ...DOCS.find((d) => d.id === 'd08'), _position: 40 }, 'items look like get()');
  });

  await t.test('find: the stores\' own fields cannot be queried or sorted on, and a limit is a whole number from 1', async (t) => {
    // On MongoDB `_deleted: true` replaced the tombstone filter (tombstones listed), `_position` was a real field; the
    // embedded store read both as null: answers that differed by store.
    for (const field of ['_position', '_deleted', '_id', 'meta._level', 'meta..level', 'meta.', '.meta', '', 'a'.repeat(129)]) {
      await t.rejects(store.find('docs', { where: { [field]: 1 } }), /invalid field/, `where ${JSON.stringify(field)}`);
      await t.rejects(store.find('docs', { sort: { field, order: 'asc' } }), /invalid sort field/, `sort ${JSON.stringify(field)}`);
      await t.rejects(store.count('docs', { [field]: 1 }), /invalid field/, `count ${JSON.stringify(field)}`);
    }
    t.equal((await store.find('docs', { where: { [`m${'e'.repeat(127)}`]: 1 } })).items.length, 0, 'a field of 128 characters is a field');
    t.equal((await store.find('docs', { where: { meta_data: 1 } })).items.length, 0, 'underscores inside a name');
    // 0 answered an empty page without a cursor (the end of the listing); -2 listed all but two on one store.
    for (const limit of [0, -1, -2, 1.5, Number.NaN, Infinity]) await t.rejects(store.find('docs', { limit }), RangeError, `limit ${limit}`);
    const one = await store.find('docs', { limit: 1 });
    t.strictSame([one.items.length, typeof one.next_cursor], [1, 'string'], 'limit 1: one, and a cursor to the rest');
  });

  await t.test('find: cursor paging visits every document once', async (t) => {
    const cases: Array<{ sort?: FindOptions['sort']; where?: FindOptions['where'] }> = [
      {}, { sort: { field: 'id', order: 'desc' } },
      { sort: { field: 'score', order: 'asc' } }, { sort: { field: 'score', order: 'desc' } },
      { sort: { field: 'meta.level', order: 'asc' } }, { sort: { field: 'score', order: 'desc' }, where: { active: true } },
    ];
    for (const c of cases) {
      const docs = DOCS.filter((d) => !c.where || d.active);
      const want = inOrder(docs, c.sort?.field ?? 'id', c.sort?.order ?? 'asc');
      for (const limit of [1, 3, 5, docs.length]) {
        t.strictSame(await pageAll(store, { ...c, limit }), want, `${JSON.stringify(c)} by ${limit}`);
      }
    }
  });

  // Documents without a value in the sort field (optional fields: archived_at, last_seen...).
  await t.test('find: cursor paging over null sort values', async (t) => {
    for (const order of ['asc', 'desc'] as const) {
      const want = inOrder(DOCS, 'team', order);
      for (const limit of [1, 2, 4]) {
        t.strictSame(await pageAll(store, { sort: { field: 'team', order }, limit }), want, `team ${order} by ${limit}`);
      }
    }
  });

  await t.test('an invalid cursor is rejected', async (t) => {
    for (const cursor of ['not a cursor', Buffer.from('[1]').toString('base64url'), Buffer.from('{"a":1}').toString('base64url')]) {
      await t.rejects(store.find('docs', { cursor }), InvalidCursorError, cursor);
    }
    // A well-formed pair whose value no listing can have produced (the token is client-supplied).
    for (const value of [{ a: 1 }, [1, 2]]) {
      const cursor = Buffer.from(JSON.stringify([value, 'd01'])).toString('base64url');
      await t.rejects(store.find('docs', { cursor, sort: { field: 'score', order: 'asc' } }), InvalidCursorError, JSON.stringify(value));
    }
  });

  await t.test('count', async (t) => {
    t.equal(await store.count('docs'), DOCS.length, 'tombstones are not counted');
    t.equal(await store.count('docs', { active: true }), DOCS.filter((d) => d.active).length);
    t.equal(await store.count('docs', { team: { $in: ['blue'] }, active: false }), DOCS.filter((d) => d.team === 'blue' && !d.active).length);
    t.equal(await store.count('docs', { team: null }), DOCS.filter((d) => d.team == null).length);
  });

  await t.test('applyBatch: documents and checkpoint together, or nothing', async (t) => {
    t.equal(await apply('beta', 50, async (w) => {
      await w.put('others', { id: 'o1' }, 50);
      t.match(await w.get('others', 'o1'), { id: 'o1' }, 'a batch reads its own writes');
      t.strictSame((await w.find('others', {})).items.map((d) => d.id), ['o1']);
    }), true);
    t.match(await store.checkpoint('beta'), { position: 50, generation: 1 });
    t.ok(await store.get('others', 'o1'));

    let called = false;
    t.equal(await store.applyBatch('beta', { position: 0, generation: 1 }, 60, async (w) => {
      called = true;
      await w.put('others', { id: 'o2' }, 60);
    }), false, 'a stale expected position');
    t.equal(await store.applyBatch('beta', { position: 50, generation: 2 }, 60, async (w) => {
      called = true;
      await w.put('others', { id: 'o2' }, 60);
    }), false, 'a wrong generation');
    t.equal(called, false, 'the batch did not run');
    t.equal(await store.get('others', 'o2'), undefined);
    t.equal(await store.applyBatch('nobody', { position: 0, generation: 1 }, 1, async () => {}), false, 'an unknown projection');

    await t.rejects(apply('beta', 70, async (w) => {
      await w.put('others', { id: 'o3' }, 70);
      throw new Error('projection bug');
    }), /projection bug/);
    t.match(await store.checkpoint('beta'), { position: 50 }, 'a failed batch does not move the checkpoint');
    if (subject.atomicBatches) {
      t.equal(await store.get('others', 'o3'), undefined, 'and its documents are rolled back');
    } else {
      // Without transactions (MongoDB standalone) writes are not undone; the checkpoint did not move,
      // so the projection applies the same events again and the position guard absorbs the repeat.
      t.ok(await store.get('others', 'o3'), 'without transactions its documents stay, ahead of the checkpoint');
    }
  });

  await t.test('a writer may not write another projection\'s collection', async (t) => {
    const before = await store.checkpoint('alpha');
    await t.rejects(apply('alpha', 90, async (w) => { await w.put('others', { id: 'intruder' }, 90); }), /may not write/);
    await t.rejects(apply('alpha', 90, async (w) => { await w.delete('others', 'o1', 90); }), /may not write/);
    await t.rejects(apply('alpha', 90, async (w) => { await w.put('unregistered', { id: 'x' }, 90); }), /unknown collection/);
    t.strictSame(await store.checkpoint('alpha'), before);
    t.equal(await store.get('others', 'intruder'), undefined);
    t.ok(await store.get('others', 'o1'));
  });

  await t.test('blue/green rebuild', async (t) => {
    const live = await store.checkpoint('alpha');
    const started = await store.startRebuild('alpha');
    t.match(started, { projection: 'alpha', position: 0, generation: live.generation + 1 });
    t.strictSame(await store.rebuildCheckpoint('alpha'), started);
    t.strictSame(await subject.physical(), ['agents@1', 'agents@2', 'docs@1', 'docs@2', 'others@1'], 'a fresh generation beside the live one');
    t.strictSame(await store.checkpoint('alpha'), live, 'the live checkpoint is untouched');

    // Positions past the live runner's, so that the rebuild has caught up when it is swapped in.
    const top = live.position + 15;
    t.equal(await store.applyBatch('alpha', { position: 0, generation: 2 }, live.position - 1, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Rebuilt early' }, live.position - 1);
    }, { rebuild: true }), true, 'a rebuild batch');
    t.match(await store.finishRebuild('alpha', { generation: started.generation }), { swapped: false, live: { position: live.position, generation: 1 } },
      'not swapped in before it has reached the live checkpoint');
    t.match(await store.get('agents', 'a1'), { name: 'Back' }, 'nothing changed');
    t.equal(await store.applyBatch('alpha', { position: live.position - 1, generation: 2 }, top, async (w) => {
      await w.put('agents', { id: 'a1', name: 'Rebuilt' }, top);
      await w.put('docs', { id: 'r1', score: 1, active: true, meta: { level: 1 } }, top);
    }, { rebuild: true }), true, 'the rebuild catches up');
    t.equal(await store.applyBatch('alpha', { position: 0, generation: 2 }, top + 1, async () => {}, { rebuild: true }), false,
      'the rebuild slot has its own guarded checkpoint');
    t.match(await store.get('agents', 'a1'), { name: 'Back' }, 'queries still read the live generation');
    t.equal(await store.get('docs', 'r1'), undefined);
    t.equal(await store.count('docs'), DOCS.length);
    t.equal(await apply('alpha', live.position + 1, async (w) => { await w.put('agents', { id: 'a9', name: 'Live' }, live.position + 1); }),
      true, 'the live projection keeps running meanwhile');
    t.match(await store.rebuildCheckpoint('alpha'), { position: top, generation: 2 });

    const { swapped, live: finished } = await store.finishRebuild('alpha', { generation: started.generation });
    t.equal(swapped, true);
    t.match(finished, { projection: 'alpha', position: top, generation: 2 });
    t.strictSame(await store.checkpoint('alpha'), finished, 'the live checkpoint is the rebuilt one');
    t.equal(await store.rebuildCheckpoint('alpha'), undefined);
    t.match(await store.get('agents', 'a1'), { name: 'Rebuilt', _position: top }, 'queries read the rebuilt documents');
    t.equal(await store.get('agents', 'a9'), undefined);
    t.strictSame((await store.find('docs')).items.map((d) => d.id), ['r1']);
    t.strictSame(await subject.physical(), ['agents@2', 'docs@2', 'others@1'], 'the old generation is gone');
    t.equal(await store.applyBatch('alpha', { position: live.position + 1, generation: 1 }, 200, async () => {}), false,
      'a live batch expecting the old generation is refused');
    t.equal(await store.applyBatch('alpha', { position: top, generation: 2 }, top + 1, async (w) => {
      await w.put('agents', { id: 'a1', name: 'After' }, top + 1);
    }), true, 'the runner continues from the rebuilt checkpoint');
    t.match(await store.get('agents', 'a1'), { name: 'After' });

    t.strictSame(await store.finishRebuild('alpha', { generation: started.generation }), { swapped: false, live: await store.checkpoint('alpha'), superseded: true },
      'finishing it again: superseded (its slot is empty), nothing changes');
    await t.rejects(store.finishRebuild('nobody', { generation: 2 }), /no rebuild in progress/);
    await t.rejects(store.startRebuild('nobody'), /unknown projection/);
    t.match(await store.startRebuild('alpha'), { generation: 3 });
    t.match(await store.startRebuild('alpha'), { position: 0, generation: 4 }, 'starting again abandons the previous attempt');
    t.strictSame(await subject.physical(), ['agents@2', 'agents@4', 'docs@2', 'docs@4', 'others@1'], 'whose tables are dropped');
    t.match(await store.finishRebuild('alpha', { generation: 3 }), { swapped: false, superseded: true, live: { generation: 2 } }, 'and which is not swapped in');
    // The live runner is at top + 1: a rebuild that has not reached it is not swapped in (readers told
    // that it was applied would miss it), and nothing changes until it has.
    t.match(await store.finishRebuild('alpha', { generation: 4 }), { swapped: false, live: { position: top + 1, generation: 2 } });
    t.match(await store.rebuildCheckpoint('alpha'), { position: 0, generation: 4 });
    t.match(await store.get('agents', 'a1'), { name: 'After' });
    t.equal(await store.applyBatch('alpha', { position: 0, generation: 4 }, top + 1, async () => {}, { rebuild: true }), true);
    t.match(await store.finishRebuild('alpha', { generation: 4 }), { swapped: true, live: { position: top + 1, generation: 4 } });
    t.strictSame(await subject.physical(), ['agents@4', 'docs@4', 'others@1']);
  });

  await t.test('abandonRebuild drops an unfinished generation, and only that one', async (t) => {
    const live = await store.checkpoint('alpha');
    const started = await store.startRebuild('alpha');
    await store.abandonRebuild('alpha', started.generation - 1);
    t.strictSame(await store.rebuildCheckpoint('alpha'), started, 'not a generation in the rebuild slot: nothing changes');
    await store.abandonRebuild('alpha', started.generation);
    t.equal(await store.rebuildCheckpoint('alpha'), undefined);
    t.strictSame(await store.checkpoint('alpha'), live, 'the live checkpoint is untouched');
    t.strictSame(await subject.physical(), ['agents@4', 'docs@4', 'others@1'], 'the unfinished tables are gone');
    await store.abandonRebuild('alpha', live.generation);
    t.strictSame(await store.checkpoint('alpha'), live, 'the live generation is never abandoned');
  });

  await t.test('listCheckpoints: the live checkpoint of every projection', async (t) => {
    await store.startRebuild('beta');
    t.strictSame(await store.listCheckpoints(), [await store.checkpoint('alpha'), await store.checkpoint('beta')]);
    t.match(await store.listCheckpoints(), [{ projection: 'alpha', generation: 4 }, { projection: 'beta', position: 50, generation: 1 }]);
    t.strictSame(await store.listCheckpoints({ timeoutMs: 5000 }), await store.listCheckpoints(), 'a bound the store answers within (a probe\'s) changes nothing');
  });

  await t.test('recordFailure: beside the live checkpoint until cleared, and not carried into a rebuilt generation', async (t) => {
    await store.register('gamma', [{ name: 'gamma_docs' }]);
    t.equal(await apply('gamma', 5, async (w) => { await w.put('gamma_docs', { id: 'g1' }, 5); }), true);
    const before = await store.checkpoint('gamma');
    t.notOk('failure' in before, 'none until one is recorded');
    const failure = { message: 'ProviderError: embeddings provider answered 503', since: '2026-01-01T00:00:00.000Z', count: 3, last_at: '2026-01-01T00:00:02.000Z' };
    await store.recordFailure('gamma', failure);
    t.strictSame(await store.checkpoint('gamma'), { ...before, failure }, 'position, generation and updated_at unchanged');
    t.strictSame((await store.listCheckpoints()).find((c) => c.projection === 'gamma'), { ...before, failure }, 'listed with it');
    await store.recordFailure('gamma', { ...failure, count: 4 });
    t.strictSame((await store.checkpoint('gamma')).failure, { ...failure, count: 4 }, 'replaced by the next one');
    t.equal(await apply('gamma', 6, async () => {}), true, 'batches commit as before: the guard is position and generation');
    t.match(await store.checkpoint('gamma'), { position: 6, failure: { count: 4 } }, 'a commit leaves it: the runner clears it');
    await store.recordFailure('gamma', null);
    t.notOk('failure' in (await store.checkpoint('gamma')), 'cleared');
    t.notOk('failure' in (await store.listCheckpoints()).find((c) => c.projection === 'gamma')!, 'and not listed');
    await store.recordFailure('gamma', null);
    t.notOk('failure' in (await store.checkpoint('gamma')), 'clearing twice is harmless');

    await store.recordFailure('gamma', failure);
    const rebuild = await store.startRebuild('gamma');
    t.notOk('failure' in rebuild, 'a rebuild starts without one');
    t.equal(await store.applyBatch('gamma', rebuild, 6, async () => {}, { rebuild: true }), true);
    t.notOk('failure' in (await store.rebuildCheckpoint('gamma'))!, 'the rebuild slot never has one');
    t.match(await store.finishRebuild('gamma', { generation: rebuild.generation }), { swapped: true, live: { position: 6, generation: 2 } });
    t.notOk('failure' in (await store.checkpoint('gamma')), 'the swapped-in generation starts without the old one\'s failure');
  });

  await t.test('recordPause: each holder\'s record beside the live checkpoint until it clears it, kept through a rebuild swapped in', async (t) => {
    const other = await subject.another();
    t.teardown(() => other.close());
    await store.register('delta', [{ name: 'delta_docs' }]);
    t.equal(await apply('delta', 5, async (w) => { await w.put('delta_docs', { id: 'd1' }, 5); }), true);
    const before = await store.checkpoint('delta');
    t.notOk('paused_at' in before || 'paused_by' in before, 'none until one is recorded');
    const a: PauseHolder = { host: 'node-a', pid: 101, id: 'a1' };
    const b: PauseHolder = { host: 'node-b', pid: 202, id: 'b2' };
    const [t0, t1, t2] = ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:02.000Z'];
    await store.recordPause('delta', a, t1);
    const onlyA = { ...before, paused_at: t1, paused_by: [{ ...a, since: t1 }] };
    t.strictSame(await store.checkpoint('delta'), onlyA, 'position, generation and updated_at unchanged');
    t.strictSame((await store.listCheckpoints()).find((c) => c.projection === 'delta'), onlyA, 'listed with it');
    await other.recordPause('delta', b, t0);
    t.strictSame(await store.checkpoint('delta'), { ...before, paused_at: t0, paused_by: [{ ...b, since: t0 }, { ...a, since: t1 }] },
      'another holder (another process) records its own beside it: earliest first, `paused_at` the earliest');
    await store.recordPause('delta', a, t2);
    t.strictSame((await store.checkpoint('delta')).paused_by, [{ ...b, since: t0 }, { ...a, since: t2 }], 'a holder\'s next record replaces its own');
    t.equal(await apply('delta', 6, async () => {}), true, 'batches commit as before');
    t.match(await store.checkpoint('delta'), { position: 6, paused_at: t0, paused_by: [{ id: 'b2' }, { id: 'a1' }] }, 'a commit leaves them');
    const rebuild = await store.startRebuild('delta');
    t.notOk('paused_at' in rebuild || 'paused_by' in rebuild, 'the rebuild slot never has one');
    t.equal(await store.applyBatch('delta', rebuild, 6, async () => {}, { rebuild: true }), true);
    t.match(await store.finishRebuild('delta', { generation: rebuild.generation }),
      { swapped: true, live: { generation: rebuild.generation, paused_at: t0, paused_by: [{ id: 'b2' }, { id: 'a1' }] } },
      'a rebuild swapped in keeps them: the runners are still paused');
    await other.recordPause('delta', b, null);
    t.match(await store.checkpoint('delta'), { paused_at: t2 });
    t.strictSame((await store.checkpoint('delta')).paused_by, [{ ...a, since: t2 }], 'clearing one holder\'s record leaves the other\'s');
    await Promise.all([store.recordPause('delta', b, t1), other.recordPause('delta', { ...a, id: 'a3' }, t1)]);
    t.strictSame((await store.checkpoint('delta')).paused_by?.map((r) => r.id), ['a3', 'b2', 'a1'], 'records written at once by two connections are all kept');
    for (const holder of [a, b, { ...a, id: 'a3' }]) await store.recordPause('delta', holder, null);
    const cleared = await store.checkpoint('delta');
    t.notOk('paused_at' in cleared || 'paused_by' in cleared, 'cleared');
    await store.recordPause('delta', a, null);
    const listed = (await store.listCheckpoints()).find((c) => c.projection === 'delta')!;
    t.notOk('paused_at' in listed || 'paused_by' in listed, 'clearing twice is harmless');
    await t.rejects(store.recordPause('delta', { ...a, id: 'a.b' }, t1), /invalid pause holder id/, 'an id that is no field name is refused');
    t.strictSame(await store.checkpoint('delta'), cleared);
  });

  await t.test('finishRebuild with the rebuild\'s generation: refused (superseded) once another start holds the slot, nothing changes', async (t) => {
    const other = await subject.another();
    t.teardown(() => other.close());
    await store.register('overtaken', [{ name: 'overtaken_docs' }]);
    t.equal(await apply('overtaken', 3, async (w) => { await w.put('overtaken_docs', { id: 'o1', v: 'live' }, 3); }), true);
    const live = await store.checkpoint('overtaken');
    const first = await store.startRebuild('overtaken');
    t.equal(await store.applyBatch('overtaken', first, 3, async (w) => { await w.put('overtaken_docs', { id: 'o1', v: 'first' }, 3); }, { rebuild: true }), true);
    const second = await other.startRebuild('overtaken');
    t.equal(await other.applyBatch('overtaken', second, 3, async (w) => { await w.put('overtaken_docs', { id: 'o1', v: 'second' }, 3); }, { rebuild: true }), true,
      'the second rebuild has caught up too: without a generation, finishing would swap it in');
    t.strictSame(await store.finishRebuild('overtaken', { generation: first.generation }), { swapped: false, live, superseded: true });
    t.strictSame(await store.finishRebuild('overtaken', { generation: first.generation, stale: { position: live.position, generation: live.generation } }),
      { swapped: false, live, superseded: true }, 'not with a stale live checkpoint either');
    t.strictSame(await store.checkpoint('overtaken'), live, 'the live checkpoint is untouched');
    t.match(await store.rebuildCheckpoint('overtaken'), { position: 3, generation: second.generation }, 'the second one keeps the slot');
    t.match(await store.get('overtaken_docs', 'o1'), { v: 'live' });
    t.match(await other.finishRebuild('overtaken', { generation: second.generation }), { swapped: true, live: { position: 3, generation: second.generation } });
    t.match(await store.get('overtaken_docs', 'o1'), { v: 'second' }, 'its own documents');
    t.match(await store.finishRebuild('overtaken', { generation: first.generation }), { swapped: false, superseded: true, live: { generation: second.generation } },
      'a slot emptied by the other\'s swap: still superseded, not an error');
  });

  // After the listings of every projection's checkpoint above: a projection of its own.
  await t.test('startRebuild called twice at once: a generation each, the later one supersedes the earlier', async (t) => {
    const other = await subject.another();
    t.teardown(() => other.close());
    await store.register('racing', [{ name: 'racing_docs' }]);
    t.equal(await apply('racing', 3, async (w) => { await w.put('racing_docs', { id: 'r1', v: 'live' }, 3); }), true);
    const live = await store.checkpoint('racing');
    const racingTables = async () => (await subject.physical()).filter((p) => p.startsWith('racing_docs@'));
    let later: CheckpointInfo | undefined;
    for (const slot of ['an empty rebuild slot', 'a rebuild in progress']) {
      const starts = await Promise.all([store.startRebuild('racing'), other.startRebuild('racing')]);
      const [first, second] = [...starts].sort((x, y) => x.generation - y.generation) as [CheckpointInfo, CheckpointInfo];
      later = second;
      t.ok(first.generation !== second.generation && first.generation > live.generation, `from ${slot}: generations ${first.generation} and ${second.generation}`);
      t.match(starts, [{ projection: 'racing', position: 0 }, { projection: 'racing', position: 0 }]);
      t.match(await store.rebuildCheckpoint('racing'), { position: 0, generation: second.generation }, 'the later one holds the rebuild slot');
      t.strictSame(await store.checkpoint('racing'), live, 'the live checkpoint is untouched');
      t.strictSame(await racingTables(), [`racing_docs@${live.generation}`, `racing_docs@${second.generation}`].sort(),
        'the superseded generation\'s tables are gone (and the one superseded before it), the later one\'s are there');
      t.equal(await store.applyBatch('racing', first, 3, async (w) => { await w.put('racing_docs', { id: 'r1', v: 'superseded' }, 3); }, { rebuild: true }),
        false, 'a batch of the superseded generation is refused');
      t.equal(await other.applyBatch('racing', second, 3, async (w) => { await w.put('racing_docs', { id: 'r1', v: 'rebuilt' }, 3); }, { rebuild: true }),
        true, 'a batch of the later one is applied');
      t.strictSame(await racingTables(), [`racing_docs@${live.generation}`, `racing_docs@${second.generation}`].sort(), 'and nothing came back');
    }
    t.match(await store.finishRebuild('racing', { generation: later!.generation }), { swapped: true, live: { position: 3, generation: later!.generation } });
    t.match(await store.get('racing_docs', 'r1'), { v: 'rebuilt' }, 'the later one is swapped in');
    t.strictSame(await racingTables(), [`racing_docs@${later!.generation}`]);
  });

  await t.test('finishRebuild and startRebuild at once: the live generation keeps its documents', async (t) => {
    const other = await subject.another();
    t.teardown(() => other.close());
    const before = await store.checkpoint('racing');
    const rebuild = await store.startRebuild('racing');
    t.equal(await store.applyBatch('racing', rebuild, before.position, async (w) => {
      await w.put('racing_docs', { id: 'r1', v: 'finished' }, before.position);
    }, { rebuild: true }), true);
    const [finished, started] = await Promise.all([store.finishRebuild('racing', { generation: rebuild.generation }), other.startRebuild('racing')]);
    const live = await store.checkpoint('racing');
    t.equal(live.generation, finished.swapped ? rebuild.generation : before.generation, `swapped: ${finished.swapped}; live is the generation that says`);
    t.match(await store.get('racing_docs', 'r1'), { v: finished.swapped ? 'finished' : 'rebuilt' }, 'and its documents are there');
    t.match(await store.rebuildCheckpoint('racing'), { position: 0, generation: started.generation }, 'the start holds the rebuild slot');
    t.strictSame((await subject.physical()).filter((p) => p.startsWith('racing_docs@')), [`racing_docs@${live.generation}`, `racing_docs@${started.generation}`].sort());
  });

  // Last: its projection would show in the physical listings above.
  await t.test('reads find a document that always exists while another connection keeps swapping generations in', async (t) => {
    // More documents than a first batch of MongoDB (101): a whole-collection page takes a getMore too.
    const spec: SwapSpec = { projection: 'swapped', collection: 'swapped_items', docs: 120 };
    await store.register(spec.projection, [{ name: spec.collection, indexes: [['n']] }]);
    t.equal(await apply(spec.projection, spec.docs, (w) => putDocs(w, spec)), true);
    let generation = (await store.checkpoint(spec.projection)).generation;
    const wrong: string[] = [];
    let rounds = 0;
    let during = 0;
    // At least 3 s, and on a slow server until enough swaps have happened during reads (30 s at most).
    const started = Date.now();
    const enough = () => Date.now() - started >= (during >= 20 ? 3_000 : 30_000);
    const swapper = await subject.swapper(spec);
    try {
      for (; !enough(); rounds++) {
        try {
          const got = await store.get<{ id: string; n: number }>(spec.collection, 'd7');
          const one = await store.find<{ id: string; n: number }>(spec.collection, { where: { n: 3 }, limit: 5 });
          const all = await store.find<{ id: string; n: number }>(spec.collection, { sort: { field: 'n', order: 'desc' }, limit: spec.docs });
          const count = await store.count(spec.collection);
          const answers = [got?.n, one.items.map((d) => d.id).join(), all.items.length, all.items[0]?.n, count];
          const right = [7, 'd3', spec.docs, spec.docs - 1, spec.docs];
          if (answers.join('|') !== right.join('|')) wrong.push(`answered ${answers.join('|')} instead of ${right.join('|')}`);
        } catch (error) {
          wrong.push(String(error));
        }
        // The reads of this round ran between the two checkpoint reads: did a swap happen during them?
        const now = (await store.checkpoint(spec.projection)).generation;
        if (now !== generation) during++;
        generation = now;
      }
    } finally {
      const swaps = await swapper.stop();
      t.comment(`${swaps} swaps, ${rounds} rounds of reads, ${during} of them during a swap`);
    }
    t.ok(during >= 20, `swaps happened during ${during} rounds of reads`);
    t.strictSame([...new Set(wrong)], [], `no read missed (${wrong.length} of ${rounds} rounds did)`);
  });

  await t.test('finishRebuild with a stale live checkpoint (past the log\'s end): swapped in behind it, only while it is that one', async (t) => {
    await store.register('restored', [{ name: 'restored_docs' }]);
    t.equal(await apply('restored', 40, async (w) => { await w.put('restored_docs', { id: 'd1', v: 'from a longer log' }, 40); }), true);
    const live = await store.checkpoint('restored');
    const rebuild = await store.startRebuild('restored');
    t.equal(await store.applyBatch('restored', rebuild, 3, async (w) => {
      await w.put('restored_docs', { id: 'd1', v: 'from this log' }, 3);
    }, { rebuild: true }), true);
    const { generation } = rebuild;
    t.match(await store.finishRebuild('restored', { generation }), { swapped: false, live: { position: 40 } }, 'without it: behind the live checkpoint, not swapped');
    t.match(await store.finishRebuild('restored', { generation, stale: { position: 39, generation: live.generation } }), { swapped: false },
      'not when the live checkpoint is at another position (a runner moved it: it was not stale)');
    t.match(await store.finishRebuild('restored', { generation, stale: { position: 40, generation: live.generation + 1 } }), { swapped: false },
      'nor of another generation');
    t.match(await store.get('restored_docs', 'd1'), { v: 'from a longer log' }, 'nothing changed meanwhile');
    t.match(await store.finishRebuild('restored', { generation, stale: { position: 40, generation: live.generation } }),
      { swapped: true, live: { position: 3, generation: rebuild.generation } });
    t.match(await store.get('restored_docs', 'd1'), { v: 'from this log' }, 'queries read the rebuilt generation');
    t.equal(await store.rebuildCheckpoint('restored'), undefined);
  });

  // Ids, keys and values that clients choose: Unicode names, configuration values (any JSON, up to 1 MiB).
  await t.test('Unicode ids and values, keys of any kind and large documents: stored, found and ordered alike', async (t) => {
    await store.register('shapes', [{ name: 'shapes_docs', indexes: [['label']] }]);
    const ids = ['e', 'é', 'z', 'Ω', '中', '\uFFFD', '\u{1D538}', 'a b', 'A', '0'];
    const value = {
      'a\u0000b': 1, 'dotted.key': { '$set': { x: 1 } }, '$inc': [{ '': 'empty key', '50%': '%2E' }], '%': '%', 'Zoë 🎉 鍵': 'Unicode',
      big: 'x'.repeat(1 << 20), many: Array.from({ length: 10_000 }, (_, i) => ({ i })),
    };
    t.equal(await apply('shapes', 9, async (w) => {
      for (const [i, id] of ids.entries()) await w.put('shapes_docs', { id, label: ids[ids.length - 1 - i] }, 9);
      await w.put('shapes_docs', { id: 'value', label: null, value }, 9);
    }), true);
    t.strictSame(await store.get('shapes_docs', 'value'), { id: 'value', label: null, value, _position: 9 }, 'keys, a 1 MiB string and 10,000 items as written');
    t.strictSame((await store.find('shapes_docs', { where: { id: 'value' } })).items, [{ id: 'value', label: null, value, _position: 9 }], 'find answers them alike');
    t.strictSame(await store.get('shapes_docs', '中'), { id: '中', label: ids[ids.length - 1 - ids.indexOf('中')], _position: 9 });
    t.strictSame((await store.find('shapes_docs', { where: { label: 'é' } })).items.map((d) => d.id), [ids[ids.length - 1 - ids.indexOf('é')]], 'where on a Unicode value');
    // Code point order (UTF-8 bytes), in both stores: not JavaScript's `<` (UTF-16 units), which puts U+1D538 before U+FFFD.
    const byCodePoint = (a: string, b: string) => { const [x, y] = [[...a].map((c) => c.codePointAt(0)!), [...b].map((c) => c.codePointAt(0)!)];
      for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
      return x.length - y.length; };
    const all = [...ids, 'value'].sort(byCodePoint);
    for (const limit of [1, 3, all.length, all.length + 1]) {
      t.strictSame(await pageAll(store, { limit }, 'shapes_docs'), all, `ids ascending by ${limit}`);
      t.strictSame(await pageAll(store, { sort: { field: 'id', order: 'desc' }, limit }, 'shapes_docs'), [...all].reverse(), `ids descending by ${limit}`);
    }
    const labelled = [...ids].sort(byCodePoint).map((label) => ids[ids.length - 1 - ids.indexOf(label)]!);
    for (const limit of [1, 4]) {
      t.strictSame(await pageAll(store, { sort: { field: 'label', order: 'asc' }, limit }, 'shapes_docs'), ['value', ...labelled], `labels ascending by ${limit}`);
      t.strictSame(await pageAll(store, { sort: { field: 'label', order: 'desc' }, limit }, 'shapes_docs'), [...labelled].reverse().concat('value'), `labels descending by ${limit}`);
    }
  });

  // Integers past 2^53 (nanosecond timestamps, 64-bit counters and ids of other systems): doubles, as JavaScript and MongoDB have them.
  await t.test('numbers past 2^53: found by equality, ordered and paged as the doubles they are', async (t) => {
    await store.register('numbers', [{ name: 'numbers_docs', indexes: [['n']] }]);
    const values = [4585699287789486600, -4233094671628086000, 2 ** 60 + 2 ** 10, 2 ** 53 + 2, 2 ** 63, -(2 ** 63), 2 ** 64, 1e21, 12, -0.5];
    t.equal(await apply('numbers', 5, async (w) => {
      for (const [i, n] of values.entries()) for (const copy of ['a', 'b']) await w.put('numbers_docs', { id: `${copy}${i}`, n }, 5);
    }), true);
    for (const [i, n] of values.entries()) {
      t.strictSame((await store.find('numbers_docs', { where: { n } })).items.map((d) => d.id), [`a${i}`, `b${i}`], `where n = ${n}`);
      t.equal(await store.count('numbers_docs', { n: { $in: [n] } }), 2, `count n in [${n}]`);
    }
    const docs = values.flatMap((n, i) => [{ id: `a${i}`, n }, { id: `b${i}`, n }]);
    for (const order of ['asc', 'desc'] as const) {
      for (const limit of [1, 3]) {
        t.strictSame(await pageAll(store, { sort: { field: 'n', order }, limit }, 'numbers_docs'), inOrder(docs, 'n', order), `n ${order} by ${limit}: each once, ties by id`);
      }
    }
  });

  // A batch's unit of work stays open while its projection awaits (MongoDB round trips; a provider call in `apply`).
  await t.test('readers during an open batch see none of it, and nothing of it once it fails', async (t) => {
    await store.register('held', [{ name: 'held_docs', indexes: [['n']] }]);
    t.equal(await apply('held', 10, async (w) => { for (const id of ['h1', 'h2']) await w.put('held_docs', { id, n: 1 }, 10); }), true);
    const before = { h1: await store.get('held_docs', 'h1'), page: await store.find('held_docs', { where: { n: 1 } }), count: await store.count('held_docs') };
    const now = async () => ({ h1: await store.get('held_docs', 'h1'), page: await store.find('held_docs', { where: { n: 1 } }), count: await store.count('held_docs') });
    for (const outcome of ['fails', 'commits'] as const) {
      let opened!: () => void;
      let release!: () => void;
      const open = new Promise<void>((resolve) => { opened = resolve; });
      const held = new Promise<void>((resolve) => { release = resolve; });
      const batch = apply('held', 20, async (w) => {
        await w.put('held_docs', { id: 'h3', n: 1 }, 20);
        await w.put('held_docs', { id: 'h1', n: 2 }, 20);
        await w.delete('held_docs', 'h2', 20);
        opened();
        await held; // e.g. an embeddings call
        if (outcome === 'fails') throw new Error('provider down');
      });
      await open;
      if (subject.atomicBatches) {
        t.strictSame(await now(), before, `while the batch that ${outcome} is open: get, find and count answer as before it`);
      } else {
        t.comment('without transactions (MongoDB standalone) readers see a batch\'s documents as they are written');
      }
      release();
      if (outcome === 'fails') {
        await t.rejects(batch, /provider down/);
        if (subject.atomicBatches) t.strictSame(await now(), before, 'and after it failed');
      } else {
        t.equal(await batch, true);
        t.strictSame(await now(), {
          h1: { id: 'h1', n: 2, _position: 20 },
          page: { items: [{ id: 'h3', n: 1, _position: 20 }], next_cursor: null },
          count: 2,
        }, 'all of it once it committed');
      }
    }
  });
}

/** Ids in the adapters' order: the field (nulls first ascending, last descending), then id, same direction. */
function inOrder(docs: Doc[], field: string, order: 'asc' | 'desc'): string[] {
  const value = (d: Doc) => field.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], d) ?? null;
  const sign = order === 'asc' ? 1 : -1;
  const compare = (a: unknown, b: unknown) => (a === b ? 0 : a === null ? -1 : b === null ? 1 : (a as number) < (b as number) ? -1 : 1);
  return [...docs].sort((a, b) => sign * (compare(value(a), value(b)) || compare(a.id, b.id))).map((d) => d.id);
}

/** Follows next_cursor to the end; fails on a page that repeats or a cursor loop. */
async function pageAll(store: ReadStore, options: FindOptions, collection = 'docs'): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const page = await store.find(collection, { ...options, ...(cursor ? { cursor } : {}) });
    seen.push(...page.items.map((d) => d.id));
    if (!page.next_cursor) return seen;
    cursor = page.next_cursor;
  }
  throw new Error('cursor paging does not end');
}

/** The layout of each read-model table of a file: `rowid` (made since the twenty-fourth session) or `without rowid` (before). */
function layouts(file: string): Record<string, string> {
  const db = new Database(file, { readonly: true });
  try {
    const rows = db.prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name GLOB 'rm_*_g[0-9]*'`).all() as Array<{ name: string; sql: string }>;
    return Object.fromEntries(rows.map((r) => [r.name, /WITHOUT ROWID/i.test(r.sql) ? 'without rowid' : 'rowid']));
  } finally {
    db.close();
  }
}

/** The embedded store on `file`, as the contract takes it. */
const embeddedSubject = (file: string) => async (): Promise<Subject> => ({
  store: new EmbeddedReadStore(file),
  atomicBatches: true,
  // In this thread a second connection could never get between the steps of a read: every call is synchronous.
  swapper: (spec) => swapInThread(file, spec),
  another: async () => new EmbeddedReadStore(file, { checkpointer: false }),
  async physical() {
    return Object.keys(layouts(file)).flatMap((name) => /^rm_(.+)_g(\d+)$/.exec(name)?.slice(1, 3).join('@') ?? []).sort();
  },
});

t.test('embedded', async (t) => {
  await readStoreContract(t, embeddedSubject(join(tempDir(t, 'cairn-contract-'), 'readmodels.db')));
});

t.test('embedded: the whole contract on tables an earlier version made (WITHOUT ROWID, keyed by id), rebuilt into the new layout', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'readmodels.db');
  const old = new Database(file);
  old.pragma('journal_mode = WAL');
  for (const name of ['agents', 'docs', 'others']) {
    old.exec(`CREATE TABLE rm_${name}_g1 (id TEXT PRIMARY KEY, position INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0, doc TEXT NOT NULL) WITHOUT ROWID`);
  }
  old.close();
  await readStoreContract(t, embeddedSubject(file));
  const after = layouts(file);
  t.equal(after.rm_others_g1, 'without rowid', 'a table made before keeps its layout (and served the contract)');
  t.equal(after.rm_docs_g4, 'rowid', 'a rebuild makes the next generation in the new layout');
  const others = Object.entries(after).filter(([name]) => !['rm_others_g1', 'rm_docs_g4'].includes(name));
  t.ok(others.length > 3, `and there are other tables (${others.map(([name]) => name).join(', ')})`);
  t.strictSame(others.filter(([, layout]) => layout !== 'rowid'), [], 'every other table, of collections registered now too, is a rowid table');
});

t.test('embedded: a file from before failures and pauses were recorded gets the columns, and keeps its checkpoints', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'readmodels.db');
  const old = new Database(file);
  old.exec(`CREATE TABLE rm_checkpoints (projection TEXT NOT NULL, slot TEXT NOT NULL CHECK (slot IN ('live', 'rebuild')),
    position INTEGER NOT NULL, generation INTEGER NOT NULL, updated_at TEXT, PRIMARY KEY (projection, slot)) WITHOUT ROWID;
    INSERT INTO rm_checkpoints VALUES ('old', 'live', 7, 1, '2026-01-01T00:00:00.000Z');`);
  old.close();
  // Two connections open it (the server's and its projection thread's): the column is added once.
  const [a, b] = [new EmbeddedReadStore(file, { checkpointer: false }), new EmbeddedReadStore(file, { checkpointer: false })];
  t.teardown(async () => { await a.close(); await b.close(); });
  t.strictSame(await b.listCheckpoints(), [{ projection: 'old', position: 7, generation: 1, updated_at: '2026-01-01T00:00:00.000Z' }]);
  const failure = { message: 'boom', since: '2026-01-01T00:00:01.000Z', count: 1, last_at: '2026-01-01T00:00:01.000Z' };
  await a.recordFailure('old', failure);
  t.strictSame((await b.checkpoint('old')).failure, failure, 'seen by the other connection');
  const holder = { host: 'node-a', pid: 101, id: 'a1' };
  await a.recordPause('old', holder, '2026-01-01T00:00:02.000Z');
  t.strictSame((await b.checkpoint('old')).paused_by, [{ ...holder, since: '2026-01-01T00:00:02.000Z' }]);
});

t.test('embedded: a pause recorded without its holder (a file of the version before holders) is not read', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'readmodels.db');
  const old = new Database(file);
  old.exec(`CREATE TABLE rm_checkpoints (projection TEXT NOT NULL, slot TEXT NOT NULL CHECK (slot IN ('live', 'rebuild')),
    position INTEGER NOT NULL, generation INTEGER NOT NULL, updated_at TEXT, failure TEXT, paused_at TEXT, PRIMARY KEY (projection, slot)) WITHOUT ROWID;
    INSERT INTO rm_checkpoints VALUES ('old', 'live', 7, 1, NULL, NULL, '2026-01-01T00:00:00.000Z');`);
  old.close();
  const store = new EmbeddedReadStore(file, { checkpointer: false });
  t.teardown(() => store.close());
  // Whose it was is unknown: that version's next server to start cleared it, as this one does by not reading it.
  t.strictSame(await store.listCheckpoints(), [{ projection: 'old', position: 7, generation: 1, updated_at: null }]);
  await store.recordPause('old', { host: 'node-a', pid: 101, id: 'a1' }, '2026-01-01T00:00:01.000Z');
  t.match(await store.checkpoint('old'), { paused_at: '2026-01-01T00:00:01.000Z', paused_by: [{ id: 'a1' }] });
});

// MongoDB creates an index for each key pattern registered (createIndex), whatever was there before.
t.test('embedded: indexes whose fields changed since the file was made (a new version of a projection) are made as registered', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'readmodels.db');
  const indexed = () => {
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'rm_docs_g1' AND sql IS NOT NULL ORDER BY name`).all() as Array<{ sql: string }>)
        .map((r) => [...r.sql.matchAll(/\$\.(\w+)/g)].map((m) => m[1]).join(','));
    } finally {
      db.close();
    }
  };
  const open = async (indexes: string[][]) => {
    const store = new EmbeddedReadStore(file, { checkpointer: false });
    await store.register('p', [{ name: 'docs', indexes }]);
    return store;
  };
  const first = await open([['a'], ['b']]);
  t.equal(await first.applyBatch('p', { position: 0, generation: 1 }, 1, async (w) => { await w.put('docs', { id: 'x', a: 1, b: 2, c: 3 }, 1); }), true);
  await first.close();
  t.strictSame(indexed(), ['a', 'b']);

  const next = await open([['c'], ['a', 'c']]);
  t.teardown(() => next.close());
  t.strictSame(indexed(), ['c', 'a,c'], 'the indexes registered now, none of the earlier ones');
  t.strictSame((await next.find('docs', { where: { c: 3 }, sort: { field: 'a', order: 'asc' } })).items.map((d) => d.id), ['x'], 'queries answer as before');
  await next.register('p', [{ name: 'docs', indexes: [['c'], ['a', 'c']] }]);
  t.strictSame(indexed(), ['c', 'a,c'], 'registering the same again changes nothing');
});

const mongodbUrl = process.env.MONGODB_URL;
if (mongodbUrl) {
  t.test('mongodb', async (t) => {
    const { MongoReadStore } = await import('../../infra/readstore/mongo.js');
    const { MongoClient } = await import('mongodb');
    const dbName = `cairn_contract_${randomUUID().slice(0, 8)}`;
    const admin = await MongoClient.connect(mongodbUrl);
    t.teardown(async () => {
      await admin.db(dbName).dropDatabase();
      await admin.close();
    });
    await readStoreContract(t, async () => {
      const store = await MongoReadStore.connect(mongodbUrl, dbName);
      t.comment(`MongoDB ${store.transactions ? 'with' : 'without'} transactions`);
      return {
        store,
        atomicBatches: store.transactions,
        async physical() {
          const names = await admin.db(dbName).listCollections({}, { nameOnly: true }).toArray();
          return names.flatMap((c) => /^(.+)__g(\d+)$/.exec(c.name)?.slice(1, 3).join('@') ?? []).sort();
        },
        // Its calls are network I/O: the swaps of a second client in this thread run between the steps of a read.
        swapper: async (spec) => swapOn(await MongoReadStore.connect(mongodbUrl, dbName), spec),
        another: () => MongoReadStore.connect(mongodbUrl, dbName),
      };
    });
  });
} else {
  t.test('mongodb', { skip: 'MONGODB_URL not set: MongoDB contract run skipped' }, () => {});
}


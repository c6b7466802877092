import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { Projection } from '../../projections/projection.js';
import { RebuildFailedError, rebuildProjection } from '../../projections/rebuild.js';
import { startScript } from '../support/processes.js';

/**
 * A rebuild stopped by an event its projection cannot apply names that event (position, type, id, stream) and says the
 * live generation is unchanged: `ops projections rebuild` used to print only SQLite's words
 * (`error: NOT NULL constraint failed: rm_projects_g2.id`), which name neither the event nor what became of the read model.
 */
const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const wanted = (data: Record<string, unknown> = {}) => ({ id: randomUUID(), type: 'Wanted', data, metadata });

function stores(t: Test) {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-rebuild-failure-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  t.teardown(async () => { await reads.close(); await events.close(); rmSync(dir, { recursive: true, force: true }); });
  return { dir, events, reads };
}

const projection = (name: string, hooks: Partial<Pick<Projection, 'apply' | 'prepare'>>): Projection => ({
  name, collections: [{ name: `${name}_docs` }], canHandle: ['Wanted'],
  async apply(e, w) { await w.put(`${name}_docs`, { id: e.id }, e.position); },
  ...hooks,
});

t.test('an event apply throws on: named with the projection\'s error as its cause; the live generation and its documents stay', async (t) => {
  const { events, reads } = stores(t);
  await events.append('thing-a', [wanted(), wanted()], 'no_stream');
  const live = await rebuildProjection(events, reads, projection('poisoned', {}));
  t.equal(await reads.count('poisoned_docs'), 2);
  const poison = wanted({ bad: true });
  await events.append('thing-b', [poison], 'no_stream');
  const boom = new TypeError('cannot read properties of undefined');
  const bad = projection('poisoned', {
    async apply(e, w) {
      if ((e.data as { bad?: boolean }).bad) throw boom;
      await w.put('poisoned_docs', { id: e.id }, e.position);
    },
  });
  const error = await rebuildProjection(events, reads, bad).then(() => undefined, (e: unknown) => e);
  t.type(error, RebuildFailedError);
  const failed = error as RebuildFailedError;
  t.equal(failed.message, `rebuild of poisoned failed at the event at position 3 (Wanted ${poison.id} in stream thing-b): cannot read properties of undefined; the live generation is unchanged`);
  t.equal(failed.cause, boom, 'the projection\'s own error is the cause');
  t.strictSame(failed.at, { event: { position: 3, id: poison.id, type: 'Wanted', stream: 'thing-b' } }, 'the event, for tools (no data: it may be personal)');
  const checkpoint = await reads.checkpoint('poisoned');
  t.strictSame([checkpoint.generation, checkpoint.position], [live.generation, live.position], 'the live generation is the one before, where it was');
  t.equal(await reads.count('poisoned_docs'), 2, 'with its documents');
  t.equal(await reads.rebuildCheckpoint('poisoned'), undefined, 'no rebuild looks in progress');
});

t.test('a batch prepare refuses: its positions are named; a stopped rebuild is not called a failure', async (t) => {
  const { events, reads } = stores(t);
  await events.append('thing-a', [wanted()], 'no_stream');
  await events.append('other-a', [{ ...wanted(), type: 'Ignored' }], 'no_stream');
  await events.append('thing-b', [wanted(), wanted()], 'no_stream');
  const refused = new Error('the embeddings provider refused the text');
  const error = await rebuildProjection(events, reads, projection('unprepared', { async prepare() { throw refused; } })).then(() => undefined, (e: unknown) => e);
  t.type(error, RebuildFailedError);
  t.equal((error as Error).message, 'rebuild of unprepared failed preparing the events at positions 1–4: the embeddings provider refused the text; the live generation is unchanged');
  t.equal((error as Error).cause, refused);

  const stop = new AbortController();
  const stopped = await rebuildProjection(events, reads, projection('stopped', {
    async prepare(_events, _log, _reads, signal) {
      stop.abort(new Error('stopped by the operator'));
      signal?.throwIfAborted();
    },
  }), undefined, stop.signal).then(() => undefined, (e: unknown) => e);
  t.notOk(stopped instanceof RebuildFailedError, 'a stop is the stop\'s own reason');
  t.equal((stopped as Error).message, 'stopped by the operator');
  t.equal(await reads.rebuildCheckpoint('stopped'), undefined, 'its generation is dropped too');
});

t.test('ops projections rebuild: the event a real projection cannot apply is named, exit code 1', async (t) => {
  const { dir, events } = stores(t);
  const fine = { id: randomUUID(), type: 'ProjectCreated', data: { project_id: 'p1', tenant_id: 't', name: 'One', created_by: 'op', created_at: metadata.occurred_at }, metadata };
  await events.append('project-p1', [fine], 'no_stream');
  // A ProjectCreated without its project_id (another writer to the log, a hand-made event): the read model's id cannot be null.
  const poison = { id: randomUUID(), type: 'ProjectCreated', data: { tenant_id: 't', name: 'Two' }, metadata };
  await events.append('project-p2', [poison], 'no_stream');
  const run = await startScript('ops/cli.ts', ['projections', 'rebuild', 'projects'], { DATA_DIR: dir }).done;
  t.equal(run.code, 1);
  t.equal(run.stdout, '');
  t.match(run.stderr, new RegExp(`^error: rebuild of projects failed at the event at position 2 \\(ProjectCreated ${poison.id} in stream project-p2\\): `
    + 'NOT NULL constraint failed: [^;\\n]+; the live generation is unchanged\\n$'));
});

import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { Doc } from '../../infra/readstore/port.js';
import { platformProjections } from '../../projections/index.js';
import type { Projection } from '../../projections/projection.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

/** Feeds `events` into a fresh read store through applyBatch, as the runner does, and returns every collection. */
async function project(projection: Projection, events: RecordedEvent[], batch = 7): Promise<Record<string, Doc[]>> {
  const reads = new EmbeddedReadStore(join(mkdtempSync(join(tmpdir(), 'cairn-replay-')), 'rm.db'));
  await reads.register(projection.name, projection.collections);
  let position = 0;
  for (let i = 0; i < events.length; i += batch) {
    const slice = events.slice(i, i + batch).filter((e) => projection.canHandle.includes(e.type));
    const last = events[Math.min(i + batch, events.length) - 1]!.position;
    const cp = await reads.checkpoint(projection.name);
    await reads.applyBatch(projection.name, { position: cp.position, generation: cp.generation }, Math.max(last, position), async (w) => {
      for (const e of slice) await projection.apply(e, w);
    });
    position = Math.max(last, position);
  }
  const out: Record<string, Doc[]> = {};
  for (const c of projection.collections) out[c.name] = (await reads.find(c.name, { limit: 100_000 })).items;
  await reads.close();
  return out;
}

t.test('replaying every event twice leaves the same read models', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  // A log with creates, updates, deletes and revocations across several projects.
  for (const tenant of ['t1', 't2']) {
    const { projectId, key, keyId, session } = await projectWithKey(app, tenant);
    for (let i = 0; i < 5; i++) {
      await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: `agent ${i}`, big5: { openness: i / 5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 } } });
      await app.platform(`/projects/${projectId}/config/k${i}`, { method: 'PUT', headers: bearer(key), json: { v: i } });
      await app.platform(`/projects/${projectId}/config/k${i}`, { method: 'PUT', headers: bearer(key), json: { v: i * 10 } });
    }
    await app.platform(`/projects/${projectId}/config/k2`, { method: 'DELETE', headers: bearer(key) });
    await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  }
  const head = await app.events.headPosition();
  await app.waitFor(platformProjections.map((p) => p.name), head);
  const log = await app.events.readAll(0, { limit: 100_000 });
  t.equal(log.length, head);

  for (const projection of platformProjections) {
    const once = await project(projection, log);
    const eachTwice = await project(projection, log.flatMap((e) => [e, e]));
    const wholeTwice = await project(projection, [...log, ...log], 5);
    t.ok(Object.values(once).some((docs) => docs.length > 0), `${projection.name} has documents`);
    t.same(eachTwice, once, `${projection.name}: every event twice in a row`);
    t.same(wholeTwice, once, `${projection.name}: the whole log twice`);
    // And the live read model built by the runner is the same.
    for (const [collection, docs] of Object.entries(once)) {
      t.same((await app.reads.find(collection, { limit: 100_000 })).items, docs, `${collection}: live read model matches`);
    }
  }
});

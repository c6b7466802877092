import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
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
  const dir = mkdtempSync(join(tmpdir(), 'cairn-replay-'));
  const reads = new EmbeddedReadStore(join(dir, 'rm.db'));
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
  rmSync(dir, { recursive: true, force: true });
  return out;
}

t.test('replaying every event twice leaves the same read models', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  // A log with creates, updates, deletes and revocations across several projects.
  // Each request must succeed: a refused one would leave a log without the events this test is about.
  const statuses: number[] = [];
  const send = async (path: string, init: RequestInit & { json?: unknown }) => { statuses.push((await app.platform(path, init)).status); };
  for (const tenant of ['t1', 't2']) {
    const { projectId, key, keyId, session } = await projectWithKey(app, tenant);
    for (let i = 0; i < 5; i++) {
      await send('/agents', { method: 'POST', headers: bearer(key), json: { name: `agent ${i}`, big5: { openness: i / 5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 } } });
      await send(`/projects/${projectId}/config/k${i}`, { method: 'PUT', headers: bearer(key), json: { v: i } });
      await send(`/projects/${projectId}/config/k${i}`, { method: 'PUT', headers: bearer(key), json: { v: i * 10 } });
    }
    await send(`/projects/${projectId}/config/k2`, { method: 'DELETE', headers: bearer(key) });
    await send(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  }
  t.strictSame(statuses.filter((s) => s >= 300), [], 'every request of the setup succeeded');
  const head = await app.events.headPosition();
  await app.waitFor(platformProjections.map((p) => p.name), head);
  const log = await app.events.readAll(0, { limit: 100_000 });
  t.equal(log.length, head);
  const types = new Set(log.map((e) => e.type));
  for (const type of ['ProjectCreated', 'ApiKeyCreated', 'ApiKeyRevoked', 'AgentCreated', 'ConfigValueSet', 'ConfigValueDeleted']) {
    t.ok(types.has(type), `the log holds ${type}`);
  }

  for (const projection of platformProjections) {
    const once = await project(projection, log);
    const eachTwice = await project(projection, log.flatMap((e) => [e, e]));
    const wholeTwice = await project(projection, [...log, ...log], 5);
    t.ok(Object.values(once).some((docs) => docs.length > 0), `${projection.name} has documents`);
    t.strictSame(eachTwice, once, `${projection.name}: every event twice in a row`);
    t.strictSame(wholeTwice, once, `${projection.name}: the whole log twice`);
    // And the live read model built by the runner is the same.
    for (const [collection, docs] of Object.entries(once)) {
      t.strictSame((await app.reads.find(collection, { limit: 100_000 })).items, docs, `${collection}: live read model matches`);
    }
  }
});

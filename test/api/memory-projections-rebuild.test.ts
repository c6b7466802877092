import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../infra/config.js';
import { findAll } from '../../infra/readstore/port.js';
import { allProjections } from '../../projections/index.js';
import { MEMORIES, MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { PERSONALITY, PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { VECTORS, VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';
import { mulberry32 } from '../support/prng.js';

/**
 * Property-style: a long random sequence of stores, updates, deletes, scope deletions and personality sets
 * over several scopes (unusual ids included) through the HTTP API, checked against a model of what is live;
 * then the memory read models rebuilt from position 0 must be exactly the live ones, and every read endpoint
 * answers the same after the rebuild and after a restart.
 */

type Scope = { agent: string; user: string };
type Live = { text: string; session: string | null };

const SEED = Number(process.env.MEMORY_PROPERTY_SEED ?? 20261124);
const STEPS = Number(process.env.MEMORY_PROPERTY_STEPS ?? 400);
/** mulberry32: reproducible from SEED. */
const prng = mulberry32;

const SCOPES: Scope[] = [
  { agent: 'p', user: 'a' },
  { agent: 'p', user: 'a.b' },
  { agent: 'p.x-y', user: 'b_c' },
  { agent: 'A'.repeat(128), user: `${'z-'.repeat(63)}.9` },
];
const WORDS = ['heron', 'kestrel', 'swift', 'river', 'garden', 'roof', 'lake', 'bridge', 'rain', 'tea', 'Élan', 'straße'];
const qs = (s: Scope) => `agent=${s.agent}&user=${s.user}`;

async function call(app: TestCairn, method: string, path: string, body?: unknown) {
  const res = await app.memory(path, { method, json: body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** What a client sees of a scope through every read endpoint, answers sorted where their order is not the point. */
async function view(app: TestCairn, scope: Scope) {
  const exported = await call(app, 'GET', `/v1/export?${qs(scope)}`);
  const out: Record<string, unknown> = { exported: exported.body };
  for (const word of WORDS) {
    for (const mode of ['lexical', 'semantic', 'hybrid']) {
      const res = await call(app, 'POST', '/v1/search', { scope, query: word, mode, limit: 100 });
      out[`${mode}:${word}`] = res.body.results.map((r: { id: string; text: string; score: number }) => `${r.id} ${r.text} ${r.score}`).sort();
    }
  }
  out.context = (await call(app, 'POST', '/v1/context', { scope, query: 'heron river', limit: 100 })).body;
  return out;
}

async function dump(app: TestCairn) {
  const out: Record<string, unknown[]> = {};
  for (const collection of [MEMORIES, PERSONALITY, VECTORS]) {
    out[collection] = [];
    for await (const doc of findAll(app.reads, collection, {}, 1000)) out[collection]!.push(doc);
  }
  return out;
}

t.test('random stores, updates, deletes, scope deletions and personalities: live = model = rebuilt = restarted', async (t) => {
  const random = prng(SEED);
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
  const textOf = () => Array.from({ length: 1 + Math.floor(random() * 4) }, () => pick(WORDS)).join(' ');
  const model = new Map(SCOPES.map((s) => [qs(s), { memories: new Map<string, Live>(), personality: '' }]));

  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-mem-property-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  let app = await startTestCairn({}, { dataDir });
  t.teardown(() => app.stop());

  /** One operation on one scope, applied to the model from the answer. */
  async function step(scope: Scope): Promise<void> {
    const state = model.get(qs(scope))!;
    const ids = [...state.memories.keys()];
    const roll = random();
    if (roll < 0.35) {
      const session = random() < 0.3 ? pick(['s1', 's2']) : undefined;
      const res = await call(app, 'POST', '/v1/memories', { scope, text: textOf(), ...(session ? { session } : {}) });
      t.equal(res.status, 200);
      state.memories.set(res.body.id, { text: res.body.text, session: res.body.session });
    } else if (roll < 0.55) {
      // Update by id (an existing one, mostly), or create under an explicit id.
      const id = ids.length > 0 && random() < 0.8 ? pick(ids) : `x-${Math.floor(random() * 5)}`;
      const res = await call(app, 'POST', '/v1/memories', { scope, id, text: random() < 0.2 && state.memories.has(id) ? state.memories.get(id)!.text : textOf(), session: random() < 0.5 ? 's3' : null });
      t.equal(res.status, 200);
      state.memories.set(id, { text: res.body.text, session: res.body.session });
    } else if (roll < 0.75) {
      const id = ids.length > 0 && random() < 0.85 ? pick(ids) : 'x-gone';
      const res = await call(app, 'DELETE', `/v1/memories?${qs(scope)}&id=${id}`);
      t.equal(res.status, state.memories.has(id) ? 200 : 404);
      state.memories.delete(id);
    } else if (roll < 0.83) {
      const res = await call(app, 'DELETE', `/v1/scope?${qs(scope)}`);
      t.equal(res.status, 200);
      state.memories.clear();
      state.personality = '';
    } else {
      const personality = `${pick(['Calm', 'Curious', 'Terse'])} ${Math.floor(random() * 100)}`;
      t.equal((await call(app, 'PUT', '/v1/personality', { scope, personality })).status, 200);
      state.personality = personality;
    }
  }

  const config = loadConfig({ DATA_DIR: dataDir });
  const names = [MEMORIES_PROJECTION, PERSONALITY_PROJECTION, VECTORS_PROJECTION];
  const rebuildAll = async () => {
    for (const projection of allProjections(config).filter((p) => names.includes(p.name))) await rebuildProjection(app.events, app.reads, projection);
  };
  let rebuilding: Promise<void> | undefined;
  for (let i = 0; i < STEPS; i++) {
    // Blue/green rebuilds (as `ops projections rebuild` runs them) while the requests go on.
    if (i === Math.floor(STEPS / 3)) rebuilding = rebuildAll();
    // Mostly one request at a time; sometimes one per scope at once, so that the runners apply batches of several events.
    if (random() < 0.2) await Promise.all(SCOPES.map((s) => step(s)));
    else await step(pick(SCOPES));
  }
  await rebuilding;

  const before: Record<string, unknown> = {};
  for (const scope of SCOPES) {
    const seen = await view(app, scope);
    before[qs(scope)] = seen;
    const state = model.get(qs(scope))!;
    const exported = seen.exported as { scope: Scope; personality: string; memories: Array<{ id: string; text: string; session: string | null; vector?: number[] }> };
    t.same(exported.scope, scope);
    t.equal(exported.personality, state.personality, `${scope.agent.slice(0, 8)}/${scope.user.slice(0, 8)}: personality`);
    t.same(Object.fromEntries(exported.memories.map((m) => [m.id, { text: m.text, session: m.session }])), Object.fromEntries(state.memories), 'export = model');
    t.ok(exported.memories.every((m) => Array.isArray(m.vector)), 'every exported memory has its vector');
    for (const word of WORDS) {
      const hits = (seen[`lexical:${word}`] as string[]).map((line) => line.split(' ')[0]).sort();
      const expected = [...state.memories].filter(([, m]) => m.text.split(' ').includes(word)).map(([id]) => id).sort();
      t.same(hits, expected.slice(0, 100), `lexical "${word}" finds exactly the live memories holding it`);
      for (const mode of ['semantic', 'hybrid']) {
        t.ok((seen[`${mode}:${word}`] as string[]).every((line) => state.memories.has(line.split(' ')[0]!)), `${mode} "${word}": live memories only`);
      }
    }
  }

  const live = await dump(app);
  await rebuildAll();
  t.same(await dump(app), live, 'the read models rebuilt from position 0 are exactly the live ones');
  for (const scope of SCOPES) t.same(await view(app, scope), before[qs(scope)], 'every read endpoint answers as before the rebuild');

  await app.stop();
  app = await startTestCairn({}, { dataDir });
  for (const scope of SCOPES) t.same(await view(app, scope), before[qs(scope)], 'every read endpoint answers as before the restart');
});

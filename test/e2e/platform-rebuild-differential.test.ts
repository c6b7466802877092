import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { apiKeyDecider, apiKeyStream } from '../../domain/apikeys/decider.js';
import { loadConfig } from '../../infra/config.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { allProjections, platformProjections } from '../../projections/index.js';
import type { Projection } from '../../projections/projection.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { bearer, sessionToken, startTestCairn, type TestCairn } from '../support/cairn.js';
import { startScript } from '../support/processes.js';
import { mulberry32 } from '../support/prng.js';

/**
 * Differential test of the platform's read models. A seeded random workload over the HTTP API (tenants, projects, API
 * keys created, used, revoked and expiring, agents with unusual names and racing reservations, configuration values
 * set, overwritten, deleted and deleted again, requests repeated with Idempotency-Keys, requests refused), then, for
 * every platform projection, its stored rows (documents and tombstones, with their positions) must be the same:
 * (a) live, (b) rebuilt from position 0 by the code `ops projections rebuild` runs, (c) after a restart on the same
 * DATA_DIR, (d) built again by the runners from an empty read store (other batch boundaries), and (e) replayed with
 * every event twice in batches of several sizes. Every read endpoint answers the same before and after the rebuild
 * swap and the restarts. Checkpoint positions and generations are bookkeeping and not compared.
 */

const SEED = Number(process.env.PLATFORM_PROPERTY_SEED ?? 20260311);
const STEPS = Number(process.env.PLATFORM_PROPERTY_STEPS ?? 200);

/** mulberry32: reproducible from SEED. */
const prng = mulberry32;

const PLATFORM = platformProjections.map((p) => p.name);
const TENANTS = ['t-one', 't-two', 'tenant.three'];
/** Agent names as sent; several are one name once trimmed and NFC-normalised ("Zoë" composed and decomposed, "Ava "). */
const AGENT_NAMES = ['Ava', 'Ava ', 'Zo\u00eb', 'Zoe\u0308', 'Ελένη', '東京の猫', '🦊 fox', 'a/b', '100%', 'plus+sign', ' padded  ', 'ﬁne', 'x?y#z', 'Ünïcödé 𝔘'];
const CONFIG_KEYS = ['theme', 'limits.max', 'a:b', 'feature-x', '_under', '..x', 'z'];
const SCOPE_SETS: Array<string[] | undefined> = [undefined, ['*'], ['agents:read'], ['config:read', 'config:write'], ['agents:read', 'agents:write', 'projects:read']];
const BIG5 = (o: number) => ({ openness: o, conscientiousness: 0.25, extraversion: 0.5, agreeableness: 0.75, neuroticism: 1 });

type Key = { id: string; key: string; scopes: string[]; expires_at: number | null; revoked: boolean };
type Project = {
  id: string; tenant: string; session: string; admin: string;
  keys: Key[]; agents: Map<string, string>; config: Map<string, unknown>;
};
/** A request sent with an Idempotency-Key and what it answered: a repeat must answer the same and change nothing. */
type Sent = { path: string; init: RequestInit & { json?: unknown }; status: number; body: unknown };

const nameForm = (name: string) => name.trim().normalize('NFC');

/** Every row of the live generation of each collection of the platform projections: documents and tombstones, with positions. */
function rawRows(dataDir: string): Record<string, unknown[]> {
  const db = new Database(join(dataDir, 'readmodels.db'), { readonly: true });
  try {
    const out: Record<string, unknown[]> = {};
    for (const projection of platformProjections) {
      const { generation } = db.prepare(`SELECT generation FROM rm_checkpoints WHERE projection = ? AND slot = 'live'`).get(projection.name) as { generation: number };
      for (const c of projection.collections) {
        out[c.name] = (db.prepare(`SELECT id, position, deleted, doc FROM rm_${c.name}_g${generation} ORDER BY id`).all() as Array<{ doc: string }>)
          .map((row) => ({ ...row, doc: JSON.parse(row.doc) as unknown }));
      }
    }
    return out;
  } finally {
    db.close();
  }
}

/** Feeds `events` into a fresh read store through applyBatch in batches of `size`, as a runner does; its rows as rawRows has them. */
async function replay(projection: Projection, events: RecordedEvent[], size: number): Promise<Record<string, unknown[]>> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-platform-replay-'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'), { checkpointer: false });
  try {
    await reads.register(projection.name, projection.collections);
    for (let i = 0; i < events.length; i += size) {
      const slice = events.slice(i, i + size);
      const relevant = slice.filter((e) => projection.canHandle.includes(e.type));
      const cp = await reads.checkpoint(projection.name);
      const last = Math.max(cp.position, ...slice.map((e) => e.position));
      await reads.applyBatch(projection.name, { position: cp.position, generation: cp.generation }, last, async (w) => {
        for (const e of relevant) await projection.apply(e, w);
      });
    }
  } finally {
    await reads.close();
  }
  const db = new Database(join(dir, 'readmodels.db'), { readonly: true });
  const out: Record<string, unknown[]> = {};
  for (const c of projection.collections) {
    out[c.name] = (db.prepare(`SELECT id, position, deleted, doc FROM rm_${c.name}_g1 ORDER BY id`).all() as Array<{ doc: string }>)
      .map((row) => ({ ...row, doc: JSON.parse(row.doc) as unknown }));
  }
  db.close();
  rmSync(dir, { recursive: true, force: true });
  return out;
}

t.test('platform read models: live = rebuilt = restarted = built afresh = replayed twice', async (t) => {
  const random = prng(SEED);
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
  // The server's clock: moved by the workload only, so that keys expire and uses are recorded again a minute later,
  // and frozen while the read models are compared (no request of the comparison records a use).
  let now = Date.parse('2030-01-01T00:00:00.000Z');
  const clock = () => new Date(now);

  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-platform-property-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  // PROJECTIONS_THREAD=false runs the runners in the HTTP thread (the same read models, another host).
  const env: Record<string, string> = process.env.PROJECTIONS_THREAD ? { PROJECTIONS_THREAD: process.env.PROJECTIONS_THREAD } : {};
  let app: TestCairn = await startTestCairn(env, { dataDir, clock });
  t.teardown(() => app.stop());

  const sessions = new Map<string, string>();
  for (const tenant of TENANTS) sessions.set(tenant, await sessionToken({ tenant_id: tenant, sub: `user-${tenant}` }, { expiresIn: '2h' }));
  const projects: Project[] = [];
  const sent: Sent[] = [];
  const unexpected: string[] = [];

  const call = async (path: string, init: RequestInit & { json?: unknown } = {}) => {
    const res = await app.platform(path, init);
    const text = await res.text();
    const body = text ? JSON.parse(text) as unknown : undefined;
    // A problem's `instance` is the request's own id: the rest of it is compared.
    if (res.headers.get('content-type')?.startsWith('application/problem+json')) delete (body as { instance?: string }).instance;
    return { status: res.status, body, headers: res.headers };
  };
  /** A request whose answer the model predicts; a different status is recorded (and reported once at the end). */
  const expect = async (what: string, expected: number, path: string, init: RequestInit & { json?: unknown } = {}) => {
    const res = await call(path, init);
    if (res.status !== expected) unexpected.push(`${what}: ${res.status} (expected ${expected}) ${JSON.stringify(res.body)}`);
    const idem = new Headers(init.headers).get('Idempotency-Key');
    if (idem) sent.push({ path, init, status: res.status, body: res.body });
    return res;
  };
  const idem = () => ({ 'Idempotency-Key': `k-${Math.floor(random() * 1e9)}` });

  async function createProject(tenant: string) {
    const session = sessions.get(tenant)!;
    const headers = { ...bearer(session), ...(random() < 0.5 ? idem() : {}) };
    const res = await expect('create project', 200, '/projects', { method: 'POST', headers, json: { name: pick(['Acme', '  Ünïcödé ÄG  ', '東京', 'Acme']) } });
    const id = (res.body as { project_id: string }).project_id;
    const admin = await expect('create admin key', 200, `/projects/${id}/keys`, { method: 'POST', headers: bearer(session), json: { name: 'admin' } });
    const { key, key_id } = admin.body as { key: string; key_id: string };
    const project: Project = {
      id, tenant, session, admin: key, agents: new Map(), config: new Map(),
      keys: [{ id: key_id, key, scopes: ['*'], expires_at: null, revoked: false }],
    };
    projects.push(project);
  }

  const usable = (k: Key) => !k.revoked && (k.expires_at === null || k.expires_at > now);
  const allows = (k: Key, scope: string) => k.scopes.includes('*') || k.scopes.includes(scope);

  async function step(p: Project) {
    const roll = random();
    if (roll < 0.07) {
      await createProject(pick(TENANTS));
    } else if (roll < 0.16) {
      // A key: default or chosen scopes, some expiring within minutes of the (moving) clock.
      const scopes = pick(SCOPE_SETS);
      const expires = random() < 0.4 ? now + 30_000 + Math.floor(random() * 180_000) : null;
      const headers = { ...bearer(p.session), ...(random() < 0.3 ? idem() : {}) };
      const res = await expect('create key', 200, `/projects/${p.id}/keys`, {
        method: 'POST', headers, json: { ...(scopes ? { scopes } : {}), ...(expires !== null ? { expires_at: new Date(expires).toISOString() } : {}), ...(random() < 0.5 ? { name: pick(['ci', ' Ünïcödé ', 'deploy 🚀']) } : {}) },
      });
      const { key, key_id } = res.body as { key: string; key_id: string };
      p.keys.push({ id: key_id, key, scopes: scopes ?? ['*'], expires_at: expires, revoked: false });
    } else if (roll < 0.21) {
      const k = pick(p.keys.slice(1));
      if (k) {
        await expect('revoke key', 200, `/projects/${p.id}/keys/${k.id}`, { method: 'DELETE', headers: bearer(p.session) });
        k.revoked = true;
      } else {
        await expect('revoke unknown key', 404, `/projects/${p.id}/keys/${randomUUID()}`, { method: 'DELETE', headers: bearer(p.session) });
      }
    } else if (roll < 0.33) {
      // A key used (last_used_at), or refused: revoked, expired, without the scope, another project's agent.
      const k = pick(p.keys);
      const expected = !usable(k) ? 401 : !allows(k, 'agents:read') ? 403 : 200;
      await expect(`use key (${k.scopes.join(',')})`, expected, random() < 0.5 ? '/agents' : '/agents?limit=2', { headers: bearer(k.key) });
    } else if (roll < 0.55) {
      // An agent, by the admin key; a name already taken (also in another form) is 409.
      const sentName = pick(AGENT_NAMES);
      const name = nameForm(sentName);
      const taken = p.agents.has(name);
      const res = await expect(`create agent ${JSON.stringify(sentName)}`, taken ? 409 : 200, '/agents', {
        method: 'POST', headers: { ...bearer(p.admin), ...(random() < 0.4 ? idem() : {}) },
        json: { name: sentName, big5: BIG5(Math.round(random() * 100) / 100), ...(random() < 0.5 ? { language: pick(['EN-us', 'zh-hant-tw', 'de']) } : {}), ...(random() < 0.3 ? { bio: 'Ŝtrange ✓ bio', true_interests: ['tea', '🍵'] } : {}) },
      });
      if (!taken && res.status === 200) p.agents.set(name, (res.body as { agent_id: string }).agent_id);
    } else if (roll < 0.6) {
      // Racing reservations: the same name (in different forms) at once, under different Idempotency-Keys.
      const base = pick(AGENT_NAMES);
      const name = nameForm(base);
      const forms = [base, ` ${base}`, name.normalize('NFD')];
      const answers = await Promise.all(forms.map((form) => call('/agents', { method: 'POST', headers: { ...bearer(p.admin), ...idem() }, json: { name: form } })));
      const winners = answers.filter((a) => a.status === 200);
      if (p.agents.has(name)) {
        if (winners.length > 0) unexpected.push(`race on a taken name ${JSON.stringify(name)}: ${winners.length} created`);
      } else if (winners.length !== 1 || answers.some((a) => a.status !== 200 && a.status !== 409)) {
        unexpected.push(`race on ${JSON.stringify(name)}: ${answers.map((a) => a.status).join(', ')}`);
      }
      if (winners[0]) p.agents.set(name, (winners[0].body as { agent_id: string }).agent_id);
    } else if (roll < 0.72) {
      const key = pick(CONFIG_KEYS);
      const value = pick<unknown>([1, 'blue', null, { nested: { deep: [1, 2, { x: 'ÿ' }] } }, [true, false], 0.1 + 0.2, { 'ключ': 'значение', 'a.b': 1, $dollar: 2 }, '']);
      await expect(`put config ${key}`, 200, `/projects/${p.id}/config/${key}`, { method: 'PUT', headers: { ...bearer(p.admin), ...(random() < 0.3 ? idem() : {}) }, json: value });
      p.config.set(key, value);
    } else if (roll < 0.82) {
      // Deleted, deleted again (404; with an Idempotency-Key the refusal is recorded in the log).
      const key = pick(CONFIG_KEYS);
      const had = p.config.has(key);
      await expect(`delete config ${key}`, had ? 204 : 404, `/projects/${p.id}/config/${key}`, { method: 'DELETE', headers: { ...bearer(p.admin), ...(random() < 0.5 ? idem() : {}) } });
      p.config.delete(key);
    } else if (roll < 0.9) {
      // Refused requests: nothing may change.
      const which = Math.floor(random() * 6);
      if (which === 0) await expect('big5 out of range', 400, '/agents', { method: 'POST', headers: bearer(p.admin), json: { name: 'Bad', big5: BIG5(1.5) } });
      else if (which === 1) await expect('unknown field', 400, '/agents', { method: 'POST', headers: bearer(p.admin), json: { name: 'Bad', colour: 'red' } });
      else if (which === 2) await expect('uuid-shaped name', 400, '/agents', { method: 'POST', headers: bearer(p.admin), json: { name: randomUUID() } });
      else if (which === 3) await expect('bad config key', 400, `/projects/${p.id}/config/bad%20key`, { method: 'PUT', headers: bearer(p.admin), json: 1 });
      else if (which === 4) {
        const other = projects.find((q) => q.tenant !== p.tenant);
        if (other) await expect('another tenant\'s project', 404, `/projects/${other.id}/keys`, { method: 'POST', headers: bearer(p.session), json: {} });
      } else await expect('key expiring in the past', 400, `/projects/${p.id}/keys`, { method: 'POST', headers: bearer(p.session), json: { expires_at: new Date(now - 1000).toISOString() } });
    } else if (sent.length > 0) {
      // A request repeated with its Idempotency-Key answers as it did (a key creation: 409, its secret is not shown twice).
      const first = pick(sent);
      const again = await call(first.path, first.init);
      const isKeyCreation = first.init.method === 'POST' && first.path.endsWith('/keys');
      // A key creation's repeat is 409 also once the key has expired (the repeat is recognised before the expiry is checked).
      const expected = isKeyCreation && first.status === 200 ? 409 : first.status;
      if (again.status !== expected) unexpected.push(`repeat of ${first.init.method} ${first.path} ${JSON.stringify(first.init.json)}: ${again.status} (first ${first.status}) ${JSON.stringify(again.body)}`);
      else if (!isKeyCreation && first.status === 200) t.same(again.body, first.body, `repeat of ${first.init.method} ${first.path} answers as the first`);
    }
  }

  const config = loadConfig({ DATA_DIR: dataDir });
  const operators = allProjections(config).filter((p) => PLATFORM.includes(p.name));
  t.same(operators.map((p) => p.name), PLATFORM, 'the CLI rebuilds every platform projection');
  const rebuildAll = async () => {
    for (const projection of operators) await rebuildProjection(app.events, app.reads, projection);
  };

  for (const tenant of TENANTS) await createProject(tenant);
  let rebuilding: Promise<void> | undefined;
  for (let i = 0; i < STEPS; i++) {
    // Blue/green rebuilds while the requests go on, as an operator may start them.
    if (i === Math.floor(STEPS / 3)) rebuilding = rebuildAll();
    now += Math.floor(random() * 4000);
    if (random() < 0.08) now += 61_000;
    // Mostly one request at a time; sometimes one per project at once, so the runners apply batches of several events.
    if (random() < 0.15) await Promise.all(projects.map((p) => step(p)));
    else await step(pick(projects));
  }
  await rebuilding;
  // Every usable key used once more at the last time, then every recorded use settled: the comparison records none.
  now += 61_000;
  for (const p of projects) for (const k of p.keys) if (usable(k)) await call('/projects', { headers: bearer(k.key) });
  const meta = { correlation_id: randomUUID(), causation_id: randomUUID(), actor: 'test', request_key: randomUUID(), sequence: { next: 0 } };
  for (const p of projects) for (const k of p.keys) await app.bus.state(apiKeyStream(k.id), apiKeyDecider, meta);
  t.strictSame(unexpected, [], 'every request answered as the model predicts');

  let log = await app.events.readAll(0, { limit: 1_000_000 });
  const types = new Set(log.map((e) => e.type));
  for (const type of ['ProjectCreated', 'ApiKeyCreated', 'ApiKeyRevoked', 'ApiKeyUsed', 'AgentNameReserved', 'AgentCreated', 'ConfigValueSet', 'ConfigValueDeleted', 'ConfigValueDeletionRefused']) {
    t.ok(types.has(type), `the workload wrote ${type}`);
  }
  const settle = async () => app.waitFor(PLATFORM, await app.events.headPosition());

  /** What a client sees through every platform read endpoint. */
  async function view() {
    const out: Record<string, unknown> = {};
    for (const [tenant, session] of sessions) out[`projects ${tenant}`] = (await call('/projects', { headers: bearer(session) })).body;
    for (const p of projects) {
      const key = bearer(p.admin);
      out[`${p.id} keys`] = (await call(`/projects/${p.id}/keys`, { headers: bearer(p.session) })).body;
      out[`${p.id} projects by key`] = (await call('/projects', { headers: key })).body;
      out[`${p.id} agents`] = (await call('/agents', { headers: key })).body;
      const pages: unknown[] = [];
      for (let cursor: string | null = null, first = true; first || cursor; first = false) {
        const res = await call(`/agents?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { headers: key });
        pages.push(res.body);
        cursor = res.headers.get('x-next-cursor');
      }
      out[`${p.id} agent pages`] = pages;
      for (const name of AGENT_NAMES) {
        const res = await call(`/agents/${encodeURIComponent(name)}`, { headers: key });
        out[`${p.id} agent ${name}`] = [res.status, res.body];
      }
      for (const id of p.agents.values()) out[`${p.id} agent ${id}`] = (await call(`/agents/${id.toUpperCase()}`, { headers: key })).body;
      out[`${p.id} config`] = (await call(`/projects/${p.id}/config`, { headers: key })).body;
      for (const k of CONFIG_KEYS) {
        const res = await call(`/projects/${p.id}/config/${k}`, { headers: key });
        out[`${p.id} config ${k}`] = [res.status, res.status === 200 ? res.body : null];
      }
      for (const k of p.keys) out[`${p.id} key ${k.id} works`] = (await call('/projects', { headers: bearer(k.key) })).status;
    }
    return out;
  }

  await settle();
  let live = rawRows(dataDir);
  let before = await view();
  t.strictSame(rawRows(dataDir), live, 'reading every endpoint wrote nothing');

  // The model against what the endpoints answer.
  for (const p of projects) {
    const agents = before[`${p.id} agents`] as Array<{ name: string; agent_id: string }>;
    t.same(Object.fromEntries(agents.map((a) => [a.name, a.agent_id])), Object.fromEntries(p.agents), 'GET /agents lists the agents created');
    t.same((before[`${p.id} agent pages`] as unknown[][]).flat(), agents, 'the pages of GET /agents are the whole list');
    for (const name of AGENT_NAMES) {
      const [status, body] = before[`${p.id} agent ${name}`] as [number, { agent_id?: string }];
      const id = p.agents.get(nameForm(name));
      t.strictSame([status, body.agent_id], id ? [200, id] : [404, undefined], `GET /agents/${encodeURIComponent(name)} finds the agent of that name`);
    }
    t.same(before[`${p.id} config`], Object.fromEntries(p.config), 'GET config holds the values set and not deleted');
    const keys = before[`${p.id} keys`] as Array<{ key_id: string; is_active: boolean }>;
    t.same(Object.fromEntries(keys.map((k) => [k.key_id, k.is_active])), Object.fromEntries(p.keys.map((k) => [k.id, usable(k)])), 'GET keys: is_active as revoked and expired');
    for (const k of p.keys) t.equal(before[`${p.id} key ${k.id} works`], usable(k) ? (allows(k, 'projects:read') ? 200 : 403) : 401);
  }
  const used = before[`${projects[0]!.id} keys`] as Array<{ last_used_at: string | null }>;
  t.ok(used.some((k) => k.last_used_at !== null), 'last_used_at recorded');

  // (b) Rebuilt from position 0 by the code the operator CLI runs, swapped in.
  await rebuildAll();
  await settle();
  t.strictSame(rawRows(dataDir), live, 'rebuilt from position 0: every row as live');
  t.strictSame(await view(), before, 'every read endpoint answers as before the rebuild');

  // (b') The operator CLI itself, in another process, while the server runs: its swap is seen by the server's runners.
  for (const name of ['api-keys', 'agents']) {
    const run = await startScript('ops/cli.ts', ['projections', 'rebuild', name, '--json'], { DATA_DIR: dataDir }).done;
    t.equal(run.code, 0, `ops projections rebuild ${name}: ${run.stderr}`);
  }
  t.strictSame(rawRows(dataDir), live, 'rebuilt by the operator CLI: every row as live');
  t.strictSame(await view(), before, 'every read endpoint answers as before the CLI\'s rebuild');
  // And the server goes on after that swap: a key created then works, and stops working once revoked.
  const p0 = projects[0]!;
  const created = await call(`/projects/${p0.id}/keys`, { method: 'POST', headers: bearer(p0.session), json: { name: 'after the swap' } });
  t.equal(created.status, 200, 'a key created after the swap');
  const fresh = created.body as { key: string; key_id: string };
  t.equal((await call('/agents', { headers: bearer(fresh.key) })).status, 200, 'works at once');
  t.equal((await call(`/projects/${p0.id}/keys/${fresh.key_id}`, { method: 'DELETE', headers: bearer(p0.session) })).status, 200);
  t.equal((await call('/agents', { headers: bearer(fresh.key) })).status, 401, 'and is refused once revoked');
  p0.keys.push({ id: fresh.key_id, key: fresh.key, scopes: ['*'], expires_at: null, revoked: true });
  await app.bus.state(apiKeyStream(fresh.key_id), apiKeyDecider, meta);
  await settle();
  log = await app.events.readAll(0, { limit: 1_000_000 });
  live = rawRows(dataDir);
  before = await view();

  // (e) Every event twice, in batches of several sizes (one event per batch to the whole log in one).
  for (const projection of platformProjections) {
    const mine = Object.fromEntries(projection.collections.map((c) => [c.name, live[c.name]]));
    for (const size of [1, 7, 1000, log.length * 2]) {
      t.strictSame(await replay(projection, log.flatMap((e) => [e, e]), size), mine, `${projection.name}: every event twice, batches of ${size}`);
    }
    t.strictSame(await replay(projection, [...log, ...log], 13), mine, `${projection.name}: the whole log twice`);
  }

  // (c) A restart on the same DATA_DIR.
  await app.stop();
  app = await startTestCairn(env, { dataDir, clock });
  await settle();
  t.strictSame(rawRows(dataDir), live, 'after a restart: every row as live');
  t.strictSame(await view(), before, 'every read endpoint answers as before the restart');

  // (d) Built again by the runners from an empty read store, in the batches they take when catching up.
  await app.stop();
  for (const suffix of ['', '-wal', '-shm']) rmSync(join(dataDir, `readmodels.db${suffix}`), { force: true });
  app = await startTestCairn(env, { dataDir, clock });
  await settle();
  t.strictSame(rawRows(dataDir), live, 'built afresh by the runners: every row as live');
  t.strictSame(await view(), before, 'every read endpoint answers as before');
});

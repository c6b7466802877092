import t from 'tap';
import { bearer, projectWithKey, startTestCairn, type TestCairn } from '../support/cairn.js';
import { EsdbStandin } from '../support/esdb-standin.js';
import { tempDir } from '../support/temp.js';

/**
 * Two stateless API nodes on one EventStoreDB (the stand-in, test/support/esdb-standin.ts), each with its own
 * DATA_DIR and so its own embedded read models, as in production behind a load balancer: the same memory scope,
 * configuration key, agent name and API keys changed from both at once. Every acknowledged write is in the log
 * once (no event id twice; a request and its retry on the other node write once), no 500, only the documented
 * 409s, and both nodes' read models converge once they have applied the log's last position.
 */
t.setTimeout(240_000);

const esdb = await EsdbStandin.start(t);
// Appends through BatchAppend, as servers since 21.10 offer it (TWO_NODES_UNARY=1: the unary Append of older servers).
esdb.batchAppend = process.env.TWO_NODES_UNARY !== '1';
const env = { EVENTSTORE_URL: esdb.url };
const nodes: TestCairn[] = [
  await startTestCairn(env, { dataDir: tempDir(t, 'cairn-esdb-node-a-') }),
  await startTestCairn(env, { dataDir: tempDir(t, 'cairn-esdb-node-b-') }),
];
t.teardown(async () => { for (const node of nodes) await node.stop({ keepData: true }); });
const [a, b] = nodes as [TestCairn, TestCairn];

type Json = Record<string, unknown>;
interface Answer { node: number; rid: string; label: string; status: number; type?: string; position: string | null; body: Json }
const answers: Answer[] = [];
let rids = 0;

/** One request to a node's platform or memory API, with its own X-Request-Id (the events' correlation_id); recorded. */
async function call(node: number, api: 'platform' | 'memory', path: string, init: RequestInit & { json?: unknown } = {}, label = path): Promise<Answer> {
  const rid = `two-nodes-${++rids}`;
  const res = await nodes[node]![api](path, { ...init, headers: { ...(init.headers as Record<string, string> | undefined), 'X-Request-Id': rid } });
  const text = await res.text();
  const body = text ? JSON.parse(text) as Json : {};
  const answer: Answer = { node, rid, label, status: res.status, position: res.headers.get('x-event-position'), body, type: typeof body.type === 'string' ? body.type.split('/').at(-1) : undefined };
  answers.push(answer);
  return answer;
}

/** Cairn's events in the log (not the server's own, nor the keys' use, recorded by whichever node a key was used on). */
const logEvents = () => [...esdb.streams.entries()].flatMap(([stream, events]) => events.map((e) => ({ stream, ...e })))
  .filter((e) => !e.type.startsWith('$'));
const correlation = (e: { metadata: Uint8Array }) => (JSON.parse(Buffer.from(e.metadata).toString('utf8')) as { correlation_id: string }).correlation_id;
const head = () => String(Math.max(...logEvents().map((e) => Number(e.position))));

const { projectId, key, session } = await projectWithKey(a, 'tenant-two-nodes');
// The key is known on the other node once its read model has the key's creation.
const minHead = () => ({ 'X-Min-Position': head() });

t.test('one memory scope changed from both nodes at once, with and without Idempotency-Keys', async (t) => {
  const scope = { agent: 'ava', user: 'u-two' };
  const q = `agent=${scope.agent}&user=${scope.user}`;
  const pairs: Array<{ answers: [Answer, Answer]; send: (node: number) => Promise<Answer> }> = [];
  for (let round = 0; round < 12; round++) {
    const work: Array<Promise<unknown>> = [];
    for (const node of [0, 1]) {
      // The same texts from both (one memory each), a correction of one id from both, a deletion of it from both.
      work.push(call(node, 'memory', '/v1/memories', { method: 'POST', json: { scope, text: `shared text ${round % 4}` } }, 'store'));
      work.push(call(node, 'memory', '/v1/memories', { method: 'POST', json: { scope, id: 'fixed', text: `fixed by ${node} in ${round}` } }, 'store by id'));
      if (round % 3 === 2) work.push(call(node, 'memory', `/v1/memories?${q}&id=fixed`, { method: 'DELETE' }, 'delete'));
      work.push(call(node, 'memory', '/v1/memories', { method: 'POST', json: { scope, text: `node ${node} round ${round}` } }, 'store'));
    }
    // The same request with the same Idempotency-Key on both nodes at once (a client retrying on the other node).
    const keyedStore = (idem: string, body: Json) => (node: number) => call(node, 'memory', '/v1/memories', { method: 'POST', headers: { 'Idempotency-Key': idem }, json: body }, 'keyed store');
    const both = (send: (node: number) => Promise<Answer>) => Promise.all([send(0), send(1)]).then(([x, y]) => { pairs.push({ answers: [x, y], send }); });
    work.push(both(keyedStore(`store-${round}`, { scope, text: `keyed ${round}`, session: `s${round % 2}` })));
    if (round % 4 === 3) {
      work.push(both((node) => call(node, 'memory', `/v1/memories?${q}&id=fixed`, { method: 'DELETE', headers: { 'Idempotency-Key': `delete-${round}` } }, 'keyed delete')));
    }
    // A retry after a timeout: the first node answered, the client sends it again to the other.
    const retry = keyedStore(`retry-${round}`, { scope, text: `retried ${round}` });
    const first = await retry(round % 2);
    work.push(retry(1 - (round % 2)).then((again) => { pairs.push({ answers: [first, again], send: retry }); }));
    await Promise.all(work);
  }
  for (const { answers: pair, send } of pairs) {
    const written = logEvents().filter((e) => pair.some((x) => x.rid === correlation(e)));
    // Sent with a key, a request is recorded even when refused (a deletion of no memory: MemoryDeletionRefused).
    t.equal(written.length, 1, `${pair[0].label} sent to both nodes: written once (${written.map((e) => e.type)})`);
    // Under this contention a node may give up with the documented 409 concurrency-conflict ("send the request
    // again"): the client does, with the same key, and gets what the other node answered, writing nothing.
    for (const [i, x] of pair.entries()) {
      if (x.status !== 409) continue;
      t.equal(x.type, 'concurrency-conflict', JSON.stringify(x.body));
      const before = logEvents().length;
      pair[i] = await send(x.node);
      t.equal(logEvents().length, before, `${x.label} sent again after its 409: nothing written`);
    }
    const [x, y] = pair;
    t.equal(x.status, y.status, `${x.label} ${x.rid}/${y.rid}: the same answer on both nodes (${JSON.stringify([x.body, y.body])})`);
    if (x.status === 200) t.strictSame([y.body, y.position], [x.body, x.position], 'the same answer, at the same position');
  }
  const at = head();
  const [ea, eb] = await Promise.all([0, 1].map((node) => call(node, 'memory', `/v1/export?${q}`, { headers: { 'X-Min-Position': at } }, 'export')));
  t.equal(ea!.status, 200);
  t.strictSame(ea!.body, eb!.body, 'both nodes export the same scope');
  const live = (ea!.body.memories as Json[]).map((m) => m.text);
  for (let round = 0; round < 12; round++) t.ok(live.includes(`keyed ${round}`) && live.includes(`retried ${round}`), `round ${round}: the keyed stores are live`);
  const [sa, sb] = await Promise.all([0, 1].map((node) => call(node, 'memory', '/v1/search', { method: 'POST', headers: { 'X-Min-Position': at }, json: { scope, query: 'shared text', limit: 10 } }, 'search')));
  t.strictSame(sa!.body, sb!.body, 'both nodes search alike');
});

t.test('the same request with its Idempotency-Key on both nodes of a quiet stream at once: one answer, the log\'s', async (t) => {
  // Both nodes decide at the same revision with the same event ids: the server answers the slower append as a retry.
  for (let round = 0; round < 6; round++) {
    const scope = { agent: 'quiet', user: `u-${round}` };
    const [x, y] = await Promise.all([0, 1].map((node) => call(node, 'memory', '/v1/memories', { method: 'POST', headers: { 'Idempotency-Key': `quiet-${round}` }, json: { scope, text: 'the same' } }, 'keyed store')));
    t.strictSame([x!.status, y!.status], [200, 200]);
    t.strictSame([y!.body, y!.position], [x!.body, x!.position], `round ${round}: the same memory, at the same position`);
    const ex = await call(0, 'memory', `/v1/export?agent=quiet&user=u-${round}`, { headers: { 'X-Min-Position': head() } }, 'export');
    t.strictSame((ex.body.memories as Json[]).map((m) => m.updated_at), [x!.body.updated_at], 'as the log holds it');
  }
});

t.test('one configuration key PUT and DELETE from both nodes at once', async (t) => {
  const path = `/projects/${projectId}/config/tone`;
  await call(1, 'platform', '/agents', { headers: { ...bearer(key), ...minHead() } }, 'key known on node b');
  for (let round = 0; round < 12; round++) {
    await Promise.all([0, 1].flatMap((node) => [
      call(node, 'platform', path, { method: 'PUT', headers: bearer(key), json: { by: node, round } }, 'put config'),
      call(node, 'platform', path, { method: 'PUT', headers: { ...bearer(key), 'Idempotency-Key': `put-${round}` }, json: { keyed: round } }, 'keyed put config'),
      ...(round % 3 === 1 ? [call(node, 'platform', path, { method: 'DELETE', headers: bearer(key) }, 'delete config')] : []),
      call(node, 'platform', `/projects/${projectId}/config/other-${round % 3}`, { method: 'PUT', headers: bearer(key), json: round }, 'put config'),
    ]));
  }
  const keyedPuts = answers.filter((x) => x.label === 'keyed put config');
  for (let round = 0; round < 12; round++) {
    const pair = keyedPuts.slice(round * 2, round * 2 + 2);
    const written = logEvents().filter((e) => e.type !== 'ApiKeyUsed' && pair.some((x) => x.rid === correlation(e)));
    t.strictSame(pair.map((x) => x.status), [200, 200], `keyed PUT ${round}: ${JSON.stringify(pair.map((x) => x.body))}`);
    t.equal(written.length, 1, `keyed PUT ${round} on both nodes: written once`);
    t.equal(pair[0]!.position, pair[1]!.position, `keyed PUT ${round}: the same X-Event-Position`);
  }
  const at = head();
  const [ca, cb] = await Promise.all([0, 1].map((node) => call(node, 'platform', `/projects/${projectId}/config`, { headers: { ...bearer(key), 'X-Min-Position': at } }, 'get config')));
  t.equal(ca!.status, 200);
  t.strictSame(ca!.body, cb!.body, 'both nodes hold the same configuration');
  // The read model is the log folded: the last event of each key.
  const folded: Json = {};
  for (const e of logEvents().filter((e) => e.stream === `config-${projectId}`)) {
    const data = JSON.parse(Buffer.from(e.data).toString('utf8')) as { key: string; value?: unknown };
    if (e.type === 'ConfigValueSet') folded[data.key] = data.value;
    if (e.type === 'ConfigValueDeleted') delete folded[data.key];
  }
  t.strictSame(ca!.body, folded, 'as the log has it');
});

t.test('the same agent name created on both nodes at once: one wins, the other is told the holder', async (t) => {
  for (let round = 0; round < 10; round++) {
    const name = `Twin ${round}`;
    const keyed = round % 2 === 1 ? { 'Idempotency-Key': `agent-${round}` } : undefined;
    const [x, y] = await Promise.all([0, 1].map((node) => call(node, 'platform', '/agents', { method: 'POST', headers: { ...bearer(key), ...keyed }, json: { name } }, 'create agent')));
    if (keyed) {
      // One request, retried on the other node: the same agent, written once.
      t.strictSame([x!.status, y!.status], [200, 200], `${name}: ${JSON.stringify([x!.body, y!.body])}`);
      t.strictSame([y!.body, y!.position], [x!.body, x!.position], `${name}: the same agent, at the same position`);
    } else {
      const statuses = [x!.status, y!.status].sort();
      t.strictSame(statuses, [200, 409], `${name}: exactly one wins (${JSON.stringify([x!.body, y!.body])})`);
      const won = x!.status === 200 ? x! : y!;
      const lost = x!.status === 200 ? y! : x!;
      t.equal(lost.type, 'conflict');
      t.equal(lost.body.agent_id, won.body.agent_id, `${name}: the 409 names the holder`);
    }
    const created = logEvents().filter((e) => e.type === 'AgentCreated' && JSON.parse(Buffer.from(e.data).toString('utf8')).name === name);
    t.equal(created.length, 1, `${name}: one agent in the log`);
  }
  const at = head();
  const [la, lb] = await Promise.all([0, 1].map((node) => call(node, 'platform', '/agents?limit=100', { headers: { ...bearer(key), 'X-Min-Position': at } }, 'list agents')));
  t.equal(la!.status, 200, JSON.stringify(la!.body));
  t.strictSame(la!.body, lb!.body, 'both nodes list the same agents');
});

t.test('API keys created on one node and revoked on the other stop working on both', async (t) => {
  for (let round = 0; round < 4; round++) {
    const created = await call(round % 2, 'platform', `/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: {} }, 'create key');
    t.equal(created.status, 200, JSON.stringify(created.body));
    const secret = String(created.body.key);
    for (const node of [0, 1]) {
      const used = await call(node, 'platform', '/agents', { headers: { ...bearer(secret), 'X-Min-Position': created.position! } }, 'use key');
      t.equal(used.status, 200, `round ${round}: works on node ${node}`);
    }
    // Revoked on the other node, twice at once (both nodes) in odd rounds.
    const revokers = round % 2 === 1 ? [0, 1] : [1 - (round % 2)];
    const revoked = await Promise.all(revokers.map((node) => call(node, 'platform', `/projects/${projectId}/keys/${String(created.body.key_id)}`, { method: 'DELETE', headers: bearer(session) }, 'revoke key')));
    for (const r of revoked) t.equal(r.status, 200, JSON.stringify(r.body));
    const at = String(Math.max(...revoked.map((r) => Number(r.position))));
    for (const node of [0, 1]) {
      const refused = await call(node, 'platform', '/agents', { headers: { ...bearer(secret), 'X-Min-Position': at } }, 'use revoked key');
      t.equal(refused.status, 401, `round ${round}: refused on node ${node}`);
    }
    t.equal(logEvents().filter((e) => e.stream === `apikey-${String(created.body.key_id)}` && e.type === 'ApiKeyRevoked').length, 1, 'revoked once in the log');
  }
  const at = head();
  const [ka, kb] = await Promise.all([0, 1].map((node) => call(node, 'platform', `/projects/${projectId}/keys`, { headers: { ...bearer(session), 'X-Min-Position': at } }, 'list keys')));
  t.equal(ka!.status, 200);
  t.strictSame(ka!.body, kb!.body, 'both nodes list the same keys');
});

t.test('across it all: no event id twice, no 500, only documented 409s', async (t) => {
  const ids = logEvents().map((e) => e.id);
  const twice = ids.filter((id, i) => ids.indexOf(id) !== i);
  t.strictSame(twice, [], 'no event id twice in the log');
  t.strictSame(answers.filter((x) => x.status >= 500).map((x) => [x.label, x.status, x.type, x.body.detail]), [], 'no 5xx');
  const conflicts = answers.filter((x) => x.status === 409);
  // An agent name taken, or a stream that kept changing under the node's bounded retries (send the request again).
  t.strictSame(conflicts.filter((x) => !((x.label === 'create agent' && x.type === 'conflict') || (x.type === 'concurrency-conflict' && typeof x.body.stream === 'string')))
    .map((x) => [x.label, x.type, x.body.detail]), [], 'only documented 409s');
  t.comment(`409 concurrency-conflict: ${conflicts.filter((x) => x.type === 'concurrency-conflict').length} of ${answers.length} requests`);
  // One command per stream and request: no request's events twice in a stream (a retry inside a node written again).
  const perStream = new Map<string, number>();
  for (const e of logEvents()) if (e.type !== 'ApiKeyUsed') perStream.set(`${correlation(e)} ${e.stream}`, (perStream.get(`${correlation(e)} ${e.stream}`) ?? 0) + 1);
  t.strictSame([...perStream].filter(([, n]) => n > 1), [], 'each request wrote at most one event per stream');
  // Each acknowledged write's position is one of its own events, or (a change of nothing) one the log holds.
  const positions = new Set(logEvents().map((e) => String(e.position)));
  const unknown = answers.filter((x) => x.position && x.status < 300 && !positions.has(x.position));
  t.strictSame(unknown.map((x) => [x.label, x.position]), [], 'every X-Event-Position is an event of the log');
});

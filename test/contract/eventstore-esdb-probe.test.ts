import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type ServerHttp2Session } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { EsdbEventStore } from '../../infra/eventstore/esdb.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { readiness, STORE_PROBE_TIMEOUT_MS, type HostHealth } from '../../projections/health.js';
import { until } from '../support/logs.js';
import { timed, within } from '../support/settling.js';

/**
 * The readiness probe's event-store reads, bounded in the adapter: the client's reads are gRPC streams it
 * opens without a deadline. Without an EventStoreDB server here, the client talks to an HTTP/2 server that
 * accepts every call and never answers (a server that hangs): the adapter must give up in time and cancel
 * the call, which the server sees as the call's stream closing.
 */

interface Call {
  path: string;
  /** Resolves when the call's stream is closed (answered, reset or cancelled). */
  closed: Promise<void>;
}

async function silentGrpcServer(t: Test): Promise<{ url: string; calls: Call[] }> {
  const calls: Call[] = [];
  const sessions = new Set<ServerHttp2Session>();
  const server = createServer();
  server.on('session', (session) => { sessions.add(session); session.once('close', () => sessions.delete(session)); });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    calls.push({ path: String(headers[':path']), closed: new Promise((resolve) => stream.once('close', () => resolve())) });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  t.teardown(async () => {
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `esdb://127.0.0.1:${port}?tls=false`, calls };
}

const READ = '/event_store.client.streams.Streams/Read';

t.test('headPosition and countAfter with timeoutMs: a server that never answers', async (t) => {
  const esdb = await silentGrpcServer(t);
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  // The client connects on its first call. Connected first, so that each 300 ms bound below is spent waiting on
  // its read, not on a connection a loaded machine is slow to set up (the read then never reaches the server).
  const warmUp = store.headPosition({ timeoutMs: 10_000 }).catch(() => undefined);
  await until('the client has connected and made its first call', () => esdb.calls.length > 0, 10_000);

  for (const [name, call] of [
    ['headPosition', () => store.headPosition({ timeoutMs: 300 })],
    ['countAfter', () => store.countAfter(0, 10, { timeoutMs: 300 })],
  ] as const) {
    const before = esdb.calls.length;
    const read = await timed(call(), 20_000);
    t.equal(read.outcome, 'rejected', `${name} gave up (after ${Math.round(read.ms)} ms: ${String(read.error)})`);
    t.ok(read.ms >= 250 && read.ms < 5000, `${name}: at about timeoutMs (a busy machine may fire its timer late; the adapter's default is 10 s)`);
    const made = esdb.calls.slice(before);
    t.ok(made.length > 0 && made.every((c) => c.path === READ), `${name} read $all (${made.map((c) => c.path).join(', ')})`);
    t.ok(await within(Promise.all(made.map((c) => c.closed)), 5000), `${name}: its read is cancelled, not left open on the server`);
  }
  await store.close();
  await warmUp;
});

t.test('readiness bounds the event store\'s probe reads to STORE_PROBE_TIMEOUT_MS', async (t) => {
  const esdb = await silentGrpcServer(t);
  const events = new EsdbEventStore(esdb.url);
  t.teardown(() => events.close());
  const dir = mkdtempSync(join(tmpdir(), 'cairn-probe-'));
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'), { checkpointer: false });
  t.teardown(async () => { await reads.close(); rmSync(dir, { recursive: true, force: true }); });
  const host = { health: (): HostHealth => ({ thread: { mode: 'inline', state: 'running', heartbeat_at: null, restarts: 0 }, projections: [] }) };

  const answer = await readiness(host, { events, reads });
  t.match(answer, { ready: false, head: null, stores: { events: 'timeout', reads: 'ok' } });
  t.ok(esdb.calls.length > 0, 'the probe read the head');
  t.ok(await within(Promise.all(esdb.calls.map((c) => c.closed)), 1000), 'its read is cancelled soon after the probe gave up: probes do not pile up');
});

const eventstoreUrl = process.env.EVENTSTORE_URL;
if (eventstoreUrl) {
  t.test('esdb: a bound the server answers within changes no answer', async (t) => {
    const store = new EsdbEventStore(eventstoreUrl);
    t.teardown(() => store.close());
    const head = await store.headPosition();
    t.equal(await store.headPosition({ timeoutMs: STORE_PROBE_TIMEOUT_MS }), head);
    t.equal(await store.countAfter(0, 5, { timeoutMs: STORE_PROBE_TIMEOUT_MS }), await store.countAfter(0, 5));
  });
} else {
  t.test('esdb', { skip: 'EVENTSTORE_URL not set: EventStoreDB run skipped' }, () => {});
}

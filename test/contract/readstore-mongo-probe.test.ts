import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BSON, type Document } from 'mongodb';
import t, { type Test } from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { MongoReadStore } from '../../infra/readstore/mongo.js';
import { readiness, STORE_PROBE_TIMEOUT_MS, type HostHealth } from '../../projections/health.js';
import { timed, within } from '../support/settling.js';

/**
 * The readiness probe's read-store query, bounded in the MongoDB driver itself: without a MongoDB server
 * here, the store talks to a stand-in speaking MongoDB's wire protocol that answers the handshake and
 * the store's set-up, then never answers the probe's `find` (a server that hangs), or stops listening
 * (a server that is gone, where the driver waits 30 s for a server to select). The client must give up
 * in time and leave nothing behind: the query carries `maxTimeMS`, and its connection is closed.
 */

const OP_REPLY = 1;
const OP_QUERY = 2004;
const OP_MSG = 2013;
const MORE_TO_COME = 2;

interface Received {
  name: string;
  body: Document;
  /** Resolves when the connection the command came on is closed. */
  closed: Promise<void>;
}

/** The stand-in: `answer` returns a command's reply, or undefined to leave it unanswered. */
async function fakeMongo(t: Test, answer: (name: string, body: Document) => Document | undefined) {
  const received: Received[] = [];
  const sockets = new Set<Socket>();
  let connections = 0;
  const hello = (): Document => ({
    helloOk: true, ismaster: true, isWritablePrimary: true, maxBsonObjectSize: 16 * 1024 * 1024, maxMessageSizeBytes: 48_000_000,
    maxWriteBatchSize: 100_000, localTime: new Date(), logicalSessionTimeoutMinutes: 30, connectionId: connections,
    minWireVersion: 0, maxWireVersion: 21, readOnly: false, ok: 1,
  });
  const server = createServer((socket) => {
    connections++;
    sockets.add(socket);
    const closed = new Promise<void>((resolve) => socket.once('close', () => { sockets.delete(socket); resolve(); }));
    socket.on('error', () => undefined);
    let pending = Buffer.alloc(0);
    const reply = (requestId: number, opCode: number, payload: Buffer) => {
      const header = Buffer.alloc(16);
      header.writeInt32LE(16 + payload.length, 0);
      header.writeInt32LE(0, 4);
      header.writeInt32LE(requestId, 8);
      header.writeInt32LE(opCode, 12);
      socket.write(Buffer.concat([header, payload]));
    };
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= pending.readInt32LE(0)) {
        const message = pending.subarray(0, pending.readInt32LE(0));
        pending = pending.subarray(message.length);
        const requestId = message.readInt32LE(4);
        const opCode = message.readInt32LE(12);
        if (opCode === OP_QUERY) {
          // The first handshake of a connection: a legacy hello, answered with an OP_REPLY.
          const payload = Buffer.alloc(20);
          payload.writeInt32LE(1, 16); // one document returned
          reply(requestId, OP_REPLY, Buffer.concat([payload, BSON.serialize(hello())]));
          continue;
        }
        if (opCode !== OP_MSG) throw new Error(`unexpected opCode ${opCode}`);
        const flags = message.readUInt32LE(16);
        let body: Document = {};
        for (let at = 20; at < message.length - (flags & 1 ? 4 : 0);) {
          const kind = message[at]!;
          const size = message.readInt32LE(at + 1);
          if (kind === 0) body = { ...body, ...BSON.deserialize(message.subarray(at + 1, at + 1 + size)) };
          at += 1 + size;
        }
        const name = Object.keys(body)[0]!;
        received.push({ name, body, closed });
        const response = /^(hello|ismaster)$/i.test(name) ? hello() : answer(name, body);
        if (response === undefined || flags & MORE_TO_COME) continue;
        reply(requestId, OP_MSG, Buffer.concat([Buffer.alloc(5), BSON.serialize(response)]));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const stop = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  t.teardown(stop);
  return { url: `mongodb://127.0.0.1:${port}/?directConnection=true`, received, stop };
}

/** Answers everything but the probe's query (a find on `_checkpoints`), which it never answers. */
const hangingProbe = (name: string, body: Document): Document | undefined => {
  if (name === 'find' && body.find === '_checkpoints') return undefined;
  if (name === 'find') return { cursor: { id: BSON.Long.ZERO, ns: `${body.$db}.${body.find}`, firstBatch: [] }, ok: 1 };
  return { ok: 1 };
};

t.test('listCheckpoints with timeoutMs: a server that never answers', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const store = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => store.close());

  const probe = await timed(store.listCheckpoints({ timeoutMs: 300 }), 3000);
  t.equal(probe.outcome, 'rejected', `the call gave up (after ${Math.round(probe.ms)} ms: ${String(probe.error)})`);
  t.ok(probe.ms >= 250 && probe.ms < 1500, 'at about timeoutMs');
  const find = mongo.received.find((c) => c.name === 'find' && c.body.find === '_checkpoints');
  t.equal(find?.body.maxTimeMS, 300, 'the server is told to end the query after timeoutMs');
  t.ok(find && await within(find.closed, 1000), 'and the connection waiting for its answer is closed: nothing is left waiting');
});

t.test('listCheckpoints with timeoutMs: a server that is gone', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const store = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => store.close());
  await mongo.stop();

  // Without a bound the driver waits for a server to select for serverSelectionTimeoutMS (30 s).
  const probe = await timed(store.listCheckpoints({ timeoutMs: 300 }), 3000);
  t.equal(probe.outcome, 'rejected', `the call gave up (after ${Math.round(probe.ms)} ms: ${String(probe.error)})`);
  t.ok(probe.ms < 1500, 'at about timeoutMs');
});

t.test('readiness bounds the read store\'s probe query to STORE_PROBE_TIMEOUT_MS in the driver', async (t) => {
  const mongo = await fakeMongo(t, hangingProbe);
  const reads = await MongoReadStore.connect(mongo.url, 'cairn_probe');
  t.teardown(() => reads.close());
  const dir = mkdtempSync(join(tmpdir(), 'cairn-probe-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  t.teardown(async () => { await events.close(); rmSync(dir, { recursive: true, force: true }); });
  const host = { health: (): HostHealth => ({ thread: { mode: 'inline', state: 'running', heartbeat_at: null, restarts: 0 }, projections: [] }) };

  const answer = await readiness(host, { events, reads });
  t.match(answer, { ready: false, stores: { events: 'ok', reads: 'timeout' } });
  const find = mongo.received.find((c) => c.name === 'find' && c.body.find === '_checkpoints');
  t.ok(typeof find?.body.maxTimeMS === 'number' && find.body.maxTimeMS <= STORE_PROBE_TIMEOUT_MS && find.body.maxTimeMS > STORE_PROBE_TIMEOUT_MS - 500,
    `the query carried the probe's remaining time as maxTimeMS (${find?.body.maxTimeMS})`);
  t.ok(find && await within(find.closed, 1000), 'its connection is closed soon after the probe gave up: probes do not pile up');
});

import { createServer, type Socket } from 'node:net';
import { BSON, type Document } from 'mongodb';
import type { Test } from 'tap';

/**
 * A stand-in for a MongoDB server, for tests of the MongoDB adapter without one: it speaks the wire protocol
 * (the handshake's legacy hello, then OP_MSG) and hands every other command to `answer`, which returns the
 * reply, or undefined to leave the command unanswered (a server that hangs), or a promise of either: the reply
 * then waits for it (other clients' commands are answered meanwhile; a rejection is answered as a command
 * error, so the test sees it). `hello` adds fields to the
 * handshake's reply: `setName` makes it a replica set member (so the adapter uses transactions), `msg:
 * 'isdbgrid'` a mongos.
 */

const OP_REPLY = 1;
const OP_QUERY = 2004;
const OP_MSG = 2013;
const MORE_TO_COME = 2;

export interface Received {
  name: string;
  body: Document;
  /** Resolves when the connection the command came on is closed. */
  closed: Promise<void>;
}

type Answer = Document | undefined;

export async function fakeMongo(t: Test, answer: (name: string, body: Document) => Answer | Promise<Answer>, options: { hello?: Document } = {}) {
  const received: Received[] = [];
  const sockets = new Set<Socket>();
  let connections = 0;
  const hello = (): Document => ({
    helloOk: true, ismaster: true, isWritablePrimary: true, maxBsonObjectSize: 16 * 1024 * 1024, maxMessageSizeBytes: 48_000_000,
    maxWriteBatchSize: 100_000, localTime: new Date(), logicalSessionTimeoutMinutes: 30, connectionId: connections,
    minWireVersion: 0, maxWireVersion: 21, readOnly: false, ...options.hello, ok: 1,
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
        const respond = (response: Answer) => {
          if (response === undefined || flags & MORE_TO_COME) return;
          reply(requestId, OP_MSG, Buffer.concat([Buffer.alloc(5), BSON.serialize(response)]));
        };
        const response = /^(hello|ismaster)$/i.test(name) ? hello() : answer(name, body);
        if (response instanceof Promise) {
          void response.then(respond, (error: unknown) => respond({ ok: 0, code: 1, codeName: 'InternalError', errmsg: String(error) }));
        } else {
          respond(response);
        }
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

/** A `find` reply holding all of `docs` in its first batch. */
export function cursorReply(body: Document, docs: Document[]): Document {
  return { cursor: { id: BSON.Long.ZERO, ns: `${body.$db}.${body.find}`, firstBatch: docs }, ok: 1 };
}

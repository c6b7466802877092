import t from 'tap';
import { connect, type Socket } from 'node:net';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';
import { capturingLogger, until } from '../support/logs.js';

// Connection-level behaviour a REST client's connection pool depends on: when the body of a request is asked
// for (Expect: 100-continue), and when the server says it will close a connection (Connection: close).

/** A raw connection to `base` and the response heads (status and headers, lower-case names) read from it so far. */
function open(base: string): { socket: Socket; heads: () => Array<{ status: number; headers: Record<string, string> }>; next: (count: number) => Promise<void>; ended: () => Promise<boolean> } {
  const socket = connect(Number(new URL(base).port), '127.0.0.1');
  let text = '';
  const waiters: Array<() => void> = [];
  const heads = () => [...text.matchAll(/HTTP\/1\.1 (\d{3})[^\r]*\r\n((?:[^\r]+\r\n)*)\r\n/g)].map((m) => ({
    status: Number(m[1]),
    headers: Object.fromEntries(m[2]!.split('\r\n').filter(Boolean).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()])),
  }));
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => { text += chunk; for (const w of waiters.splice(0)) w(); });
  const closed = new Promise<void>((resolve) => socket.on('close', () => { for (const w of waiters.splice(0)) w(); resolve(); }));
  /** Whether the server closes the connection within 3 s; it is destroyed either way. */
  const ended = async () => {
    const timeout = new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 3000).unref());
    const result = await Promise.race([closed.then(() => true), timeout]);
    socket.destroy();
    return result;
  };
  socket.on('error', () => undefined);
  /** Resolves once `count` response heads have arrived (or the connection closed, or 5 s passed). */
  const next = (count: number) => new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 5000);
    const check = () => {
      if (heads().length >= count || socket.destroyed) { clearTimeout(timer); resolve(); } else waiters.push(check);
    };
    check();
  });
  return { socket, heads, next, ended };
}

t.test('Expect: 100-continue: the body is asked for only when it will be read; a request refused before that is answered at once, and the body is never sent', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { key } = await projectWithKey(app, 'tenant-expect');
  const body = JSON.stringify({ name: 'Expecting agent' });
  const refusals: Array<[string, string, string, number]> = [
    ['no credentials', app.platformUrl, `POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`, 401],
    ['unknown route', app.platformUrl, `POST /api/v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`, 404],
    ['a browser', app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nOrigin: https://example.com\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`, 403],
    // Curl's way of sending a large file: a declared length over the 1 MiB limit is refused without it being sent.
    ['a declared length over 1 MiB', app.memoryUrl, `POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${50 * 1024 * 1024}\r\n`, 400],
  ];
  for (const [what, base, head, status] of refusals) {
    const conn = open(base);
    conn.socket.write(`${head}Expect: 100-continue\r\n\r\n`);
    await conn.next(1);
    t.same(conn.heads().map((h) => h.status), [status], `${what}: ${status} without 100 Continue first`);
    t.equal(conn.heads()[0]?.headers.connection, 'close', `${what}: the connection is closed (the client may still send the body it announced)`);
    t.ok(await conn.ended(), `${what}: closed by the server`);
  }

  // A client that sends the body at once, without waiting for 100 Continue: answered as without Expect, on a
  // connection kept open (its body read and dropped), so the request it sent next on it is answered too.
  const eager = open(app.platformUrl);
  eager.socket.write(`POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n${body}`
    + 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await eager.next(3);
  t.same(eager.heads().map((h) => h.status).filter((s) => s !== 100), [401, 200], 'a body sent at once: refused, and the next request on the connection answered');
  t.ok(await eager.ended(), 'closed as asked');

  // A request without a body has nothing to wait for: its connection is kept, as without Expect.
  const bodiless = open(app.platformUrl);
  bodiless.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await bodiless.next(3);
  t.same(bodiless.heads().map((h) => h.status).filter((s) => s !== 100), [200, 200], 'without a body: answered, and the connection kept for the next request');
  t.ok(await bodiless.ended(), 'closed as asked');

  // A request whose body is read: 100 Continue, then the body, then the answer.
  const accepted = open(app.platformUrl);
  accepted.socket.write(`POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: ${bearer(key).Authorization}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`);
  await accepted.next(1);
  t.same(accepted.heads().map((h) => h.status), [100], 'authorised: 100 Continue before the body is sent');
  accepted.socket.write(body);
  await accepted.next(2);
  t.same(accepted.heads().map((h) => h.status), [100, 200], 'then the agent is created');
  t.ok(await accepted.ended(), 'closed as asked');
});

t.test('a server that is stopping tells the clients of requests in flight that it closes their connections (Connection: close), so a pool does not reuse them', async (t) => {
  // A wait long enough that the stop surely begins while it runs, even on a busy machine.
  const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '3000' });
  const { key } = await projectWithKey(app, 'tenant-stop-keepalive');
  const head = await app.events.headPosition();
  const conn = open(app.platformUrl);
  // A keep-alive request in flight when the stop begins: a read waiting for a position the log has not reached.
  conn.socket.write(`GET /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: ${bearer(key).Authorization}\r\nX-Min-Position: ${head + 1000}\r\n\r\n`);
  // Waited for, not slept on: a stop begun before the request arrived would test a refused connection instead.
  await until('the read is waiting in the server', () => app.pendingWaits() > 0);
  const stopped = app.stop();
  await conn.next(1);
  const [answer] = conn.heads();
  t.equal(answer?.status, 503, 'answered (not-caught-up)');
  t.equal(answer?.headers.connection, 'close', 'Connection: close, not keep-alive');
  t.notOk(answer?.headers['keep-alive'], 'no Keep-Alive timeout promised');
  t.ok(await conn.ended(), 'and the connection is closed');
  await stopped;
});

t.test('a request the HTTP parser refuses is in the access log under the request id its answer names', async (t) => {
  const { lines, log } = capturingLogger();
  const app = await startTestCairn({}, { log });
  t.teardown(() => app.stop());
  for (const [what, base, request, status] of [
    ['headers over 16 KiB', app.platformUrl, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
    ['a malformed header line', app.memoryUrl, 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n', 400],
  ] as const) {
    const conn = open(base);
    conn.socket.write(request);
    await conn.next(1);
    const requestId = conn.heads()[0]?.headers['x-request-id'];
    t.equal(conn.heads()[0]?.status, status, `${what}: ${status}`);
    t.ok(await conn.ended(), `${what}: the connection is closed`);
    t.match(lines.find((l) => l.request_id === requestId), { level: 30, service: base === app.platformUrl ? 'platform' : 'memory', status, problem: /\S/ }, `${what}: logged with its request id`);
  }
});

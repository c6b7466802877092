import { randomBytes } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createServer, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import t, { type Test } from 'tap';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';
import { capturingLogger, until } from '../support/logs.js';

/**
 * A client that leaves before the end of its body: its request ends at once, logged the same whether the
 * body was compressed or not, and nothing is stored. A compressed body is read from a decompressor, not
 * from the request, so the request's end has to reach that read another way.
 */

const ENCODINGS: Record<string, (body: Buffer) => Buffer> = {
  identity: (body) => body,
  gzip: gzipSync,
  deflate: deflateSync,
  br: brotliCompressSync,
};

/**
 * Sends the head of a POST with a JSON body, encoded, and half of that body, on a connection of its own, and
 * leaves it open. Random text compresses poorly, so half of the encoded body is well short of its end.
 */
function sendHalf(url: string, path: string, headers: string[], encoding: string, value: unknown): Promise<Socket> {
  const body = ENCODINGS[encoding]!(Buffer.from(JSON.stringify(value)));
  const head = [
    `POST ${path} HTTP/1.1`, 'Host: x', ...headers, 'Content-Type: application/json',
    ...(encoding === 'identity' ? [] : [`Content-Encoding: ${encoding}`]), `Content-Length: ${body.length}`,
  ];
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`), body.subarray(0, body.length >> 1)]), () => resolve(socket)));
    socket.once('error', reject);
  });
}

const random = (bytes: number) => randomBytes(bytes).toString('hex');

/** The server's requests, by X-Request-Id, as they arrive. */
function serverRequests(t: Test): Map<string, IncomingMessage> {
  const requests = new Map<string, IncomingMessage>();
  const onStart = (message: unknown) => {
    const { request } = message as { request: IncomingMessage };
    requests.set(String(request.headers['x-request-id']), request);
  };
  subscribe('http.server.request.start', onStart);
  t.teardown(() => unsubscribe('http.server.request.start', onStart));
  return requests;
}

const accessLine = (lines: Array<Record<string, any>>, requestId: string) => lines.find((l) => l.request_id === requestId && l.msg === 'request');

t.test('a client that leaves half-way through its body ends its request at once, compressed or not', async (t) => {
  const { lines, log } = capturingLogger();
  const app = await startTestCairn({}, { log });
  t.teardown(() => app.stop());
  const { key } = await projectWithKey(app);
  const requests = serverRequests(t);

  for (const encoding of Object.keys(ENCODINGS)) {
    const requestId = `abort-${encoding}`;
    const socket = await sendHalf(app.platformUrl, '/api/v1/agents', [`Authorization: Bearer ${key}`, `X-Request-Id: ${requestId}`], encoding, { name: requestId, bio: random(3000) });
    // Reading has begun once the request has a 'data' listener: raw-body's, or the pipe into the decompressor.
    await until(`${requestId} is read`, () => (requests.get(requestId)?.listenerCount('data') ?? 0) > 0);
    socket.destroy();
    await until(`${requestId} is logged`, () => accessLine(lines, requestId) !== undefined);
    t.match(accessLine(lines, requestId), { method: 'POST', path: '/api/v1/agents', status: 400 }, `${encoding}: logged as an incomplete body`);
  }
  // The same request, sent whole, is stored: it is the leaving that stored nothing.
  const whole = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' }, body: gzipSync(JSON.stringify({ name: 'whole', bio: random(3000) })) });
  t.equal(whole.status, 200);
  const after = { ...bearer(key), 'X-Min-Position': String(await app.events.headPosition()) };
  const agents = (await (await app.platform('/agents', { headers: after })).json()) as Array<{ name: string }>;
  t.same(agents.map((a) => a.name), ['whole'], 'nothing else was stored');
  t.same(lines.filter((l) => l.level >= 40), [], 'nothing was logged as a failure');
});

t.test('so does a client that leaves while it is authenticated, before its body is asked for', async (t) => {
  // An identity provider that holds its keys back until the clients have gone.
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  let release!: () => void;
  const released = new Promise<void>((resolve) => { release = resolve; });
  const idp = createServer((_req, res) => void released.then(() => res.setHeader('Content-Type', 'application/json').end(JSON.stringify({ keys: [jwk] }))));
  await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { release(); return new Promise((resolve) => idp.close(resolve)); });
  const { lines, log } = capturingLogger();
  const jwksUrl = `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks`;
  const app = await startTestCairn({ AUTH_JWKS_URL: jwksUrl, AUTH_ISSUER: 'https://idp.example', AUTH_AUDIENCE: 'cairn' }, { log });
  t.teardown(() => app.stop());
  const session = await new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setIssuer('https://idp.example').setAudience('cairn')
    .setSubject('user-7').setExpirationTime('5m').sign(privateKey);
  const requests = serverRequests(t);

  // Every request waits for the one fetch of the keys; each client leaves, and the server sees it, before it ends.
  const ids = Object.keys(ENCODINGS).map((encoding) => [encoding, `early-${encoding}`] as const);
  const sockets = await Promise.all(ids.map(([encoding, requestId]) =>
    sendHalf(app.platformUrl, '/api/v1/projects', [`Authorization: Bearer ${session}`, `X-Request-Id: ${requestId}`], encoding, { name: random(100) })));
  await until('every request has arrived', () => ids.every(([, requestId]) => requests.has(requestId)));
  for (const socket of sockets) socket.destroy();
  await until('every request has closed', () => ids.every(([, requestId]) => requests.get(requestId)!.destroyed));
  release();
  for (const [encoding, requestId] of ids) {
    await until(`${requestId} is logged`, () => accessLine(lines, requestId) !== undefined);
    t.match(accessLine(lines, requestId), { method: 'POST', path: '/api/v1/projects', status: 400 }, `${encoding}: logged as an incomplete body`);
  }
  const after = { ...bearer(session), 'X-Min-Position': String(await app.events.headPosition()) };
  t.same(await (await app.platform('/projects', { headers: after })).json(), { projects: [] }, 'nothing was stored');
  t.same(lines.filter((l) => l.level >= 40), [], 'nothing was logged as a failure');
});

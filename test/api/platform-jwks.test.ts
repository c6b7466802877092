import t, { type Test } from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { bearer, sessionToken, startTestCairn } from '../support/cairn.js';

t.test('sessions verified against an identity provider\'s JWKS', async (t) => {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const other = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  let fetched = 0;
  const idp = createServer((req, res) => {
    fetched++;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ keys: [jwk] }));
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => idp.close(r)));
  const jwksUrl = `http://127.0.0.1:${(idp.address() as AddressInfo).port}/.well-known/jwks.json`;
  const app = await startTestCairn({ AUTH_JWKS_URL: jwksUrl, AUTH_ISSUER: 'https://idp.example', AUTH_AUDIENCE: 'cairn', AUTH_TENANT_CLAIM: 'org' });
  t.teardown(() => app.stop());

  const sign = (key: CryptoKey | Uint8Array, claims: Record<string, unknown> = { org: 'acme' }, iss = 'https://idp.example', aud = 'cairn', kid = 'k1') =>
    new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid }).setSubject('user-7').setIssuer(iss).setAudience(aud).setExpirationTime('5m').sign(key as CryptoKey);
  const status = async (token: string) => (await app.platform('/projects', { headers: bearer(token) })).status;

  t.equal(await status(await sign(privateKey as CryptoKey)), 200, 'signed by the provider');
  t.ok(fetched >= 1, 'the JWKS was fetched over HTTP');
  t.equal(await status(await sign(other.privateKey as CryptoKey)), 401, 'signed by another key');
  t.equal(await status(await sign(privateKey as CryptoKey, { org: 'acme' }, 'https://evil.example')), 401, 'wrong issuer');
  t.equal(await status(await sign(privateKey as CryptoKey, { org: 'acme' }, 'https://idp.example', 'other')), 401, 'wrong audience');
  t.equal(await status(await sign(privateKey as CryptoKey, { tenant_id: 'acme' })), 401, 'tenant claim name is configurable (org here)');
  const hs = await new SignJWT({ org: 'acme' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u').setIssuer('https://idp.example').setAudience('cairn')
    .setExpirationTime('5m').sign(new TextEncoder().encode(JSON.stringify(jwk)));
  t.equal(await status(hs), 401, 'HS256 is not accepted when a JWKS is configured (no algorithm confusion)');
});

t.test('an identity provider that cannot be reached is a 503, not a 401 for a valid session', async (t) => {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  let answer: 'keys' | 'error' | 'garbage' = 'error';
  const idp = createServer((req, res) => {
    if (answer === 'error') {
      res.statusCode = 500;
      res.end('upstream trouble');
      return;
    }
    res.setHeader('Content-Type', 'application/json');
    res.end(answer === 'keys' ? JSON.stringify({ keys: [jwk] }) : '<html>');
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => idp.close(r)));
  const issued = { AUTH_ISSUER: 'https://idp.example', AUTH_AUDIENCE: 'cairn' };
  const app = await startTestCairn({ AUTH_JWKS_URL: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks`, ...issued });
  t.teardown(() => app.stop());
  const token = await new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setIssuer('https://idp.example').setAudience('cairn').setSubject('user-7').setExpirationTime('5m').sign(privateKey);
  const list = () => app.platform('/projects', { headers: bearer(token) });

  for (const failure of ['error', 'garbage'] as const) {
    answer = failure;
    const res = await list();
    t.equal(res.status, 503, `JWKS answered ${failure}`);
    t.equal(res.headers.get('content-type'), 'application/problem+json');
    t.equal(res.headers.get('retry-after'), '5', 'Retry-After: 5 s');
    const body = (await res.json()) as { detail: string };
    t.match(body, { type: 'https://cairn.dev/problems/identity-provider-unavailable', status: 503, detail: /identity provider/ });
    t.notMatch(body.detail, /upstream trouble|html/, 'the provider\'s reply is not passed on');
  }
  answer = 'keys';
  t.equal((await list()).status, 200, 'and the same token works once the provider answers');
  const unknownKid = await new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256', kid: 'k2' }).setIssuer('https://idp.example').setAudience('cairn').setSubject('user-7').setExpirationTime('5m').sign(privateKey);
  // The set was fetched just now: it may be too old to hold a key published since (see the rotation test below).
  t.equal((await app.platform('/projects', { headers: bearer(unknownKid) })).status, 503, 'a key the set did not hold when fetched a moment ago: not judged yet');
  await afterCooldown(async () => {
    t.equal((await app.platform('/projects', { headers: bearer(unknownKid) })).status, 401, 'a key the provider does not publish, the set fetched again for it: the token\'s fault, 401');
  });

  const unreachable = await startTestCairn({ AUTH_JWKS_URL: 'http://127.0.0.1:1/jwks', ...issued });
  t.teardown(() => unreachable.stop());
  t.equal((await unreachable.platform('/projects', { headers: bearer(token) })).status, 503, 'connection refused');
});

t.test('sessions not configured: 503, not 401', async (t) => {
  const app = await startTestCairn({ AUTH_JWT_SECRET: '' });
  t.teardown(() => app.stop());
  const res = await app.platform('/projects', { headers: bearer(await sessionToken()) });
  t.equal(res.status, 503);
  t.match(await res.json(), { type: /not-configured/, detail: /AUTH_JWKS_URL or AUTH_JWT_SECRET/ });
});

t.test('a key set with several keys and tokens without kid (a provider rotating its keys): each key is tried', async (t) => {
  const [first, second, stranger] = await Promise.all([generateKeyPair('RS256'), generateKeyPair('RS256'), generateKeyPair('RS256')]);
  const keys = [
    { ...(await exportJWK(first.publicKey)), alg: 'RS256', use: 'sig' },
    { ...(await exportJWK(second.publicKey)), alg: 'RS256', use: 'sig' },
  ];
  const { app } = await appWithKeySet(t, keys);
  const sign = (key: CryptoKey, expires = '5m') => new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256' }).setSubject('user-7')
    .setIssuer('https://idp.example').setAudience('cairn').setIssuedAt().setExpirationTime(expires).sign(key);
  const status = async (token: string) => (await app.platform('/projects', { headers: bearer(token) })).status;
  t.equal(await status(await sign(first.privateKey as CryptoKey)), 200, 'signed by the first key');
  t.equal(await status(await sign(second.privateKey as CryptoKey)), 200, 'signed by the second key');
  t.equal(await status(await sign(stranger.privateKey as CryptoKey)), 401, 'signed by neither');
  t.equal(await status(await sign(second.privateKey as CryptoKey, '-1m')), 401, 'expired, signed by the second key');
});

t.test('a token without kid is tried against at most 8 keys of the set, in the set\'s order', async (t) => {
  const pairs = await Promise.all(Array.from({ length: 9 }, () => generateKeyPair('RS256')));
  const keys = await Promise.all(pairs.map(async (p) => ({ ...(await exportJWK(p.publicKey)), alg: 'RS256', use: 'sig' })));
  const { app } = await appWithKeySet(t, keys);
  const status = async (key: CryptoKey) => (await app.platform('/projects', {
    headers: bearer(await new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256' }).setSubject('user-7')
      .setIssuer('https://idp.example').setAudience('cairn').setIssuedAt().setExpirationTime('5m').sign(key)),
  })).status;
  t.equal(await status(pairs[7]!.privateKey as CryptoKey), 200, 'signed by the 8th key: found');
  t.equal(await status(pairs[8]!.privateKey as CryptoKey), 401, 'signed by the 9th: not tried');
});

t.test('an identity provider that publishes a new key and signs with it at once: its sessions are not told they are invalid', async (t) => {
  const [first, second] = await Promise.all([generateKeyPair('RS256'), generateKeyPair('RS256')]);
  const published = [{ ...(await exportJWK(first.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }];
  const { app, fetches } = await appWithKeySet(t, published);
  const sign = (key: CryptoKey, kid: string) => new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg: 'RS256', kid }).setSubject('user-7')
    .setIssuer('https://idp.example').setAudience('cairn').setIssuedAt().setExpirationTime('5m').sign(key);
  const list = async (token: string) => app.platform('/projects', { headers: bearer(token) });

  t.equal((await list(await sign(first.privateKey as CryptoKey, 'k1'))).status, 200, 'signed with the first key');
  t.equal(fetches(), 1);
  // The provider rotates: it publishes a second key and signs with it from now on (OpenID Connect Core §10.1.1).
  published.push({ ...(await exportJWK(second.publicKey)), kid: 'k2', alg: 'RS256', use: 'sig' });
  const rotated = await sign(second.privateKey as CryptoKey, 'k2');
  const early = await list(rotated);
  t.equal(early.status, 503, 'the set was fetched too recently to be fetched again: retry, not a 401 that signs the user out');
  t.equal(early.headers.get('content-type'), 'application/problem+json');
  t.match(await early.json(), { type: 'https://cairn.dev/problems/identity-provider-unavailable', detail: /kid/ });
  const retryAfter = Number(early.headers.get('retry-after'));
  t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 30, `Retry-After until the set may be fetched again (${retryAfter} s)`);
  t.equal(fetches(), 1, 'no fetch per unfamiliar kid: the cooldown still bounds what made-up kids can make us fetch');
  await afterCooldown(async () => {
    t.equal((await list(rotated)).status, 200, 'after Retry-After the set is fetched again and the new key verifies the session');
    t.equal(fetches(), 2);
  });
  t.equal((await list(await sign(first.privateKey as CryptoKey, 'k1'))).status, 200, 'the first key too, while published');/**
 * A token whose `kid` names a key the set holds, but which that key cannot verify (the key is published for another
 * algorithm, for encryption, or is of another type): the set fetched a moment ago knows the key, so fetching it again
 * cannot change the answer. It is the token's fault: 401 every time, not 401 once and then, while the set may not be
 * fetched again, a 503 telling the client to retry because "the key it names was not in the set".
 */
t.test('a token naming a key of the set that cannot verify it is 401 every time, never a 503 to retry', async (t) => {
  const [rsa, rs384, ec] = await Promise.all([generateKeyPair('RS256'), generateKeyPair('RS384'), generateKeyPair('ES256')]);
  const published = [
    { ...(await exportJWK(rsa.publicKey)), kid: 'rs', alg: 'RS256', use: 'sig' },
    { ...(await exportJWK(rsa.publicKey)), kid: 'enc', use: 'enc' },
    { ...(await exportJWK(rsa.publicKey)), kid: 'ops', key_ops: ['encrypt'] },
    { ...(await exportJWK(ec.publicKey)), kid: 'ec', alg: 'ES256', use: 'sig' },
  ];
  const { app, fetches } = await appWithKeySet(t, published);
  const sign = (key: CryptoKey, alg: string, kid: string) => new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg, kid }).setSubject('user-7')
    .setIssuer('https://idp.example').setAudience('cairn').setIssuedAt().setExpirationTime('5m').sign(key);
  const list = (token: string) => app.platform('/projects', { headers: bearer(token) });

  t.equal((await list(await sign(rsa.privateKey as CryptoKey, 'RS256', 'rs'))).status, 200, 'a good token: the set is fetched');
  t.equal(fetches(), 1);
  const wrong: Array<[string, string, CryptoKey, string]> = [
    ['RS384 naming a key published for RS256', 'RS384', rs384.privateKey as CryptoKey, 'rs'],
    ['a key published for encryption (use: enc)', 'RS256', rsa.privateKey as CryptoKey, 'enc'],
    ['a key whose key_ops do not include verify', 'RS256', rsa.privateKey as CryptoKey, 'ops'],
    ['an RSA token naming an EC key', 'RS256', rsa.privateKey as CryptoKey, 'ec'],
  ];
  for (const [label, alg, key, kid] of wrong) {
    const token = await sign(key, alg, kid);
    for (const attempt of ['first', 'second']) {
      const res = await list(token);
      t.equal(res.status, 401, `${label}: 401 (${attempt} request)`);
      t.equal(res.headers.get('retry-after'), null, `${label}: nothing to retry (${attempt} request)`);
      t.match(await res.json(), { type: 'https://cairn.dev/problems/unauthorized' });
    }
  }
  t.equal(fetches(), 1, 'no fetch for them: the set held their kids');
});


});

/**
 * Runs `fn` with the clock (Date.now, which jose's JWKS cache reads) moved past the 30 s after which a set may be
 * fetched again for an unfamiliar kid, instead of waiting 30 s. Token times are read from `new Date()`, which is not moved.
 */
async function afterCooldown(fn: () => Promise<void>) {
  const realNow = Date.now;
  const shift = 31_000;
  Date.now = () => realNow() + shift;
  try {
    await fn();
  } finally {
    Date.now = realNow;
  }
}

/** A server whose sessions are verified against a local identity provider serving `keys` as its JWKS (as the array is at each fetch: a test may publish more), and how often the set was fetched. */
async function appWithKeySet(t: Test, keys: unknown[]) {
  let fetched = 0;
  const idp = createServer((req, res) => {
    fetched++;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ keys }));
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => idp.close(r)));
  const app = await startTestCairn({ AUTH_JWKS_URL: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks`, AUTH_ISSUER: 'https://idp.example', AUTH_AUDIENCE: 'cairn' });
  t.teardown(() => app.stop());
  return { app, fetches: () => fetched };
}

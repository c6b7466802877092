import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { bearer, startTestCairn } from '../support/cairn.js';

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

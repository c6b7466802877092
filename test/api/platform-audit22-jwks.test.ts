import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { bearer, startTestCairn } from '../support/cairn.js';

/**
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
  let fetched = 0;
  const idp = createServer((req, res) => {
    fetched++;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ keys: published }));
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => idp.close(r)));
  const app = await startTestCairn({ AUTH_JWKS_URL: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks`, AUTH_ISSUER: 'https://idp.example', AUTH_AUDIENCE: 'cairn' });
  t.teardown(() => app.stop());
  const sign = (key: CryptoKey, alg: string, kid: string) => new SignJWT({ tenant_id: 'acme' }).setProtectedHeader({ alg, kid }).setSubject('user-7')
    .setIssuer('https://idp.example').setAudience('cairn').setIssuedAt().setExpirationTime('5m').sign(key);
  const list = (token: string) => app.platform('/projects', { headers: bearer(token) });

  t.equal((await list(await sign(rsa.privateKey as CryptoKey, 'RS256', 'rs'))).status, 200, 'a good token: the set is fetched');
  t.equal(fetched, 1);
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
  t.equal(fetched, 1, 'no fetch for them: the set held their kids');
});

import t from 'tap';
import { uuidV5 } from '../../infra/ids.js';
import { generateApiKey, hashApiKey, isWellFormedApiKey } from '../../infra/apikeys.js';
import { memoryIdFor, requestFingerprint, textKey } from '../../domain/memory/decider.js';
import { valueHash } from '../../domain/config/decider.js';
import { nameKey } from '../../api/platform/agents/routes.js';

t.test('uuidV5 matches RFC 9562 version 5', async (t) => {
  // The RFC's example: DNS namespace, "www.example.com".
  t.equal(uuidV5('www.example.com', '6ba7b810-9dad-11d1-80b4-00c04fd430c8'), '2ed6657d-e927-568b-95e1-2665a8aea6a2');
  const id = uuidV5('request-1/config-p/0/abc/0', '6f1c7a8e-3d1f-4b59-9a43-2b8f1c0e5d77');
  t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'version 5, RFC variant');
  t.equal(uuidV5('request-1/config-p/0/abc/0', '6f1c7a8e-3d1f-4b59-9a43-2b8f1c0e5d77'), id, 'deterministic');
  t.not(uuidV5('request-1/config-p/0/abc/1', '6f1c7a8e-3d1f-4b59-9a43-2b8f1c0e5d77'), id);
  t.not(uuidV5('żółw', '6ba7b810-9dad-11d1-80b4-00c04fd430c8'), uuidV5('zolw', '6ba7b810-9dad-11d1-80b4-00c04fd430c8'), 'names are hashed as UTF-8');
  t.throws(() => uuidV5('x', 'not-a-uuid'));
});

t.test('API key checksums: keys issued by earlier versions still check out', async (t) => {
  // Made by the earlier BigInt implementation of the checksum.
  for (const key of ['sk_dMrSsaPVfdFkqRu8OQ5E3bdMlWOTxnpQOHLfOdbj5F3_1NpSYS', 'sk_Uu6BRokjLFIPCC1usGUMTYWsr577AvYFCZehrevEKyr_3cyW3h']) {
    t.ok(isWellFormedApiKey(key), key);
    t.notOk(isWellFormedApiKey(key.slice(0, -1) + (key.endsWith('S') ? 'T' : 'S')), 'a changed checksum is rejected');
    t.notOk(isWellFormedApiKey(key.replace('sk_', 'sk_x').slice(0, key.length)), 'a changed body is rejected');
  }
  for (let i = 0; i < 200; i++) t.ok(isWellFormedApiKey(generateApiKey().key));
});

t.test('ids and hashes derived from content are the ones earlier versions derived (they are stored in logs and read models)', async (t) => {
  // Computed with createHash('sha256').update(...).digest(...), the implementation before crypto.hash.
  t.equal(memoryIdFor('  I like coffee '), 'm_c72f189d7f728fc64de5533808956474', 'a memory id: SHA-256 of the trimmed, NFC text');
  t.equal(memoryIdFor('I like coffee', 2), 'm_767f12433e965ea2acd2fbb57198017f', 'the second id of a text');
  t.equal(textKey('I like coffee'), 'c72f189d7f728fc64de5533808956474');
  t.equal(requestFingerprint('key-1', 'IngestFacts', 'hello', 's1'), 'f56787c0b18948629a68450587087f00');
  t.equal(hashApiKey('sk_dMrSsaPVfdFkqRu8OQ5E3bdMlWOTxnpQOHLfOdbj5F3_1NpSYS'), '26bc95174c00adf273a0ec7d457c730a03d988da5bf0424cce57767bd11351f0', 'stored key hashes still match');
  t.equal(nameKey('Cafe\u0301'), '73473dcc12b763085904a5279d048c4d', 'agent name reservations: NFC first');
  t.equal(valueHash({ a: [1, 'é'] }), 'XbFKLN3JLTE2WAa7XYLtK8Q2v2lg0QzUZUFA972tzhw=');
});

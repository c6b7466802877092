import t from 'tap';
import { cacheLimits } from '../../commands/bus.js';
import { ConfigError, loadConfig } from '../../infra/config.js';

t.test('the LLM key only goes to the LLM base URL', async (t) => {
  const base = { LLM_BASE_URL: 'https://llm.example/v1', LLM_API_KEY: 'sk-llm', EMBEDDINGS_PROVIDER: 'openai' };
  t.equal(loadConfig(base).providers.embeddings.apiKey, 'sk-llm', 'embeddings on the same base URL use it');
  t.equal(loadConfig({ ...base, EMBEDDINGS_BASE_URL: 'https://llm.example/v1/' }).providers.embeddings.apiKey, 'sk-llm', 'the same URL with a trailing slash');
  t.equal(loadConfig({ ...base, EMBEDDINGS_BASE_URL: 'https://other.example/v1' }).providers.embeddings.apiKey, undefined, 'another host does not get it');
  t.equal(loadConfig({ ...base, EMBEDDINGS_BASE_URL: 'https://other.example/v1', EMBEDDINGS_API_KEY: 'sk-emb' }).providers.embeddings.apiKey, 'sk-emb');
  t.equal(loadConfig({ ...base, EMBEDDINGS_API_KEY: 'sk-emb' }).providers.embeddings.apiKey, 'sk-emb', 'its own key wins');
});

t.test('PROJECTIONS_NICE: an integer from 0 to 19, default 10', async (t) => {
  t.equal(loadConfig({}).projectionsNice, 10);
  t.equal(loadConfig({ PROJECTIONS_NICE: '0' }).projectionsNice, 0);
  t.equal(loadConfig({ PROJECTIONS_NICE: '19' }).projectionsNice, 19);
  t.throws(() => loadConfig({ PROJECTIONS_NICE: '20' }), /PROJECTIONS_NICE must be an integer from 0 to 19/);
  t.throws(() => loadConfig({ PROJECTIONS_NICE: '1.5' }), /PROJECTIONS_NICE must be an integer from 0 to 19, written in decimal digits, got "1.5"/);
});

t.test('STATE_CACHE_MB: an integer from 16 to 65,536, default 256, as the command bus\'s weight budget', async (t) => {
  t.equal(loadConfig({}).stateCacheMb, 256);
  t.equal(loadConfig({ STATE_CACHE_MB: '16' }).stateCacheMb, 16);
  t.equal(loadConfig({ STATE_CACHE_MB: '65536' }).stateCacheMb, 65_536);
  t.throws(() => loadConfig({ STATE_CACHE_MB: '15' }), /STATE_CACHE_MB must be an integer from 16 to 65536/);
  t.throws(() => loadConfig({ STATE_CACHE_MB: '65537' }), /STATE_CACHE_MB must be an integer from 16 to 65536/);
  t.strictSame(cacheLimits(256), { maxEntries: 10_000, maxWeight: 524_288 }, '256 MiB of ~512-byte items');
  t.strictSame(cacheLimits(16), { maxEntries: 10_000, maxWeight: 32_768 });
});

t.test('MONGODB_DB: a MongoDB database name, checked at start rather than by the driver once connected', async (t) => {
  t.equal(loadConfig({}).mongodbDb, 'cairn');
  t.equal(loadConfig({ MONGODB_DB: 'cairn_prod-2' }).mongodbDb, 'cairn_prod-2');
  t.equal(loadConfig({ MONGODB_DB: 'd'.repeat(63) }).mongodbDb, 'd'.repeat(63), '63 bytes');
  t.throws(() => loadConfig({ MONGODB_DB: 'd'.repeat(64) }), /MONGODB_DB must be a MongoDB database name: at most 63 bytes/, '64 bytes');
  t.throws(() => loadConfig({ MONGODB_DB: 'é'.repeat(32) }), ConfigError, '64 bytes in 32 characters');
  for (const name of ['a.b', 'a/b', 'a\\b', 'a b', 'a"b', '$a', 'a*', 'a<b', 'a>b', 'a:b', 'a|b', 'a?', 'a\0b']) {
    t.throws(() => loadConfig({ MONGODB_DB: name }), ConfigError, JSON.stringify(name));
  }
});

t.test('READY_MAX_LAG: unset (no bound) or an integer from 1 to 100,000', async (t) => {
  t.equal(loadConfig({}).readyMaxLag, undefined, 'lag alone never makes a node not ready by default');
  t.equal(loadConfig({ READY_MAX_LAG: '' }).readyMaxLag, undefined, 'empty is unset');
  t.equal(loadConfig({ READY_MAX_LAG: '1' }).readyMaxLag, 1);
  t.equal(loadConfig({ READY_MAX_LAG: '100000' }).readyMaxLag, 100_000);
  t.throws(() => loadConfig({ READY_MAX_LAG: '0' }), /READY_MAX_LAG must be an integer from 1 to 100000, got "0"/);
  t.throws(() => loadConfig({ READY_MAX_LAG: '100001' }), /READY_MAX_LAG must be an integer from 1 to 100000/);
  t.throws(() => loadConfig({ READY_MAX_LAG: 'lots' }), /READY_MAX_LAG must be an integer from 1 to 100000, written in decimal digits, got "lots"/);
});

t.test('AUTH_JWKS_URL needs AUTH_ISSUER and AUTH_AUDIENCE (a provider signs tokens for other applications too)', async (t) => {
  const jwks = { AUTH_JWKS_URL: 'https://idp.example/.well-known/jwks.json' };
  t.throws(() => loadConfig(jwks), /AUTH_JWKS_URL needs AUTH_ISSUER and AUTH_AUDIENCE/);
  t.throws(() => loadConfig({ ...jwks, AUTH_ISSUER: 'https://idp.example/' }), /AUTH_JWKS_URL needs AUTH_AUDIENCE:/);
  t.throws(() => loadConfig({ ...jwks, AUTH_AUDIENCE: 'cairn' }), /AUTH_JWKS_URL needs AUTH_ISSUER:/);
  t.match(loadConfig({ ...jwks, AUTH_ISSUER: 'https://idp.example/', AUTH_AUDIENCE: 'cairn' }).auth, { issuer: 'https://idp.example/', audience: 'cairn' });
  t.equal(loadConfig({ AUTH_JWT_SECRET: 'a-secret-of-enough-length-for-hs256!' }).auth.audience, undefined, 'optional with an HS256 secret');
});

t.test('AUTH_SESSION_MAX_AGE: 24 h by default, 60 s to a year', async (t) => {
  t.equal(loadConfig({}).auth.sessionMaxAgeSeconds, 86_400);
  t.equal(loadConfig({ AUTH_SESSION_MAX_AGE: '60' }).auth.sessionMaxAgeSeconds, 60);
  t.throws(() => loadConfig({ AUTH_SESSION_MAX_AGE: '59' }), /AUTH_SESSION_MAX_AGE must be an integer from 60 to 31536000/);
  t.equal(loadConfig({ AUTH_SESSION_MAX_AGE: '31536000' }).auth.sessionMaxAgeSeconds, 31_536_000);
  t.throws(() => loadConfig({ AUTH_SESSION_MAX_AGE: '31536001' }), /AUTH_SESSION_MAX_AGE/);
});

t.test('ports: integers from 0 (any free port) to 65535', async (t) => {
  t.equal(loadConfig({ PORT: '65535' }).port, 65535);
  t.equal(loadConfig({ MEMORY_PORT: '0' }).memoryPort, 0);
  t.throws(() => loadConfig({ PORT: '65536' }), new ConfigError('PORT must be an integer from 0 to 65535, got "65536"'));
  t.throws(() => loadConfig({ MEMORY_PORT: '70000' }), /MEMORY_PORT must be an integer from 0 to 65535/);
  t.throws(() => loadConfig({ PORT: 'abc' }), /PORT must be an integer from 0 to 65535, written in decimal digits, got "abc"/);
});

t.test('LOG_LEVEL: one of pino\'s levels, in any case', async (t) => {
  t.equal(loadConfig({}).logLevel, 'info');
  t.equal(loadConfig({ LOG_LEVEL: 'WARN' }).logLevel, 'warn');
  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) t.equal(loadConfig({ LOG_LEVEL: level }).logLevel, level);
  t.throws(() => loadConfig({ LOG_LEVEL: 'verbose' }), new ConfigError('LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"'));
});

t.test('timeouts and retries: bounded, since a timer past 2^31 - 1 ms fires at once', async (t) => {
  t.equal(loadConfig({}).consistencyTimeoutMs, 5000);
  t.equal(loadConfig({ CONSISTENCY_TIMEOUT_MS: '0' }).consistencyTimeoutMs, 0, '0: no wait');
  t.equal(loadConfig({ CONSISTENCY_TIMEOUT_MS: '600000' }).consistencyTimeoutMs, 600_000);
  t.throws(() => loadConfig({ CONSISTENCY_TIMEOUT_MS: '600001' }), new ConfigError('CONSISTENCY_TIMEOUT_MS must be an integer from 0 to 600000, got "600001"'));
  t.throws(() => loadConfig({ CONSISTENCY_TIMEOUT_MS: '3000000000' }), /CONSISTENCY_TIMEOUT_MS must be an integer from 0 to 600000/);
  t.equal(loadConfig({}).eventStoreTimeoutMs, 10_000);
  t.equal(loadConfig({ EVENTSTORE_TIMEOUT_MS: '100' }).eventStoreTimeoutMs, 100);
  t.equal(loadConfig({ EVENTSTORE_TIMEOUT_MS: '600000' }).eventStoreTimeoutMs, 600_000);
  t.throws(() => loadConfig({ EVENTSTORE_TIMEOUT_MS: '99' }), new ConfigError('EVENTSTORE_TIMEOUT_MS must be an integer from 100 to 600000, got "99"'));
  t.throws(() => loadConfig({ EVENTSTORE_TIMEOUT_MS: '600001' }), /EVENTSTORE_TIMEOUT_MS must be an integer from 100 to 600000/);
  t.throws(() => loadConfig({ EVENTSTORE_TIMEOUT_MS: '10s' }), /EVENTSTORE_TIMEOUT_MS must be an integer from 100 to 600000, written in decimal digits/);
  const llm = (env: Record<string, string>) => loadConfig(env).providers.llm;
  t.equal(llm({}).timeoutMs, 60_000);
  t.equal(llm({ LLM_TIMEOUT_MS: '1' }).timeoutMs, 1);
  t.equal(llm({ LLM_TIMEOUT_MS: '300000' }).timeoutMs, 300_000);
  t.throws(() => loadConfig({ LLM_TIMEOUT_MS: '0' }), /LLM_TIMEOUT_MS must be an integer from 1 to 300000, got "0"/, '0 would fail every request');
  t.throws(() => loadConfig({ LLM_TIMEOUT_MS: '300001' }), /LLM_TIMEOUT_MS must be an integer from 1 to 300000/, 'fetch stops waiting for headers at 300 s');
  t.equal(llm({}).maxRetries, 2);
  t.equal(llm({ LLM_MAX_RETRIES: '0' }).maxRetries, 0);
  t.equal(llm({ LLM_MAX_RETRIES: '10' }).maxRetries, 10);
  t.throws(() => loadConfig({ LLM_MAX_RETRIES: '11' }), /LLM_MAX_RETRIES must be an integer from 0 to 10/);
  t.equal(llm({}).chatMemoryMaxBytes, 32_768);
  t.equal(llm({ CHAT_MEMORY_MAX_BYTES: '8192' }).chatMemoryMaxBytes, 8192);
  t.equal(llm({ CHAT_MEMORY_MAX_BYTES: '819200' }).chatMemoryMaxBytes, 819_200);
  t.throws(() => loadConfig({ CHAT_MEMORY_MAX_BYTES: '8191' }), /CHAT_MEMORY_MAX_BYTES must be an integer from 8192 to 819200/, 'the largest memory must fit');
  t.throws(() => loadConfig({ CHAT_MEMORY_MAX_BYTES: '819201' }), /CHAT_MEMORY_MAX_BYTES must be an integer from 8192 to 819200/);
});

t.test('AUTH_JWT_SECRET: at least 32 bytes (RFC 7518 §3.2), counted in UTF-8 bytes', async (t) => {
  t.throws(() => loadConfig({ AUTH_JWT_SECRET: 'x'.repeat(31) }), /AUTH_JWT_SECRET must be at least 32 bytes \(is 31\)/);
  t.equal(loadConfig({ AUTH_JWT_SECRET: 'x'.repeat(32) }).auth.jwtSecret, 'x'.repeat(32));
  t.throws(() => loadConfig({ AUTH_JWT_SECRET: 'é'.repeat(15) + 'x' }), /is 31/, 'é is two bytes');
  t.equal(loadConfig({ AUTH_JWT_SECRET: 'é'.repeat(16) }).auth.jwtSecret?.length, 16);
  t.equal(loadConfig({ AUTH_JWT_SECRET: '' }).auth.jwtSecret, undefined, 'empty is unset');
});

t.test('AUTH_JWKS_URL: https, or http to a loopback host only', async (t) => {
  const issued = { AUTH_ISSUER: 'https://idp.example/', AUTH_AUDIENCE: 'cairn' };
  for (const ok of ['https://idp.example/jwks', 'http://127.0.0.1:8443/jwks', 'http://127.9.9.9/jwks', 'http://localhost/jwks', 'http://[::1]:1/jwks']) {
    t.equal(loadConfig({ AUTH_JWKS_URL: ok, ...issued }).auth.jwksUrl, ok, ok);
  }
  for (const bad of ['http://idp.example/jwks', 'http://10.0.0.1/jwks', 'http://127.0.0.1.nip.io/jwks', 'ftp://idp.example/jwks', 'idp.example/jwks']) {
    t.throws(() => loadConfig({ AUTH_JWKS_URL: bad, ...issued }), /AUTH_JWKS_URL must be an https URL \(http only for a loopback host\)/, bad);
  }
});

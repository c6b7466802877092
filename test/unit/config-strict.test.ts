import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startCairn } from '../../api/app.js';
import { startupProblem } from '../../api/startup.js';
import { ConfigError, loadConfig } from '../../infra/config.js';
import { createLogger } from '../../infra/logger.js';
import { openStores } from '../../infra/stores.js';

/** Settings read strictly: what Number() or a driver would take in its own way is refused at start, naming the variable. */

t.test('integers: decimal digits only; blank is unset, as for every other setting', async (t) => {
  t.equal(loadConfig({ PORT: ' ' }).port, 8080, 'PORT=" " is the default, not port 0 (a random port)');
  t.equal(loadConfig({ CONSISTENCY_TIMEOUT_MS: '  ' }).consistencyTimeoutMs, 5000, 'not 0 (every lagging read a 503 at once)');
  t.equal(loadConfig({ LLM_MAX_RETRIES: '\n' }).providers.llm.maxRetries, 2);
  t.equal(loadConfig({ PORT: ' 9090\n' }).port, 9090, 'surrounding whitespace (a newline from a file) trimmed');
  t.equal(loadConfig({ PORT: '08080' }).port, 8080, 'leading zeros are still decimal');
  for (const bad of ['0x10', '1e3', '1.0', '+5', '-1', '-0', '10abc', '0b11', '0o17', '1_000', 'Infinity', '१०']) {
    t.throws(() => loadConfig({ PORT: bad }), new ConfigError(`PORT must be an integer from 0 to 65535, written in decimal digits, got "${bad}"`), bad);
  }
  t.throws(() => loadConfig({ CONSISTENCY_TIMEOUT_MS: '5e3' }), /CONSISTENCY_TIMEOUT_MS must be an integer from 0 to 600000, written in decimal digits, got "5e3"/);
  t.throws(() => loadConfig({ PORT: '99999999999999999999999' }), /PORT must be an integer from 0 to 65535, got "99999999999999999999999"/, 'huge');
});

t.test('PORT and MEMORY_PORT must differ (0, any free port, may be given to both)', async (t) => {
  t.throws(() => loadConfig({ PORT: '9000', MEMORY_PORT: '9000' }), new ConfigError('PORT and MEMORY_PORT must differ (both are 9000): the platform API and the memory service listen on a port each'));
  t.throws(() => loadConfig({ PORT: '8081' }), /PORT and MEMORY_PORT must differ \(both are 8081\)/, 'PORT set to the memory service\'s default');
  t.throws(() => loadConfig({ MEMORY_PORT: '8080' }), /both are 8080/);
  t.match(loadConfig({ PORT: '0', MEMORY_PORT: '0' }), { port: 0, memoryPort: 0 });
  t.match(loadConfig({ PORT: '8081', MEMORY_PORT: '8080' }), { port: 8081, memoryPort: 8080 });
});

t.test('LLM_BASE_URL and EMBEDDINGS_BASE_URL: an http(s) URL without query or fragment', async (t) => {
  for (const name of ['LLM_BASE_URL', 'EMBEDDINGS_BASE_URL']) {
    t.equal(loadConfig({ [name]: 'http://localhost:11434/v1/' }).providers.embeddings.baseUrl, 'http://localhost:11434/v1', `${name}: trailing slash dropped`);
    t.equal(loadConfig({ [name]: 'https://api.openai.com/v1' }).providers.embeddings.baseUrl, 'https://api.openai.com/v1');
    for (const bad of ['localhost:11434/v1', '127.0.0.1:11434/v1', 'ftp://llm.example/v1', 'llm.example', 'http://']) {
      t.throws(() => loadConfig({ [name]: bad }), new RegExp(`^${name} must be an http or https URL`), `${name}=${bad}`);
    }
    t.throws(() => loadConfig({ [name]: 'https://llm.example/v1?api-version=1' }), new RegExp(`^${name} must not have a query or fragment`));
    t.throws(() => loadConfig({ [name]: 'https://llm.example/v1#x' }), new RegExp(`^${name} must not have a query or fragment`));
  }
  const error = (() => { try { loadConfig({ LLM_BASE_URL: 'ftp://cairn:hunter2@llm.example/v1?key=sk-abc' }); } catch (e) { return e as Error; } })();
  t.equal(error?.message, 'LLM_BASE_URL must be an http or https URL (the OpenAI-style base including /v1, e.g. http://localhost:11434/v1), got "ftp://[redacted]@llm.example/v1?[redacted]"', 'no password or key in the message');
});

t.test('EVENTSTORE_URL and MONGODB_URL: their drivers\' schemes, the value shown without credentials', async (t) => {
  t.equal(loadConfig({ EVENTSTORE_URL: 'esdb://localhost:2113?tls=false' }).eventStoreUrl, 'esdb://localhost:2113?tls=false');
  t.equal(loadConfig({ EVENTSTORE_URL: 'esdb+discover://cluster.example:2113' }).eventStoreUrl, 'esdb+discover://cluster.example:2113');
  t.equal(loadConfig({ MONGODB_URL: 'mongodb://localhost:27017/?replicaSet=rs0' }).mongodbUrl, 'mongodb://localhost:27017/?replicaSet=rs0');
  t.equal(loadConfig({ MONGODB_URL: 'mongodb+srv://cluster.example/' }).mongodbUrl, 'mongodb+srv://cluster.example/');
  t.throws(() => loadConfig({ EVENTSTORE_URL: 'http://admin:hunter2@es.example:2113' }),
    new ConfigError('EVENTSTORE_URL must start with esdb:// or esdb+discover://, got "http://[redacted]@es.example:2113"'));
  t.throws(() => loadConfig({ MONGODB_URL: 'localhost:27017' }), new ConfigError('MONGODB_URL must start with mongodb:// or mongodb+srv://, got "localhost:27017"'));
  t.throws(() => loadConfig({ AUTH_JWKS_URL: 'http://u:hunter2@idp.example/jwks', AUTH_ISSUER: 'i', AUTH_AUDIENCE: 'a' }),
    new ConfigError('AUTH_JWKS_URL must be an https URL (http only for a loopback host), got "http://[redacted]@idp.example/jwks"'));
  // An https URL with credentials: fetch refuses it, so the key set could never be fetched (every session 503).
  t.throws(() => loadConfig({ AUTH_JWKS_URL: 'https://u:hunter2@idp.example/jwks', AUTH_ISSUER: 'i', AUTH_AUDIENCE: 'a' }),
    new ConfigError('AUTH_JWKS_URL must not carry a user or password (requests cannot be sent to such a URL), got "https://[redacted]@idp.example/jwks"'));
});

t.test('a connection string its driver refuses: a ConfigError naming the variable, without the password', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-config-strict-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const esdb = await openStores(loadConfig({ DATA_DIR: dataDir, EVENTSTORE_URL: 'esdb://admin:hunter2@es.example:notaport?tls=false' })).then(() => undefined, (e: unknown) => e as Error);
  t.type(esdb, ConfigError);
  t.match(esdb?.message, /^EVENTSTORE_URL is not a valid connection string: Unexpected "notaport" at position \d+, expected port number\.$/);
  t.notMatch(JSON.stringify(esdb) + String(esdb?.message), /hunter2/, 'the client\'s error carried the whole string');
  const mongo = await openStores(loadConfig({ DATA_DIR: dataDir, MONGODB_URL: 'mongodb://admin:hunter2@127.0.0.1:1/?nope=1' })).then(() => undefined, (e: unknown) => e as Error);
  t.type(mongo, ConfigError);
  t.equal(mongo?.message, 'MONGODB_URL is not a valid connection string: option nope is not supported');
  // Refused by other checks of the driver's (an option without a value, a port out of range), and before the
  // embedded log is opened: nothing is created in DATA_DIR.
  const fresh = join(dataDir, 'fresh');
  for (const [url, message] of [
    ['mongodb://admin:hunter2@h/?w=', 'URI option "w" cannot be specified with no value'],
    ['mongodb://h/?replicaSet=', 'URI option "replicaSet" cannot be specified with no value'],
    ['mongodb://admin:hunter2@h:99999/', 'Unable to parse h:99999 with URL'],
    ['mongodb://h/?tls=maybe', 'tls/ssl must be either "true" or "false"'],
  ] as const) {
    const refused = await openStores(loadConfig({ DATA_DIR: fresh, MONGODB_URL: url })).then(() => undefined, (e: unknown) => e as Error);
    t.type(refused, ConfigError, url);
    t.equal(refused?.message, `MONGODB_URL is not a valid connection string: ${message}`);
    t.notMatch(String(refused?.message), /hunter2/);
    t.notOk(existsSync(fresh), `${url}: DATA_DIR was not created, nor a log in it`);
  }
});

t.test('a store server that cannot be reached at start: one line naming the variable, without the password', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-config-strict-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const log = createLogger('silent');
  const start = async (env: NodeJS.ProcessEnv) => {
    const config = loadConfig({ DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', PROJECTIONS_THREAD: 'false', ...env });
    const error = await startCairn({ config, log }).then(async (cairn) => { await cairn.close(); return undefined; }, (e: unknown) => e);
    return startupProblem(error, config);
  };
  const esdb = await start({ EVENTSTORE_URL: 'esdb://admin:hunter2@127.0.0.1:1?tls=false', EVENTSTORE_TIMEOUT_MS: '2000' });
  t.match(esdb, /^EVENTSTORE_URL: EventStoreTimeoutError: the event store could not be reached for endPosition \(.*ECONNREFUSED 127\.0\.0\.1:1.*\); check that EventStoreDB is running and reachable from here$/);
  t.notMatch(esdb, /hunter2/);
  const mongo = await start({ MONGODB_URL: 'mongodb://admin:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300' });
  t.match(mongo, /^MONGODB_URL: MongoDB could not be reached \(MongoServerSelectionError: connect ECONNREFUSED 127\.0\.0\.1:1\); check that it is running and reachable from here$/);
  t.notMatch(mongo, /hunter2/);
});

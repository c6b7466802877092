import { resolve } from 'node:path';
import { redactSecrets } from './redact.js';

/** Every setting Cairn reads, from the environment. README's configuration table lists the same names. */
export interface Config {
  host: string;
  port: number;
  memoryPort: number;
  dataDir: string;
  eventStoreUrl?: string;
  /**
   * EVENTSTORE_TIMEOUT_MS: how long a call to EventStoreDB waits for the server (an append for its answer, a read for
   * each of its answers) before it fails, answered 503 event-store-unavailable.
   */
  eventStoreTimeoutMs: number;
  mongodbUrl?: string;
  mongodbDb: string;
  auth: {
    jwtSecret?: string;
    jwksUrl?: string;
    tenantClaim: string;
    issuer?: string;
    audience?: string;
    /** AUTH_SESSION_MAX_AGE: the longest a session token is accepted, from its `iat` (and never longer from now). */
    sessionMaxAgeSeconds: number;
  };
  consistencyTimeoutMs: number;
  /**
   * SEND_TIMEOUT_MS: how long an answer of more than one 64 KiB piece (a memory export, streamed; 100 long search
   * results) waits for its client to take more of it before the connection is closed, as nginx's `send_timeout`: a
   * client that stopped reading would otherwise hold the connection and the data waiting for it for ever.
   */
  sendTimeoutMs: number;
  /** PROJECTIONS_THREAD: projection runners in their own worker thread (default) or in the HTTP thread. */
  projectionsThread: boolean;
  /**
   * PROJECTIONS_NICE: how much lower the projection thread's scheduling priority is than the HTTP thread's
   * and the log writer's (Linux nice, 0–19; 0 leaves it alone). Read models are allowed to lag by a few
   * milliseconds; acknowledging writes is the critical path.
   */
  projectionsNice: number;
  /**
   * STATE_CACHE_MB: how much memory the command bus's cached stream states may take, estimated (a memory scope
   * weighs its live memories, a project's configuration its keys: ~512 bytes each). The least recently written go first.
   */
  stateCacheMb: number;
  /**
   * READY_MAX_LAG: how many events a projection may be behind the log before `/readyz` answers 503.
   * Unset (the default): lag alone never makes a node not ready (every node behind the same log lags alike).
   */
  readyMaxLag?: number;
  memory: {
    ownerToken?: string;
    allowedHosts?: string[];
  };
  logLevel: string;
  /** Chat and embeddings providers of the memory service (OpenAI-compatible HTTP APIs, or the local embedder). */
  providers: ProvidersConfig;
}

export type EmbeddingsProviderKind = 'local' | 'openai' | 'none';

export interface ProvidersConfig {
  llm: {
    /** OpenAI-style base URL including `/v1` (OpenAI, Ollama, vLLM, llama.cpp server). Unset: ingest and chat answer 503. */
    baseUrl?: string;
    apiKey?: string;
    chatModel: string;
    /** Per request to a provider (chat and embeddings), including reading the reply. */
    timeoutMs: number;
    /** Further attempts after a 429 or 5xx reply. */
    maxRetries: number;
    /** Bytes of memory texts a chat prompt is given at most (CHAT_MEMORY_MAX_BYTES): the best ranked that fit. */
    chatMemoryMaxBytes: number;
  };
  embeddings: {
    provider: EmbeddingsProviderKind;
    baseUrl?: string;
    apiKey?: string;
    /** Model name sent to an `openai` provider. */
    model: string;
  };
}

/** A setting in the environment that Cairn cannot run with: the message names the variable and what it takes. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** pino's levels: a name outside them would fail later in the logger, without naming LOG_LEVEL. */
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function logLevel(env: NodeJS.ProcessEnv): string {
  const value = optional(env.LOG_LEVEL)?.toLowerCase() ?? 'info';
  if (!LOG_LEVELS.includes(value)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(env.LOG_LEVEL)}`);
  return value;
}

/**
 * An integer from `min` to `max`: decimal digits only, surrounding whitespace trimmed; unset, empty or blank is the
 * default (as for every other setting). Number() alone would take " " as 0 (PORT=" " listening on a random port), and
 * "0x10", "1e3", "1.0" or "+5". Either refusal names the range, so the message says what the setting takes.
 */
function bounded(name: string, fallback: number, min: number, max: number, env: NodeJS.ProcessEnv): number {
  const raw = optional(env[name]);
  if (raw === undefined) return fallback;
  const range = `${name} must be an integer from ${min} to ${max}`;
  if (!/^[0-9]+$/.test(raw)) throw new ConfigError(`${range}, written in decimal digits, got "${env[name]}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${range}, got "${env[name]}"`);
  return value;
}

/** Unset or empty: undefined; otherwise as `bounded`. */
function optionalBounded(name: string, min: number, max: number, env: NodeJS.ProcessEnv): number | undefined {
  return optional(env[name]) === undefined ? undefined : bounded(name, min, min, max, env);
}

function optional(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

/**
 * A token sent or received as `Authorization: Bearer <token>` (MEMORY_OWNER_TOKEN, LLM_API_KEY, EMBEDDINGS_API_KEY) must be
 * printable ASCII without whitespace: fetch refuses any other header value (every provider call would fail as
 * "unreachable", the whole header, the key, in the logged reason), and Node reads a received header's bytes as latin1,
 * so a token with other characters could never match one sent. The refusal says where, never the token.
 */
function sendableBearerToken(name: string, value: string): string {
  const at = value.search(/[^\x21-\x7e]/);
  if (at < 0) return value;
  const what = /[\r\n]/.test(value[at]!) ? 'a line break' : /\s/.test(value[at]!) ? 'whitespace' : 'a character that is not printable ASCII';
  throw new ConfigError(`${name} must be printable ASCII without whitespace (it is sent as "Authorization: Bearer <token>"), got a value with ${what} at character ${at + 1} (not shown)`);
}

/**
 * MEMORY_OWNER_TOKEN: unset or exactly empty turns the owner token off. A value of only whitespace would
 * otherwise turn it off too, silently: refused, like one that no `Authorization: Bearer` header can carry
 * (sendableBearerToken). Surrounding whitespace (a newline from a file) is trimmed.
 */
function ownerToken(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.MEMORY_OWNER_TOKEN;
  if (raw === undefined || raw === '') return undefined;
  const value = raw.trim();
  if (value === '') throw new ConfigError('MEMORY_OWNER_TOKEN is set but blank: set a token, or set it empty (MEMORY_OWNER_TOKEN=) or unset it to run the memory service without one');
  return sendableBearerToken('MEMORY_OWNER_TOKEN', value);
}

function embeddingsProvider(env: NodeJS.ProcessEnv): EmbeddingsProviderKind {
  const raw = optional(env.EMBEDDINGS_PROVIDER)?.toLowerCase() ?? 'local';
  if (raw !== 'local' && raw !== 'openai' && raw !== 'none') throw new ConfigError(`EMBEDDINGS_PROVIDER must be local, openai or none, got "${raw}"`);
  return raw;
}

/** A URL as a message may show it: its user and password, and its query (which may carry keys), left out. */
function shown(url: string): string {
  return JSON.stringify(redactSecrets(url));
}

/**
 * LLM_BASE_URL, EMBEDDINGS_BASE_URL: an http(s) URL that paths such as `/chat/completions` are appended to, so
 * without a query or fragment (they would end up before the path). Checked at start: a value like
 * `localhost:11434/v1` (no scheme) would otherwise fail every ingest, chat or embedding as "unreachable".
 */
function baseUrl(name: string, env: NodeJS.ProcessEnv): string | undefined {
  const value = optional(env[name])?.replace(/\/+$/, '');
  if (value === undefined) return undefined;
  let url: URL | undefined;
  try { url = new URL(value); } catch { /* reported below */ }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    throw new ConfigError(`${name} must be an http or https URL (the OpenAI-style base including /v1, e.g. http://localhost:11434/v1), got ${shown(value)}`);
  }
  if (url.username || url.password) {
    // fetch refuses a URL with credentials: every call would fail as "unreachable".
    const key = name === 'LLM_BASE_URL' ? 'LLM_API_KEY' : 'EMBEDDINGS_API_KEY';
    throw new ConfigError(`${name} must not carry a user or password (requests cannot be sent to such a URL): give the key in ${key}, got ${shown(value)}`);
  }
  if (url.search || url.hash || value.includes('?') || value.includes('#')) {
    throw new ConfigError(`${name} must not have a query or fragment: paths such as /chat/completions are appended to it, got ${shown(value)}`);
  }
  return value;
}

/** LLM_API_KEY, EMBEDDINGS_API_KEY: surrounding whitespace (a newline from a file) trimmed; see sendableBearerToken. */
function apiKey(name: string, env: NodeJS.ProcessEnv): string | undefined {
  const value = optional(env[name]);
  return value === undefined ? undefined : sendableBearerToken(name, value);
}

function loadProviders(env: NodeJS.ProcessEnv): ProvidersConfig {
  const llmBaseUrl = baseUrl('LLM_BASE_URL', env);
  const provider = embeddingsProvider(env);
  const embeddingsBaseUrl = baseUrl('EMBEDDINGS_BASE_URL', env) ?? llmBaseUrl;
  if (provider === 'openai' && !embeddingsBaseUrl) throw new ConfigError('EMBEDDINGS_PROVIDER=openai needs EMBEDDINGS_BASE_URL or LLM_BASE_URL');
  return {
    llm: {
      baseUrl: llmBaseUrl,
      apiKey: apiKey('LLM_API_KEY', env),
      chatModel: optional(env.LLM_CHAT_MODEL) ?? 'gpt-4o-mini',
      // Node's fetch stops waiting for a reply's headers after 300 s whatever the request's own timeout says (a
      // longer setting would fail at 300 s as "unreachable"): a non-streamed completion must begin within that.
      timeoutMs: bounded('LLM_TIMEOUT_MS', 60_000, 1, 300_000, env),
      maxRetries: bounded('LLM_MAX_RETRIES', 2, 0, 10, env),
      // At least one memory of the largest size (8,192 bytes) always fits; 819,200 is 100 of them (no bound at all).
      chatMemoryMaxBytes: bounded('CHAT_MEMORY_MAX_BYTES', 32_768, 8_192, 819_200, env),
    },
    embeddings: {
      provider,
      baseUrl: embeddingsBaseUrl,
      // LLM_API_KEY only goes where LLM_BASE_URL points: never to another host's embeddings endpoint.
      apiKey: apiKey('EMBEDDINGS_API_KEY', env) ?? (embeddingsBaseUrl === llmBaseUrl ? apiKey('LLM_API_KEY', env) : undefined),
      model: optional(env.LLM_EMBEDDING_MODEL) ?? 'text-embedding-3-small',
    },
  };
}

/** MEMORY_ALLOWED_HOSTS: unset or empty checks no Host; a list that names no host (",") is a configuration error, not "no check". */
function allowedHosts(env: NodeJS.ProcessEnv): string[] | undefined {
  const value = optional(env.MEMORY_ALLOWED_HOSTS);
  if (value === undefined) return undefined;
  const hosts = value.split(',').map((h) => h.trim().toLowerCase()).filter(Boolean);
  if (hosts.length === 0) throw new ConfigError(`MEMORY_ALLOWED_HOSTS is set but names no host (${JSON.stringify(value)}); unset it to accept any Host`);
  return hosts;
}

/**
 * Session JWT settings. An identity provider (AUTH_JWKS_URL) usually signs tokens for many applications:
 * without an issuer and an audience to check, a token it issued for another application would open a
 * session here. So a JWKS needs both (an HS256 secret is Cairn's own, and they stay optional with it).
 */
function authConfig(env: NodeJS.ProcessEnv): Config['auth'] {
  const auth = {
    jwtSecret: optional(env.AUTH_JWT_SECRET),
    jwksUrl: optional(env.AUTH_JWKS_URL),
    tenantClaim: optional(env.AUTH_TENANT_CLAIM) ?? 'tenant_id',
    issuer: optional(env.AUTH_ISSUER),
    audience: optional(env.AUTH_AUDIENCE),
    sessionMaxAgeSeconds: bounded('AUTH_SESSION_MAX_AGE', 86_400, 60, 31_536_000, env),
  };
  // RFC 7518 §3.2: an HS256 key at least as long as the hash (jose takes a key of any length).
  if (auth.jwtSecret !== undefined && Buffer.byteLength(auth.jwtSecret, 'utf8') < 32) {
    throw new ConfigError(`AUTH_JWT_SECRET must be at least 32 bytes (is ${Buffer.byteLength(auth.jwtSecret, 'utf8')}): a shorter HS256 secret can be guessed offline from any token`);
  }
  if (auth.jwksUrl) {
    // The key set decides who can sign in: over plain HTTP anyone on the path could substitute their own keys.
    let url: URL | undefined;
    try { url = new URL(auth.jwksUrl); } catch { /* reported below */ }
    if (!url || (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopback(url.hostname)))) {
      throw new ConfigError(`AUTH_JWKS_URL must be an https URL (http only for a loopback host), got ${shown(auth.jwksUrl)}`);
    }
    // fetch refuses a URL with credentials: the key set could never be fetched, and every session would answer 503.
    if (url.username || url.password) throw new ConfigError(`AUTH_JWKS_URL must not carry a user or password (requests cannot be sent to such a URL), got ${shown(auth.jwksUrl)}`);
    const missing = [auth.issuer ? [] : ['AUTH_ISSUER'], auth.audience ? [] : ['AUTH_AUDIENCE']].flat();
    if (missing.length > 0) {
      throw new ConfigError(`AUTH_JWKS_URL needs ${missing.join(' and ')}: an identity provider signs tokens for other applications too, and only its iss and aud tell them apart`);
    }
  }
  return auth;
}

function isLoopback(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

/**
 * EVENTSTORE_URL, MONGODB_URL: a connection string of the driver's schemes. Checked here so that a wrong one is a
 * configuration error naming the variable; the drivers' own errors come as stack traces, EventStoreDB's with the
 * whole string (its password included) in them.
 */
function connectionString(name: string, schemes: string[], env: NodeJS.ProcessEnv): string | undefined {
  const value = optional(env[name]);
  if (value === undefined) return undefined;
  if (!schemes.some((scheme) => value.toLowerCase().startsWith(`${scheme}://`))) {
    throw new ConfigError(`${name} must start with ${schemes.map((s) => `${s}://`).join(' or ')}, got ${shown(value)}`);
  }
  return value;
}

/** The two APIs listen on two ports (0 takes a free port each). The same port twice would fail as "in use by another process". */
function ports(env: NodeJS.ProcessEnv): { port: number; memoryPort: number } {
  const port = bounded('PORT', 8080, 0, 65535, env);
  const memoryPort = bounded('MEMORY_PORT', 8081, 0, 65535, env);
  if (port !== 0 && port === memoryPort) {
    throw new ConfigError(`PORT and MEMORY_PORT must differ (both are ${port}): the platform API and the memory service listen on a port each`);
  }
  return { port, memoryPort };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    host: optional(env.HOST) ?? '127.0.0.1',
    ...ports(env),
    dataDir: resolve(optional(env.DATA_DIR) ?? './data'),
    eventStoreUrl: connectionString('EVENTSTORE_URL', ['esdb', 'esdb+discover'], env),
    // At least long enough for a healthy server's round trip; at most what a timer can wait (see CONSISTENCY_TIMEOUT_MS).
    eventStoreTimeoutMs: bounded('EVENTSTORE_TIMEOUT_MS', 10_000, 100, 600_000, env),
    mongodbUrl: connectionString('MONGODB_URL', ['mongodb', 'mongodb+srv'], env),
    mongodbDb: mongodbDatabase(env),
    auth: authConfig(env),
    // 0: a read whose read model is behind answers 503 at once. Bounded: a timer past 2^31 - 1 ms fires at once.
    consistencyTimeoutMs: bounded('CONSISTENCY_TIMEOUT_MS', 5000, 0, 600_000, env),
    sendTimeoutMs: bounded('SEND_TIMEOUT_MS', 60_000, 1000, 600_000, env),
    projectionsThread: flag('PROJECTIONS_THREAD', true, env),
    projectionsNice: bounded('PROJECTIONS_NICE', 10, 0, 19, env),
    stateCacheMb: bounded('STATE_CACHE_MB', 256, 16, 65_536, env),
    // Up to the most `ops projections status` counts (LAG_COUNT_LIMIT).
    readyMaxLag: optionalBounded('READY_MAX_LAG', 1, 100_000, env),
    memory: {
      ownerToken: ownerToken(env),
      allowedHosts: allowedHosts(env),
    },
    logLevel: logLevel(env),
    providers: loadProviders(env),
  };
}

/**
 * MONGODB_DB as MongoDB names a database: 1-63 bytes without `/\\. "$` (nor `*<>:|?`, refused on Windows servers) or
 * NUL. The driver refuses such a name only once connected, which read as "MongoDB could not be reached".
 */
function mongodbDatabase(env: NodeJS.ProcessEnv): string {
  const name = optional(env.MONGODB_DB) ?? 'cairn';
  if (Buffer.byteLength(name, 'utf8') > 63 || /[/\\. "$*<>:|?\0]/.test(name)) {
    throw new ConfigError(`MONGODB_DB must be a MongoDB database name: at most 63 bytes, none of / \\ . space " $ * < > : | ? or NUL, got ${JSON.stringify(env.MONGODB_DB)}`);
  }
  return name;
}

function flag(name: string, fallback: boolean, env: NodeJS.ProcessEnv): boolean {
  const value = optional(env[name])?.toLowerCase();
  if (value === undefined) return fallback;
  if (['true', '1', 'yes', 'on'].includes(value)) return true;
  if (['false', '0', 'no', 'off'].includes(value)) return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(env[name])}`);
}

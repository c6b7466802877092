import type Koa from 'koa';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createRemoteJWKSet, errors, jwksCache, jwtVerify, type JWKSCacheInput, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import type { Config } from '../../infra/config.js';
import type { Logger } from '../../infra/logger.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import type { ApiKeyDoc } from '../../projections/apikeys/projection.js';
import { bearerToken } from '../http/guard.js';
import { ProblemError, unauthorized } from '../http/problem.js';
import { requestedMinPosition, requestSignal, type AuthKind, type Principal } from '../http/routes.js';
import { hashApiKey, isWellFormedApiKey } from '../../infra/apikeys.js';
import { redactSecrets } from '../../infra/redact.js';
import { describeError } from '../../projections/health.js';
import { unpairedSurrogate } from '../../domain/shared/text.js';

/** A request authenticated with a key: `correlation_id` is the request's id, for the ApiKeyUsed event it may cause. */
export interface KeyUse { key_id: string; project_id: string; tenant_id: string; correlation_id?: string }

const KEY_CACHE_LIMIT = 10_000;
const NO_KEY_HASH = createHash('sha256').update('').digest();
/**
 * How far a session token's `iat` and `nbf` may lie ahead of this server's clock (the identity provider's clock may run a
 * little fast; providers such as Entra ID set `nbf` to `iat`, so a token used at once would otherwise be not yet valid).
 */
const IAT_SKEW_SECONDS = 60;

/** How many keys of the set a token without `kid` is tried against (a provider rotating keys publishes two or three). */
const MAX_KEYS_TRIED = 8;

/**
 * A token without `kid` (or with one several keys share) that more than one key of the set could have signed: jose
 * leaves the choice to the caller (its error iterates over the candidates). Each is tried, up to MAX_KEYS_TRIED;
 * only a wrong signature moves on to the next, any other failure (expired, wrong audience) is the token's answer.
 */
async function tryEachKey(token: string, error: unknown, options: JWTVerifyOptions) {
  if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error;
  let tried = 0;
  for await (const key of error as errors.JWKSMultipleMatchingKeys & AsyncIterable<CryptoKey>) {
    if (++tried > MAX_KEYS_TRIED) break;
    try {
      return await jwtVerify(token, key, options);
    } catch (inner) {
      if (!(inner instanceof errors.JWSSignatureVerificationFailed)) throw inner;
    }
  }
  throw new errors.JWSSignatureVerificationFailed();
}

/** The JWKS could not be had (unreachable, slow, not 200, not a key set): the identity provider's failure, not the token's. */
class KeySetUnavailableError extends Error {
  override readonly name = 'KeySetUnavailableError';
}

/**
 * After a fetch of the JWKS, a token naming a key the set does not hold makes jose fetch it again only once this
 * long has passed (its default, a bound on what tokens with made-up `kid`s can make us fetch).
 */
const JWKS_COOLDOWN_MS = 30_000;

/**
 * A token names a key (`kid`) the key set did not hold when it was last fetched, less than JWKS_COOLDOWN_MS ago, and
 * it may not be fetched again yet. A provider that publishes a new key and signs with it at once (OpenID Connect
 * Core §10.1.1: the verifier fetches the set again when it sees an unfamiliar `kid`) would otherwise have its valid
 * sessions told they are invalid until the cooldown ends.
 */
class KeySetCoolingDownError extends Error {
  override readonly name = 'KeySetCoolingDownError';
  constructor(readonly retryAfterSeconds: number) {
    super('the token names a key the JWKS did not hold when last fetched');
  }
}

/**
 * Resolves the caller of a platform request. API keys (`sk_…`) are checked for shape and checksum
 * first, then looked up by SHA-256 hash and compared in constant time; sessions are JWTs verified
 * against AUTH_JWKS_URL or AUTH_JWT_SECRET (HS256). `alg: none` never verifies.
 *
 * A key is judged as the api-keys read model knows it. A request carrying X-Min-Position (or min_position)
 * waits first (`waitForKeys`, bounded, then 503) until that read model has reached it: a key whose creation
 * answered before its read model had it works with its X-Event-Position, and a key revoked at a position the
 * request names is refused, on every route, commands included.
 */
export function platformAuthenticator(config: Config['auth'], reads: ReadStore, onKeyUse: (use: KeyUse) => void, clock: () => Date = () => new Date(),
  waitForKeys?: (position: number, signal: AbortSignal) => Promise<void>) {
  let keySource: Uint8Array | JWTVerifyGetKey | undefined;
  let algorithms: string[] = [];
  if (config.jwksUrl) {
    // jose records in this object when it last fetched the set (`uat`), and keeps the set in it.
    const fetched: { uat?: number; jwks?: { keys?: unknown } } = {};
    /** The last fetched set holds a key named `kid` (usable for this token or not: fetching the set again would not change that). */
    const holdsKid = (kid: string) => Array.isArray(fetched.jwks?.keys) && fetched.jwks.keys.some((k: unknown) => (k as { kid?: unknown } | null)?.kid === kid);
    const jwks = createRemoteJWKSet(new URL(config.jwksUrl), { cooldownDuration: JWKS_COOLDOWN_MS, [jwksCache]: fetched as JWKSCacheInput });
    keySource = async (header, token) => {
      const fetchedBefore = fetched.uat;
      try {
        return await jwks(header, token);
      } catch (error) {
        // An unfamiliar kid, judged against a set fetched before this request and not fetched again for it (cooling
        // down): the set may be too old to know the key, so the token cannot be judged now. One fetched for this
        // request (or since it began) that lacks the key is a definite answer: 401 below. So is a set that holds the kid
        // but not for this token (published for another algorithm, for encryption, of another key type): the set knows the key.
        if (error instanceof errors.JWKSNoMatchingKey && typeof header.kid === 'string' && fetched.uat !== undefined && fetched.uat === fetchedBefore && jwks.coolingDown
          && !holdsKid(header.kid)) {
          throw new KeySetCoolingDownError(Math.max(1, Math.ceil((fetched.uat + JWKS_COOLDOWN_MS - Date.now()) / 1000)));
        }
        // The token names no key of the set, or an algorithm the set cannot verify: the token is at fault (401). Several
        // matching keys: each is tried (tryEachKey).
        if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys || error instanceof errors.JOSENotSupported) throw error;
        throw new KeySetUnavailableError('the JWKS at AUTH_JWKS_URL could not be fetched or read', { cause: error });
      }
    };
    algorithms = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];
  } else if (config.jwtSecret) {
    keySource = new TextEncoder().encode(config.jwtSecret);
    algorithms = ['HS256'];
  }

  async function session(token: string, log: Logger | undefined): Promise<Principal> {
    if (!keySource) throw new ProblemError(503, 'not-configured', 'dashboard sessions are not configured (set AUTH_JWKS_URL or AUTH_JWT_SECRET)');
    try {
      // jose's clockTolerance applies to `nbf` and `exp` alike: `exp` is checked again below without it.
      const options = { algorithms, issuer: config.issuer, audience: config.audience, requiredClaims: ['sub', 'exp'], clockTolerance: IAT_SKEW_SECONDS };
      const { payload } = keySource instanceof Uint8Array
        ? await jwtVerify(token, keySource, options)
        : await jwtVerify(token, keySource, options).catch((error: unknown) => tryEachKey(token, error, options));
      const tenant = payload[config.tenantClaim];
      if (typeof payload.sub !== 'string' || payload.sub === '') throw new Error('no sub');
      const nowSeconds = Date.now() / 1000;
      // An expired session is refused the moment it expires (as jose does without a tolerance: `exp` at or before now, in whole seconds).
      if (payload.exp! <= Math.floor(nowSeconds)) throw new Error('expired');
      // jose checks `iat` only against a maximum age: a token issued in the future has not been issued yet.
      if (typeof payload.iat === 'number' && payload.iat > nowSeconds + IAT_SKEW_SECONDS) throw new Error('iat in the future');
      // A session lasts at most AUTH_SESSION_MAX_AGE: counted from `iat` when the token has one, and in any
      // case a token may not stay valid for longer than that from now (so leaving out `iat` does not help).
      if (typeof payload.iat === 'number' && nowSeconds - payload.iat > config.sessionMaxAgeSeconds) throw new Error('session too old');
      if (payload.exp! - nowSeconds > config.sessionMaxAgeSeconds + IAT_SKEW_SECONDS) throw new Error('session lifetime too long');
      if (tenant === undefined) throw unauthorized(`session token has no ${config.tenantClaim} claim`);
      // Present but not a tenant id (a number, as an identity provider's claim mapper may type it; an object; ""): said as it is.
      if (typeof tenant !== 'string' || tenant === '') throw unauthorized(`session token's ${config.tenantClaim} claim must be a non-empty string, not ${tenant === '' ? 'empty' : tenant === null ? 'null' : Array.isArray(tenant) ? 'an array' : typeof tenant === 'object' ? 'an object' : `a ${typeof tenant}`}`);
      // A lone surrogate (JSON carries one escaped) is stored as U+FFFD by MongoDB (BSON is UTF-8): tenants "\ud800x" and
      // "\udc00x" would be one tenant there, each listing the other's projects. Refused, as in every text the API takes.
      for (const [claim, value] of [[config.tenantClaim, tenant], ['sub', payload.sub]] as const) {
        if (unpairedSurrogate(value)) throw unauthorized(`session token's ${claim} claim must be well-formed Unicode (no unpaired surrogates)`);
      }
      return { kind: 'session', user_id: payload.sub, tenant_id: tenant };
    } catch (error) {
      if (error instanceof Error && error.name === 'ProblemError') throw error;
      if (error instanceof KeySetCoolingDownError) {
        throw new ProblemError(503, 'identity-provider-unavailable', `session tokens signed with this key cannot be verified yet: the key (kid) it names was not in the identity provider's key set when that was fetched, less than ${JWKS_COOLDOWN_MS / 1000} s ago; the set is fetched again after Retry-After`, { headers: { 'Retry-After': String(error.retryAfterSeconds) } });
      }
      if (error instanceof KeySetUnavailableError) {
        // Said without the URL's user, password and query (fetch's own message quotes a URL with credentials whole):
        // the failure and its cause (`TypeError: fetch failed: Error: connect ECONNREFUSED …`), each redacted.
        const failure = error.cause as { cause?: unknown } | undefined;
        const reason = [failure, failure?.cause].filter((e) => e !== undefined).map(describeError).join(': ');
        log?.warn({ reason, jwks_url: redactSecrets(config.jwksUrl ?? '') }, 'could not fetch the identity provider\'s keys');
        // A valid session is not to be told it is invalid: retry once the identity provider answers.
        throw new ProblemError(503, 'identity-provider-unavailable', 'session tokens cannot be verified now: the identity provider\'s keys could not be fetched; retry later', { headers: { 'Retry-After': '5' } });
      }
      throw unauthorized('session token is invalid or expired');
    }
  }

  /** `token` is a well-formed key (isWellFormedApiKey). */
  async function apiKey(token: string, correlationId?: string): Promise<Principal> {
    const hash = hashApiKey(token);
    let doc = known.get(hash);
    if (!doc) {
      const epoch = forgets;
      doc = (await reads.find<ApiKeyDoc>('api_keys', { where: { key_hash: hash }, limit: 1 })).items[0];
      // A key event applied while we read may have made this document stale: use it, but do not keep it.
      if (doc && epoch === forgets) remember(hash, doc);
    }
    const presented = Buffer.from(hash, 'hex');
    // Compare even when nothing was found, so a miss and a hit cost the same.
    const stored = doc ? Buffer.from(doc.key_hash, 'hex') : NO_KEY_HASH;
    const equal = timingSafeEqual(presented, stored);
    if (!doc || !equal) throw unauthorized('API key is not valid');
    if (!doc.is_active) throw unauthorized('API key has been revoked');
    if (doc.expires_at && Date.parse(doc.expires_at) <= clock().getTime()) throw unauthorized('API key has expired');
    onKeyUse({ key_id: doc.key_id, project_id: doc.project_id, tenant_id: doc.tenant_id, correlation_id: correlationId });
    return { kind: 'key', key_id: doc.key_id, project_id: doc.project_id, tenant_id: doc.tenant_id, scopes: doc.scopes };
  }

  /**
   * Key documents by hash, so a request does not query the read model. An entry is dropped when this
   * node's api-keys projection applies an event of that key (revocation, use), before the projection
   * reports the position: a revocation still takes effect before its response. Expiry is checked on
   * every request against the clock.
   */
  const known = new Map<string, ApiKeyDoc>();
  const remember = (hash: string, doc: ApiKeyDoc) => {
    if (known.size >= KEY_CACHE_LIMIT) known.delete(known.keys().next().value!);
    known.set(hash, doc);
  };
  let forgets = 0;
  /** Drops the cached documents of these keys, or every cached document (`'all'`). */
  function forget(keyIds: Iterable<string> | 'all'): void {
    forgets++;
    if (keyIds === 'all') {
      known.clear();
      return;
    }
    const ids = new Set(keyIds);
    for (const [hash, doc] of known) if (ids.has(doc.key_id)) known.delete(hash);
  }

  async function authenticate(ctx: Koa.Context, accepted: AuthKind[]): Promise<Principal> {
    const token = bearerToken(ctx);
    const wants = accepted.map((a) => (a === 'key' ? 'a project API key' : 'a dashboard session token')).join(' or ');
    if (token === undefined) throw unauthorized(`this operation needs ${wants} as Authorization: Bearer`);
    const isKey = token.startsWith('sk_');
    if (isKey && accepted.includes('key')) {
      // Shape and checksum first: a lookalike is refused before anything is done for it, a wait included.
      if (!isWellFormedApiKey(token)) throw unauthorized('API key is malformed');
      const minPosition = waitForKeys ? requestedMinPosition(ctx) : undefined;
      if (minPosition !== undefined) await waitForKeys!(minPosition, requestSignal(ctx));
      return apiKey(token, (ctx.state.meta as { correlation_id?: string } | undefined)?.correlation_id);
    }
    if (!isKey && accepted.includes('session')) return session(token, ctx.state.log as Logger | undefined);
    throw unauthorized(`this operation needs ${wants}`);
  }

  return { authenticate, forget };
}

import { DomainError, replayOf, type Decider, type DomainEvent } from '../shared/decider.js';
import { nameProblem } from '../shared/text.js';

export const API_KEY_STREAM_PREFIX = 'apikey-';
export const apiKeyStream = (keyId: string) => `${API_KEY_STREAM_PREFIX}${keyId}`;

/** Key names follow agent names' rules (`nameProblems`), with this limit on the stored form. */
export const MAX_API_KEY_NAME = 100;

/** The key itself never enters the log: only its SHA-256 hash and a short display prefix. */
export type ApiKeyCreated = DomainEvent<'ApiKeyCreated', {
  key_id: string; project_id: string; tenant_id: string; name: string; key_prefix: string; key_hash: string;
  scopes: string[]; expires_at: string | null; created_by: string; created_at: string; request_key: string; request_hash: string;
}>;
export type ApiKeyRevoked = DomainEvent<'ApiKeyRevoked', { key_id: string; project_id: string; revoked_by: string; revoked_at: string }>;
/** Recorded at most once a minute per key, so `last_used_at` is audit-grade without an event per request. */
export type ApiKeyUsed = DomainEvent<'ApiKeyUsed', { key_id: string; project_id: string; used_at: string }>;
export type ApiKeyEvent = ApiKeyCreated | ApiKeyRevoked | ApiKeyUsed;

export type CreateApiKey = { type: 'CreateApiKey'; data: Omit<ApiKeyCreated['data'], 'created_by' | 'created_at' | 'request_key' | 'request_hash'> };
export type RevokeApiKey = { type: 'RevokeApiKey'; data: { key_id: string; project_id: string } };
export type RecordApiKeyUse = { type: 'RecordApiKeyUse'; data: { key_id: string; project_id: string } };
export type ApiKeyCommand = CreateApiKey | RevokeApiKey | RecordApiKeyUse;

export type ApiKeyState =
  | { status: 'none' }
  | { status: 'active' | 'revoked'; project_id: string; request_key: string; request_hash: string; last_used_at: string | null };

export const USE_RECORD_INTERVAL_MS = 60_000;

const isCanonicalInstant = (value: string) => {
  const time = Date.parse(value);
  return !Number.isNaN(time) && new Date(time).toISOString() === value;
};

/** A SHA-256 digest in hex, as the key is stored; the displayed prefix is `sk_` and the first characters after it. */
const KEY_HASH = /^[0-9a-f]{64}$/;
export const MAX_KEY_PREFIX = 11;

/**
 * The event is written to the log forever: what the command carries as the key's hash and prefix must be
 * a hash and a short prefix, so that no caller can put the key itself (or most of it) into the log.
 */
function requireNoSecret(data: CreateApiKey['data']): void {
  if (!KEY_HASH.test(data.key_hash)) throw new DomainError('invalid', 'api key hash must be a SHA-256 digest in lower-case hex (never the key itself)');
  if (!data.key_prefix.startsWith('sk_') || data.key_prefix.length > MAX_KEY_PREFIX) {
    throw new DomainError('invalid', `api key prefix must be "sk_" and the next characters of the key, at most ${MAX_KEY_PREFIX} characters in all`);
  }
}

export const apiKeyDecider: Decider<ApiKeyState, ApiKeyCommand, ApiKeyEvent> = {
  initialState: () => ({ status: 'none' }),
  decide(command, state, ctx): ApiKeyEvent[] {
    switch (command.type) {
      case 'CreateApiKey': {
        if (state.status !== 'none') {
          if (replayOf(state, ctx)) return [];
          throw new DomainError('conflict', 'api key already exists');
        }
        // Every way of creating a key (API, operator CLI) gets a label that shows what it is in listings.
        const problem = nameProblem(command.data.name, MAX_API_KEY_NAME);
        if (problem) throw new DomainError('invalid', `api key name ${problem}`);
        requireNoSecret(command.data);
        const { expires_at: expiresAt } = command.data;
        // Stored as the API returns it, and a key is never born expired (the API and the CLI check this against their clock first).
        if (expiresAt !== null && !(isCanonicalInstant(expiresAt) && Date.parse(expiresAt) > Date.parse(ctx.now))) {
          throw new DomainError('invalid', `api key expires_at must be a date-time in ISO 8601 UTC form (2030-01-01T00:00:00.000Z) after its creation (${ctx.now})`);
        }
        return [{ type: 'ApiKeyCreated', data: { ...command.data, created_by: ctx.actor, created_at: ctx.now, request_key: ctx.request_key, request_hash: ctx.request_hash } }];
      }
      case 'RevokeApiKey':
        if (state.status === 'none' || state.project_id !== command.data.project_id) throw new DomainError('not_found', 'api key not found');
        if (state.status === 'revoked') return [];
        return [{ type: 'ApiKeyRevoked', data: { ...command.data, revoked_by: ctx.actor, revoked_at: ctx.now } }];
      case 'RecordApiKeyUse': {
        // Only the key's own project's use is recorded: the event names the project it was used in.
        if (state.status !== 'active' || state.project_id !== command.data.project_id) return [];
        const last = state.last_used_at ? Date.parse(state.last_used_at) : 0;
        const now = Date.parse(ctx.now);
        // A wall clock stepped back (NTP) past the last use records again, rather than nothing until it catches up.
        if (last <= now && now - last < USE_RECORD_INTERVAL_MS) return [];
        return [{ type: 'ApiKeyUsed', data: { ...command.data, used_at: ctx.now } }];
      }
      default: {
        const _exhaustive: never = command;
        throw new Error(`unknown command ${JSON.stringify(_exhaustive)}`);
      }
    }
  },
  evolve(state, event) {
    switch (event.type) {
      case 'ApiKeyCreated':
        return { status: 'active', project_id: event.data.project_id, request_key: event.data.request_key, request_hash: event.data.request_hash, last_used_at: null };
      case 'ApiKeyRevoked':
        return state.status === 'none' ? state : { ...state, status: 'revoked' };
      case 'ApiKeyUsed':
        return state.status === 'none' ? state : { ...state, last_used_at: event.data.used_at };
      default:
        return state;
    }
  },
};

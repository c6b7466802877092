import Type, { type Static } from 'typebox';
import { MAX_API_KEY_NAME } from '../../../domain/apikeys/decider.js';
import { nameLength } from '../../http/validation.js';
import { DateTime, OrNull, Uuid } from '../../shared/schemas.js';
import { nameRules } from '../projects/schemas.js';

/** Scopes a key can carry. `*` grants every operation; the others grant one family. */
export const API_KEY_SCOPES = ['*', 'agents:read', 'agents:write', 'config:read', 'config:write', 'projects:read'] as const;

export const CreateApiKeyBody = Type.Object({
  name: OrNull(Type.String({ ...nameLength(MAX_API_KEY_NAME), description: `label shown in listings; default "default"; ${nameRules(MAX_API_KEY_NAME)}` })),
  scopes: OrNull(Type.Array(Type.Union(API_KEY_SCOPES.map((s) => Type.Literal(s))), {
    minItems: 1, maxItems: API_KEY_SCOPES.length, uniqueItems: true, description: 'default ["*"]',
  })),
  expires_at: Type.Optional(Type.Union([DateTime, Type.Null()], { description: 'RFC 3339 time in the future; null or absent: no expiry' })),
}, { additionalProperties: false });
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>;

/**
 * Why an `expires_at` that passed the schema's date-time format cannot be a key's expiry, or undefined: RFC 3339
 * allows second 60 (a leap second), which JavaScript dates cannot hold, and the time must lie after `now` (ms).
 * The API and the operator CLI apply the same rule.
 */
export function expiryProblem(expiresAt: string, now: number): string | undefined {
  const time = Date.parse(expiresAt);
  if (Number.isNaN(time)) return 'must be a date-time JavaScript can represent (second 60, a leap second, is not)';
  return time <= now ? 'must be in the future' : undefined;
}

export const ProjectKeyParams = Type.Object({ projectId: Uuid }, { additionalProperties: false });
export const KeyParams = Type.Object({ projectId: Uuid, keyId: Uuid }, { additionalProperties: false });

const common = {
  key_id: Uuid,
  key_prefix: Type.String({ description: 'first characters of the key, for display' }),
  name: Type.String(),
  project_id: Uuid,
  tenant_id: Type.String(),
  scopes: Type.Array(Type.String()),
  is_active: Type.Boolean(),
  created_at: DateTime,
  created_by: Type.String(),
  expires_at: Type.Union([DateTime, Type.Null()]),
};

export const ApiKeyItem = Type.Object({
  ...common,
  is_admin_managed: Type.Boolean({ description: 'always false: every key, one made with the operator CLI included, is managed through these operations' }),
  last_used_at: Type.Union([DateTime, Type.Null()], { description: 'updated at most once a minute' }),
});
export type ApiKeyItem = Static<typeof ApiKeyItem>;

export const ApiKeyCreated = Type.Object({ ...common, key: Type.String({ description: 'the full key; shown only in this response' }) });

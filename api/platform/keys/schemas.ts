import Type, { type Static } from 'typebox';
import { DateTime, Uuid } from '../../shared/schemas.js';

/** Scopes a key can carry. `*` grants every operation; the others grant one family. */
export const API_KEY_SCOPES = ['*', 'agents:read', 'agents:write', 'config:read', 'config:write', 'projects:read'] as const;

export const CreateApiKeyBody = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'label shown in listings; default "default"' })),
  scopes: Type.Optional(Type.Array(Type.Union(API_KEY_SCOPES.map((s) => Type.Literal(s))), {
    minItems: 1, maxItems: API_KEY_SCOPES.length, uniqueItems: true, description: 'default ["*"]',
  })),
  expires_at: Type.Optional(Type.Union([DateTime, Type.Null()], { description: 'RFC 3339 time in the future; null or absent: no expiry' })),
}, { additionalProperties: false });
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>;

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

import { API_KEY_STREAM_PREFIX, type ApiKeyCreated, type ApiKeyRevoked, type ApiKeyUsed } from '../../domain/apikeys/decider.js';
import type { Projection } from '../projection.js';

export interface ApiKeyDoc {
  id: string;
  key_id: string;
  key_prefix: string;
  key_hash: string;
  name: string;
  project_id: string;
  tenant_id: string;
  scopes: string[];
  is_active: boolean;
  is_admin_managed: boolean;
  created_at: string;
  created_by: string;
  expires_at: string | null;
  last_used_at: string | null;
  revoked_at: string | null;
  [field: string]: unknown;
}

export const apiKeysProjection: Projection = {
  name: 'api-keys',
  collections: [{ name: 'api_keys', indexes: [['project_id', 'created_at'], ['key_hash']] }],
  canHandle: ['ApiKeyCreated', 'ApiKeyRevoked', 'ApiKeyUsed'],
  streams: [API_KEY_STREAM_PREFIX],
  async apply(event, writer) {
    const e = event as unknown as ApiKeyCreated | ApiKeyRevoked | ApiKeyUsed;
    if (e.type === 'ApiKeyCreated') {
      const { request_key: _key, request_hash: _hash, ...data } = e.data;
      await writer.put<ApiKeyDoc>('api_keys', {
        id: data.key_id, ...data, is_active: true, is_admin_managed: false, last_used_at: null, revoked_at: null,
      }, event.position);
      return;
    }
    const doc = await writer.get<ApiKeyDoc>('api_keys', e.data.key_id);
    if (!doc || doc._position >= event.position) return;
    const { _position, ...current } = doc;
    const next = e.type === 'ApiKeyRevoked'
      ? { ...current, is_active: false, revoked_at: e.data.revoked_at }
      : { ...current, last_used_at: e.data.used_at };
    await writer.put<ApiKeyDoc>('api_keys', next, event.position);
  },
};

import { CONFIG_STREAM_PREFIX, type ConfigValueDeleted, type ConfigValueSet } from '../../domain/config/decider.js';
import type { Projection } from '../projection.js';

export interface ConfigValueDoc {
  id: string;
  project_id: string;
  key: string;
  value: unknown;
  updated_at: string;
  [field: string]: unknown;
}

export const configDocId = (projectId: string, key: string) => `${projectId}/${key}`;

export const configProjection: Projection = {
  name: 'project-config',
  collections: [{ name: 'config_values', indexes: [['project_id', 'key']] }],
  canHandle: ['ConfigValueSet', 'ConfigValueDeleted'],
  streams: [CONFIG_STREAM_PREFIX],
  async apply(event, writer) {
    const e = event as unknown as ConfigValueSet | ConfigValueDeleted;
    const id = configDocId(e.data.project_id, e.data.key);
    if (e.type === 'ConfigValueSet') {
      await writer.put<ConfigValueDoc>('config_values', { id, project_id: e.data.project_id, key: e.data.key, value: e.data.value, updated_at: e.data.set_at }, event.position);
    } else {
      await writer.delete('config_values', id, event.position);
    }
  },
};

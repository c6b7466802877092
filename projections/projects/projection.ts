import { PROJECT_STREAM_PREFIX, type ProjectCreated } from '../../domain/projects/decider.js';
import type { Projection } from '../projection.js';

export interface ProjectDoc {
  id: string;
  project_id: string;
  tenant_id: string;
  name: string;
  created_by: string;
  created_at: string;
  [field: string]: unknown;
}

export const projectsProjection: Projection = {
  name: 'projects',
  collections: [{ name: 'projects', indexes: [['tenant_id', 'created_at']] }],
  canHandle: ['ProjectCreated'],
  streams: [PROJECT_STREAM_PREFIX],
  async apply(event, writer) {
    const { project_id, tenant_id, name, created_by, created_at } = (event as unknown as ProjectCreated).data;
    await writer.put<ProjectDoc>('projects', { id: project_id, project_id, tenant_id, name, created_by, created_at }, event.position);
  },
};

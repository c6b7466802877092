import Type, { type Static } from 'typebox';
import { DateTime, Uuid } from '../../shared/schemas.js';

export const CreateProjectBody = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 200, description: 'display name' }),
}, { additionalProperties: false });
export type CreateProjectBody = Static<typeof CreateProjectBody>;

export const ProjectView = Type.Object({
  project_id: Uuid,
  tenant_id: Type.String(),
  name: Type.String(),
  created_at: DateTime,
  created_by: Type.String(),
});
export type ProjectView = Static<typeof ProjectView>;

export const ProjectList = Type.Object({ projects: Type.Array(ProjectView) });

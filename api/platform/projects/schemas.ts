import Type, { type Static } from 'typebox';
import { MAX_PROJECT_NAME } from '../../../domain/projects/decider.js';
import { nameLength } from '../../http/validation.js';
import { DateTime, Uuid } from '../../shared/schemas.js';

/** The OpenAPI description of a name that follows agent names' rules (`nameProblems`), here and for API keys. */
export const nameRules = (max: number) => `not empty or only whitespace; at most ${max} characters after trimming and NFC normalisation (stored in that form); well-formed Unicode; no control characters, bidirectional controls, line separators, noncharacters or invisible (default-ignorable) characters, except zero-width joiners, variation selectors and tags where they shape a script or an emoji, as for agent names`;

export const CreateProjectBody = Type.Object({
  name: Type.String({ ...nameLength(MAX_PROJECT_NAME), description: `display name; ${nameRules(MAX_PROJECT_NAME)}` }),
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

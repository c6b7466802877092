import { DomainError, fold, replayOf, type Decider, type DomainEvent } from '../shared/decider.js';
import { nameProblem } from '../shared/text.js';

export const PROJECT_STREAM_PREFIX = 'project-';
export const projectStream = (projectId: string) => `${PROJECT_STREAM_PREFIX}${projectId}`;

/** Project names follow agent names' rules (`nameProblems`), with this limit on the stored form. */
export const MAX_PROJECT_NAME = 200;

export type ProjectCreated = DomainEvent<'ProjectCreated', {
  project_id: string; tenant_id: string; name: string; created_by: string; created_at: string; request_key: string; request_hash: string;
}>;
export type ProjectEvent = ProjectCreated;

export type CreateProject = { type: 'CreateProject'; data: { project_id: string; tenant_id: string; name: string } };
export type ProjectCommand = CreateProject;

export type ProjectState = { exists: false } | { exists: true; tenant_id: string; request_key: string; request_hash: string };

export const projectDecider: Decider<ProjectState, ProjectCommand, ProjectEvent> = {
  initialState: () => ({ exists: false }),
  decide(command, state, ctx): ProjectCreated[] {
    switch (command.type) {
      case 'CreateProject': {
        if (state.exists) {
          if (replayOf(state, ctx)) return [];
          throw new DomainError('conflict', `project ${command.data.project_id} already exists`);
        }
        // The HTTP API reports these per field first; this refuses whoever sends the command directly (the operator CLI).
        const problem = nameProblem(command.data.name, MAX_PROJECT_NAME);
        if (problem) throw new DomainError('invalid', `project name ${problem}`);
        return [{ type: 'ProjectCreated', data: { ...command.data, created_by: ctx.actor, created_at: ctx.now, request_key: ctx.request_key, request_hash: ctx.request_hash } }];
      }
      default: {
        const _exhaustive: never = command.type;
        throw new Error(`unknown command ${_exhaustive}`);
      }
    }
  },
  evolve(state, event) {
    switch (event.type) {
      case 'ProjectCreated':
        return { exists: true, tenant_id: event.data.tenant_id, request_key: event.data.request_key, request_hash: event.data.request_hash };
      default:
        return state;
    }
  },
};

/**
 * A project's state from the events of its stream as the log returns them: what commands check a project
 * against (the API's key commands and the operator CLI), since its read model may lag behind.
 */
export function projectStateOf(recorded: Array<{ type: string; data: unknown }>): ProjectState {
  return fold(projectDecider, recorded.map((e) => ({ type: e.type, data: e.data }) as ProjectEvent));
}

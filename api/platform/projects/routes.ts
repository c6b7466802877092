import { randomUUID } from 'node:crypto';
import { uuidV5 as uuidv5 } from '../../../infra/ids.js';
import { MAX_PROJECT_NAME, projectDecider, projectStream, type ProjectCreated } from '../../../domain/projects/decider.js';
import { nameForm } from '../../../domain/shared/text.js';
import { ConsistencyTimeoutError } from '../../../projections/runner.js';
import { findAll } from '../../../infra/readstore/port.js';
import type { ProjectDoc } from '../../../projections/projects/projection.js';
import { check, nameErrors } from '../../http/validation.js';
import { route, type RouteDef } from '../../http/routes.js';
import type { PlatformDeps } from '../context.js';
import { CreateProjectBody, ProjectList, ProjectView } from './schemas.js';

const PROJECT_ID_NAMESPACE = 'a3f9b1c2-6d4e-4f8a-9b0c-1d2e3f4a5b6c';

const view = (p: Pick<ProjectDoc, 'project_id' | 'tenant_id' | 'name' | 'created_at' | 'created_by'>): ProjectView => ({
  project_id: p.project_id, tenant_id: p.tenant_id, name: p.name, created_at: p.created_at, created_by: p.created_by,
});

export function projectRoutes(deps: PlatformDeps): RouteDef[] {
  return [
    route({
      method: 'GET', path: '/projects', operationId: 'listProjects', tag: 'Projects', auth: ['session', 'key'], scope: 'projects:read',
      summary: 'List projects',
      description: 'A dashboard session lists its tenant\'s projects; an API key lists only its own project.',
      readModels: ['projects'],
      responses: { 200: { description: 'projects, oldest first', schema: ProjectList } },
      errors: [400, 401, 403, 503],
      async handler({ principal }) {
        if (principal.kind === 'key') {
          const own = await deps.reads.get<ProjectDoc>('projects', principal.project_id);
          return { body: { projects: own ? [view(own)] : [] } };
        }
        const tenant = principal.kind === 'session' ? principal.tenant_id : '';
        const projects: ProjectView[] = [];
        for await (const doc of findAll<ProjectDoc>(deps.reads, 'projects', { where: { tenant_id: tenant }, sort: { field: 'created_at', order: 'asc' } })) projects.push(view(doc));
        return { body: { projects } };
      },
    }),
    route({
      method: 'POST', path: '/projects', operationId: 'createProject', tag: 'Projects', auth: ['session'],
      summary: 'Create a project (extension)',
      description: 'Creates a project owned by the session\'s tenant. With an Idempotency-Key, a repeated request returns the same project. Waits until the project can be used (its read model has it); should that take longer than CONSISTENCY_TIMEOUT_MS, the created project is still returned rather than a 503 that would invite a duplicate: commands on it (creating its keys) find it at once, and queries (listing its keys, GET /projects) take its X-Event-Position as X-Min-Position.',
      body: CreateProjectBody,
      responses: { 200: { description: 'the created project', schema: ProjectView } },
      errors: [400, 401, 403, 409, 422, 503],
      async handler({ body, principal, meta, signal }) {
        check(...nameErrors('body.name', body.name, MAX_PROJECT_NAME));
        if (principal.kind !== 'session') throw new Error('unreachable');
        const projectId = meta.request_key.startsWith('idem:') ? uuidv5(`${principal.tenant_id}/${meta.request_key}`, PROJECT_ID_NAMESPACE) : randomUUID();
        meta.project_id = projectId; // the event's metadata names the project it creates
        const result = await deps.bus.handle(projectStream(projectId), projectDecider,
          { type: 'CreateProject', data: { project_id: projectId, tenant_id: principal.tenant_id, name: nameForm(body.name) } }, meta);
        const created = result.events[0]?.data as ProjectCreated['data'] | undefined;
        // The project is durable now. Should the read model not apply it within CONSISTENCY_TIMEOUT_MS, a new
        // project is answered from its event (a 503 would invite a retry that, without an Idempotency-Key,
        // creates a second project); a replay, which appended nothing, has only the read model to answer from.
        try {
          await deps.waitFor('projects', result.position, signal);
        } catch (error) {
          if (!(error instanceof ConsistencyTimeoutError && created)) throw error;
          deps.log.warn({ project_id: projectId, position: result.position }, 'project created; the projects read model has not applied it yet');
          return { body: view(created), position: result.position };
        }
        const doc = await deps.reads.get<ProjectDoc>('projects', projectId);
        return { body: doc ? view(doc) : undefined, position: result.position };
      },
    }),
  ];
}

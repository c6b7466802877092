import type { CommandBus } from '../../commands/bus.js';
import { projectStateOf, projectStream } from '../../domain/projects/decider.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import type { ProjectDoc } from '../../projections/projects/projection.js';
import { notFound } from '../http/problem.js';
import type { Principal } from '../http/routes.js';

/** What platform route handlers get: the command side, the read side, and a way to wait for a read model. */
export interface PlatformDeps {
  bus: CommandBus;
  events: EventStore;
  reads: ReadStore;
  /**
   * Waits until the named projection has applied `position` (used where a command must be visible at once,
   * e.g. key revocation); pass the call's `signal` so a client that hangs up releases the wait.
   */
  waitFor(projection: string, position: number, signal?: AbortSignal): Promise<void>;
  log: Logger;
}

type ProjectRef = Pick<ProjectDoc, 'project_id' | 'tenant_id'>;

/**
 * Project isolation, in one place: a key reaches only its own project, a session only its tenant's
 * projects. Anything else is "not found", so ids of other projects cannot be probed.
 * For queries: a session's project is looked up in the projects read model, so a query that calls this
 * must list 'projects' in its readModels (X-Min-Position then covers it). Commands use requireProjectForCommand.
 */
export async function requireProject(deps: PlatformDeps, principal: Principal, projectId: string): Promise<ProjectRef> {
  return ownProject(principal, projectId, async () => (await deps.reads.get<ProjectDoc>('projects', projectId))?.tenant_id);
}

/**
 * requireProject for commands: a session's project is looked up in its stream, as the operator CLI does.
 * A command takes no X-Min-Position, so the read model, which may lag behind a project just created
 * (POST /projects answers from its event when the read model is late), would make it 404.
 */
export async function requireProjectForCommand(deps: PlatformDeps, principal: Principal, projectId: string): Promise<ProjectRef> {
  return ownProject(principal, projectId, async () => {
    const state = projectStateOf(await deps.events.readStream(projectStream(projectId)));
    return state.exists ? state.tenant_id : undefined;
  });
}

/** `tenantOf`: the tenant owning the project, or undefined when there is no such project. */
async function ownProject(principal: Principal, projectId: string, tenantOf: () => Promise<string | undefined>): Promise<ProjectRef> {
  if (principal.kind === 'key') {
    // A key is issued for one existing project and carries its tenant; projects are never deleted, so
    // no read is needed. (When project deletion arrives, deleting a project must revoke its keys.)
    if (principal.project_id !== projectId) throw notFound('project not found');
    return { project_id: principal.project_id, tenant_id: principal.tenant_id };
  }
  const tenant = await tenantOf();
  if (tenant === undefined) throw notFound('project not found');
  if (principal.kind === 'session' && tenant !== principal.tenant_id) throw notFound('project not found');
  return { project_id: projectId, tenant_id: tenant };
}

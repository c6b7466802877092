import type { CommandBus } from '../../commands/bus.js';
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

/**
 * Project isolation, in one place: a key reaches only its own project, a session only its tenant's
 * projects. Anything else is "not found", so ids of other projects cannot be probed.
 */
export async function requireProject(deps: PlatformDeps, principal: Principal, projectId: string): Promise<Pick<ProjectDoc, 'project_id' | 'tenant_id'>> {
  if (principal.kind === 'key') {
    // A key is issued for one existing project and carries its tenant; projects are never deleted, so
    // no read is needed. (When project deletion arrives, deleting a project must revoke its keys.)
    if (principal.project_id !== projectId) throw notFound('project not found');
    return { project_id: principal.project_id, tenant_id: principal.tenant_id };
  }
  const project = await deps.reads.get<ProjectDoc>('projects', projectId);
  if (!project) throw notFound('project not found');
  if (principal.kind === 'session' && project.tenant_id !== principal.tenant_id) throw notFound('project not found');
  return project;
}

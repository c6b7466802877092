import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { CommandBus } from '../commands/bus.js';
import type { EventStore } from '../infra/eventstore/port.js';
import { projectDecider, projectStream, type ProjectEvent, type ProjectState } from '../domain/projects/decider.js';
import { fold } from '../domain/shared/decider.js';
import { printJson } from './output.js';
import { CreateProjectBody } from '../api/platform/projects/schemas.js';
import { OpsError, opsRequestMeta, validateAsApi, withStores } from './runtime.js';

/** A project's state from its stream; operator commands check existence against the log, not a read model that may lag. */
export async function loadProject(events: EventStore, projectId: string): Promise<Extract<ProjectState, { exists: true }>> {
  const recorded = await events.readStream(projectStream(projectId));
  const state = fold(projectDecider, recorded.map((e) => ({ type: e.type, data: e.data }) as ProjectEvent));
  if (!state.exists) throw new OpsError(`project ${projectId} not found`);
  return state;
}

export function projectCommands(program: Command): void {
  program.command('projects').description('projects (tenants own projects; keys belong to a project)')
    .command('create').description('create a project')
    .requiredOption('--name <name>', 'display name')
    .requiredOption('--tenant <tenant>', 'id of the owning tenant')
    .option('--json', 'print JSON')
    .action(async (opts: { name: string; tenant: string; json?: boolean }) => withStores(async ({ events }) => {
      const name = opts.name.trim();
      const tenant = opts.tenant.trim();
      if (!name || !tenant) throw new OpsError('--name and --tenant must not be empty');
      validateAsApi(CreateProjectBody, { name }, { name: '--name' });
      const projectId = randomUUID();
      const result = await new CommandBus(events).handle(projectStream(projectId), projectDecider,
        { type: 'CreateProject', data: { project_id: projectId, tenant_id: tenant, name } },
        opsRequestMeta({ project_id: projectId, tenant_id: tenant }));
      if (opts.json) return printJson({ project_id: projectId, tenant_id: tenant, name, position: result.position });
      process.stdout.write(`project ${projectId} created (tenant ${tenant}, position ${result.position})\n`);
    }, { create: true }));
}

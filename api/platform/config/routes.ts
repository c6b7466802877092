import { configDecider, configStream, unstorableAt, type Unstorable } from '../../../domain/config/decider.js';
import { findAll } from '../../../infra/readstore/port.js';
import { configDocId, type ConfigValueDoc } from '../../../projections/config/projection.js';
import { notFound } from '../../http/problem.js';
import { route, type RouteDef } from '../../http/routes.js';
import { check } from '../../http/validation.js';
import { Success } from '../../shared/schemas.js';
import { requireProject, requireProjectForCommand, type PlatformDeps } from '../context.js';
import { ConfigKeyParams, ConfigMap, ConfigParams, ConfigValue } from './schemas.js';

/** What the API says of a value the decider would refuse (unstorableAt). */
const UNSTORABLE_MESSAGES: Record<Unstorable['kind'], string> = {
  number: 'must be a number a 64-bit float can hold: this one is too large (it would be stored as null)',
  text: 'must be well-formed Unicode (no unpaired surrogates)',
  key: 'must be a well-formed Unicode key (no unpaired surrogates)',
};

export function configRoutes(deps: PlatformDeps): RouteDef[] {
  return [
    route({
      method: 'GET', path: '/projects/:projectId/config', operationId: 'getProjectConfig', tag: 'Project configuration',
      auth: ['key'], scope: 'config:read', summary: 'All configuration values of the project',
      params: ConfigParams, readModels: ['project-config'],
      responses: { 200: { description: 'object mapping each key to its value', schema: ConfigMap } },
      errors: [400, 401, 403, 404, 503],
      async handler({ params, principal }) {
        await requireProject(deps, principal, params.projectId);
        // No prototype: a key named __proto__ is an entry like any other, not the object's prototype.
        const config: Record<string, unknown> = Object.create(null);
        for await (const doc of findAll<ConfigValueDoc>(deps.reads, 'config_values', { where: { project_id: params.projectId }, sort: { field: 'key', order: 'asc' } })) {
          config[doc.key] = doc.value;
        }
        return { body: config };
      },
    }),
    route({
      method: 'GET', path: '/projects/:projectId/config/:key', operationId: 'getProjectConfigValue', tag: 'Project configuration',
      auth: ['key'], scope: 'config:read', summary: 'One configuration value',
      params: ConfigKeyParams, readModels: ['project-config'],
      responses: { 200: { description: 'the JSON value of the key', schema: ConfigValue } },
      errors: [400, 401, 403, 404, 503],
      async handler({ params, principal }) {
        await requireProject(deps, principal, params.projectId);
        const doc = await deps.reads.get<ConfigValueDoc>('config_values', configDocId(params.projectId, params.key));
        if (!doc) throw notFound(`config key ${params.key} not found`);
        return { body: doc.value };
      },
    }),
    route({
      method: 'PUT', path: '/projects/:projectId/config/:key', operationId: 'setProjectConfigValue', tag: 'Project configuration',
      auth: ['key'], scope: 'config:write', summary: 'Set a configuration value (any JSON value, up to 1 MiB, nested at most 64 levels deep, numbers within the range of a 64-bit float); a project holds at most 1,000 keys and 16 MiB of values (their JSON texts, UTF-8), else 409',
      params: ConfigKeyParams, body: ConfigValue,
      responses: { 200: { description: 'stored', schema: Success } },
      errors: [400, 401, 403, 404, 409],
      async handler({ params, body, principal, meta }) {
        // JSON.parse reads a number beyond a 64-bit float (1e400) as Infinity, which would be stored as null; an escaped
        // lone surrogate ("\ud800") would be stored as U+FFFD by a UTF-8 store (MongoDB).
        const unstorable = unstorableAt(body);
        check(unstorable === undefined ? undefined : { location: ['body', ...unstorable.path].join('.'), message: UNSTORABLE_MESSAGES[unstorable.kind] });
        await requireProjectForCommand(deps, principal, params.projectId);
        const result = await deps.bus.handle(configStream(params.projectId), configDecider,
          { type: 'SetConfigValue', data: { project_id: params.projectId, key: params.key, value: body } }, meta);
        return { body: { success: true }, position: result.position };
      },
    }),
    route({
      method: 'DELETE', path: '/projects/:projectId/config/:key', operationId: 'deleteProjectConfigValue', tag: 'Project configuration',
      auth: ['key'], scope: 'config:write', summary: 'Delete a configuration value',
      params: ConfigKeyParams,
      responses: { 204: { description: 'deleted (empty body)' } },
      errors: [400, 401, 403, 404],
      async handler({ params, principal, meta }) {
        await requireProjectForCommand(deps, principal, params.projectId);
        const result = await deps.bus.handle(configStream(params.projectId), configDecider,
          { type: 'DeleteConfigValue', data: { project_id: params.projectId, key: params.key } }, meta);
        return { status: 204, position: result.position };
      },
    }),
  ];
}

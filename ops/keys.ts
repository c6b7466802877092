import { randomUUID } from 'node:crypto';
import { InvalidArgumentError, type Command } from 'commander';
import { IsDateTime } from 'typebox/format';
import { generateApiKey } from '../infra/apikeys.js';
import { CommandBus } from '../commands/bus.js';
import { apiKeyDecider, apiKeyStream, MAX_API_KEY_NAME } from '../domain/apikeys/decider.js';
import { notice, writeSecret } from './output.js';
import { loadProject, nameOption } from './projects.js';
import { CreateApiKeyBody, expiryProblem } from '../api/platform/keys/schemas.js';
import { commaList, finishDespiteStops, opsRequestMeta, validateAsApi, withEventLog } from './runtime.js';

/**
 * `--expires-at` as the API takes `expires_at`: its schema's RFC 3339 date-time, offset included, and its rule
 * (expiryProblem). Date.parse alone would read `2030-01-01T00:00` in the operator's time zone, and take years
 * past 9999, which would be stored in a form the API cannot return.
 */
function futureInstant(raw: string): string {
  if (!IsDateTime(raw)) throw new InvalidArgumentError('expected an RFC 3339 date-time with its offset, such as 2030-01-01T00:00:00Z');
  const problem = expiryProblem(raw, Date.now());
  if (problem) throw new InvalidArgumentError(problem);
  return new Date(raw).toISOString();
}

export function keyCommands(program: Command): void {
  program.command('keys').description('API keys')
    .command('create').description('create a bootstrap API key for a project; the key is printed once and never stored')
    .requiredOption('--project <id>', 'project id')
    .option('--name <name>', 'display name', 'bootstrap')
    .option('--scopes <a,b>', 'scopes, comma-separated (default: *, every scope)', commaList)
    .option('--expires-at <time>', 'expiry, an RFC 3339 date-time such as 2030-01-01T00:00:00Z (default: never)', futureInstant)
    .option('--json', 'print JSON (includes the key)')
    .action(async (opts: { project: string; name: string; scopes?: string[]; expiresAt?: string; json?: boolean }) =>
      withEventLog(async (events) => {
        validateAsApi(CreateApiKeyBody, { name: opts.name, ...(opts.scopes ? { scopes: opts.scopes } : {}) }, { name: '--name', scopes: '--scopes' });
        const name = nameOption(opts.name, MAX_API_KEY_NAME);
        // Project ids are lower-case UUIDs; the API accepts them in any case (RFC 9562), and so does this.
        const projectId = opts.project.toLowerCase();
        const project = await loadProject(events, projectId);
        const keyId = randomUUID();
        const { key, prefix, hash } = generateApiKey();
        const data = {
          key_id: keyId, project_id: projectId, tenant_id: project.tenant_id, name,
          key_prefix: prefix, key_hash: hash, scopes: opts.scopes ?? ['*'], expires_at: opts.expiresAt ?? null,
        };
        // From the append until the key is out, a stop signal waits: the key exists nowhere else.
        await finishDespiteStops(`creating key ${keyId} and printing it`, async () => {
          const result = await new CommandBus(events).handle(apiKeyStream(keyId), apiKeyDecider, { type: 'CreateApiKey', data },
            opsRequestMeta({ project_id: projectId, tenant_id: project.tenant_id }));
          // The key goes to stdout once and nowhere else: the log holds only its hash.
          const lost = (cause: string) => `key ${keyId} was created for project ${projectId} but could not be printed (${cause}); `
            + `revoke it (DELETE /api/v1/projects/${projectId}/keys/${keyId}) and create another`;
          if (opts.json) {
            const created = { key, key_id: keyId, project_id: data.project_id, tenant_id: data.tenant_id, name, key_prefix: prefix, scopes: data.scopes, expires_at: data.expires_at, position: result.position };
            await writeSecret(`${JSON.stringify(created, null, 2)}\n`, lost);
          } else {
            await writeSecret(`${key}\n`, lost);
            notice(`key ${keyId} created for project ${projectId} (scopes ${data.scopes.join(',')}, position ${result.position})`);
          }
        });
        notice('warning: this key is not stored and cannot be shown again; keep it now.');
      }));
}

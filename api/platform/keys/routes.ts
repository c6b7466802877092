import Type from 'typebox';
import { uuidV5 as uuidv5 } from '../../../infra/ids.js';
import { randomUUID } from 'node:crypto';
import { apiKeyDecider, apiKeyStream, MAX_API_KEY_NAME } from '../../../domain/apikeys/decider.js';
import { nameForm } from '../../../domain/shared/text.js';
import { findAll } from '../../../infra/readstore/port.js';
import type { ApiKeyDoc } from '../../../projections/apikeys/projection.js';
import { DomainError } from '../../../domain/shared/decider.js';
import { ConsistencyTimeoutError } from '../../../projections/runner.js';
import { ProblemError } from '../../http/problem.js';
import { route, type RouteDef } from '../../http/routes.js';
import { check, nameErrors } from '../../http/validation.js';
import { Success } from '../../shared/schemas.js';
import { requireProject, requireProjectForCommand, type PlatformDeps } from '../context.js';
import { generateApiKey } from '../../../infra/apikeys.js';
import { ApiKeyCreated, ApiKeyItem, CreateApiKeyBody, expiryProblem, KeyParams, ProjectKeyParams } from './schemas.js';

const KEY_ID_NAMESPACE = '0b7e6c1a-52f4-4e0e-8d3b-7a9c2e4f6d10';

/** `is_active`: the key works now: not revoked and not expired (expiry needs no event, so it is checked here). */
const item = (k: ApiKeyDoc, now: Date): ApiKeyItem => ({
  key_id: k.key_id, key_prefix: k.key_prefix, name: k.name, project_id: k.project_id, tenant_id: k.tenant_id,
  scopes: k.scopes, is_active: k.is_active && !(k.expires_at !== null && Date.parse(k.expires_at) <= now.getTime()),
  is_admin_managed: k.is_admin_managed, created_at: k.created_at,
  created_by: k.created_by, expires_at: k.expires_at, last_used_at: k.last_used_at,
});

export function keyRoutes(deps: PlatformDeps, clock: () => Date): RouteDef[] {
  return [
    route({
      method: 'POST', path: '/projects/:projectId/keys', operationId: 'createApiKey', tag: 'API keys', auth: ['session'],
      summary: 'Create a project API key',
      description: 'Returns the full key once. Only its SHA-256 hash is stored. The key works as soon as this response is sent '
        + '(should the read model not apply it within CONSISTENCY_TIMEOUT_MS, the key is still returned and works once it does). '
        + 'A repeat with the same Idempotency-Key is 409: the secret cannot be shown twice.',
      params: ProjectKeyParams, body: CreateApiKeyBody,
      responses: { 200: { description: 'the new key, including `key`', schema: ApiKeyCreated } },
      errors: [400, 401, 403, 404, 409, 503],
      errorDescriptions: {
        409: 'A repeat with the same Idempotency-Key (`idempotency-replay`: the key exists, its secret cannot be shown again), a project that kept being changed concurrently while the command was retried (`concurrency-conflict`: send it again), or a repeat whose events are in the log elsewhere (`duplicate-request`)',
      },
      async handler({ params, body, principal, meta, signal }) {
        const project = await requireProjectForCommand(deps, principal, params.projectId);
        // With an Idempotency-Key the retried request targets the same key stream; its secret cannot be
        // shown twice, so a replay answers 409 rather than handing out a key that was never stored.
        const repeatable = meta.request_key.startsWith('idem:');
        const keyId = repeatable ? uuidv5(`${project.project_id}/${meta.request_key}`, KEY_ID_NAMESPACE) : randomUUID();
        const replayed = () => new ProblemError(409, 'idempotency-replay', 'this Idempotency-Key already created a key; its secret cannot be shown again');
        const expiresAt = body.expires_at ?? null;
        const expiry = expiresAt === null ? undefined : expiryProblem(expiresAt, clock().getTime());
        // The one check that depends on when it is made: a repeat sent after the key it created has expired is still a
        // repeat (409), not an invalid request (400) that would tell a retrying client its first request was refused.
        if (expiry !== undefined && repeatable && (await deps.events.streamInfo(apiKeyStream(keyId)))) throw replayed();
        check(...nameErrors('body.name', body.name ?? undefined, MAX_API_KEY_NAME), expiry === undefined ? undefined : { location: 'body.expires_at', message: expiry, value: expiresAt });
        const { key, prefix, hash } = generateApiKey();
        const data = {
          key_id: keyId, project_id: project.project_id, tenant_id: project.tenant_id, name: body.name == null ? 'default' : nameForm(body.name),
          key_prefix: prefix, key_hash: hash, scopes: body.scopes ?? ['*'], expires_at: expiresAt === null ? null : new Date(expiresAt).toISOString(),
        };
        // The command carries the new secret's hash, so a repeat never matches the first request: it is
        // a replay (409), not the same key used for a different request (422).
        const result = await deps.bus.handle(apiKeyStream(keyId), apiKeyDecider, { type: 'CreateApiKey', data }, meta).catch((error: unknown) => {
          throw error instanceof DomainError && error.kind === 'idempotency_mismatch' ? replayed() : error;
        });
        if (result.events.length === 0) throw replayed();
        // The key is durable now, and this response is the only time its secret is shown: if the read
        // model does not apply it within CONSISTENCY_TIMEOUT_MS, the key is still returned (it works as
        // soon as the projection catches up) rather than lost behind a 503.
        await deps.waitFor('api-keys', result.position, signal).catch((error: unknown) => {
          if (!(error instanceof ConsistencyTimeoutError)) throw error;
          deps.log.warn({ key_id: keyId, position: result.position }, 'api key created; the api-keys read model has not applied it yet');
        });
        const created = result.events[0]!.data as { created_at: string; created_by: string };
        const { key_hash: _hash, ...shown } = data;
        return {
          body: { ...shown, is_active: true, created_at: created.created_at, created_by: created.created_by, key },
          position: result.position,
        };
      },
    }),
    route({
      method: 'GET', path: '/projects/:projectId/keys', operationId: 'listApiKeys', tag: 'API keys', auth: ['session'],
      summary: 'List a project\'s API keys (never the keys themselves)',
      // The project is looked up in the projects read model first (requireProject): X-Min-Position waits for both.
      params: ProjectKeyParams, readModels: ['projects', 'api-keys'],
      responses: { 200: { description: 'keys, newest first', schema: Type.Array(ApiKeyItem) } },
      errors: [400, 401, 403, 404, 503],
      async handler({ params, principal }) {
        await requireProject(deps, principal, params.projectId);
        const keys: ApiKeyItem[] = [];
        const now = clock();
        for await (const doc of findAll<ApiKeyDoc>(deps.reads, 'api_keys', { where: { project_id: params.projectId }, sort: { field: 'created_at', order: 'desc' } })) keys.push(item(doc, now));
        return { body: keys };
      },
    }),
    route({
      method: 'DELETE', path: '/projects/:projectId/keys/:keyId', operationId: 'revokeApiKey', tag: 'API keys', auth: ['session'],
      summary: 'Revoke an API key',
      description: 'The key stops working before this response is sent. Revoking an already revoked key succeeds. '
        + 'Should the api-keys read model not apply the revocation within CONSISTENCY_TIMEOUT_MS, the answer is 503 (`not-caught-up`): '
        + 'the key is revoked, but may work until the read model has it; repeating the DELETE waits again.',
      params: KeyParams,
      responses: { 200: { description: 'revoked', schema: Success } },
      errors: [400, 401, 403, 404, 503],
      async handler({ params, principal, meta, signal }) {
        await requireProjectForCommand(deps, principal, params.projectId);
        const result = await deps.bus.handle(apiKeyStream(params.keyId), apiKeyDecider,
          { type: 'RevokeApiKey', data: { key_id: params.keyId, project_id: params.projectId } }, meta);
        await deps.waitFor('api-keys', result.position, signal);
        return { body: { success: true }, position: result.position };
      },
    }),
  ];
}

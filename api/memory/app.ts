import type Koa from 'koa';
import type { Config } from '../../infra/config.js';
import type { Logger } from '../../infra/logger.js';
import { createHttpApp } from '../http/app.js';
import { healthRoutes } from '../http/health.js';
import type { Mounting, RouteDef } from '../http/routes.js';
import { memoryGuard } from './guard.js';

/** `health`: the public /healthz and /readyz routes (see api/http/health.ts); /healthz alone for an app without projections. */
export function createMemoryApp(routes: RouteDef[], mounting: Mounting, config: Config, log: Logger, health: RouteDef[] = healthRoutes()): Koa {
  return createHttpApp({
    name: 'memory',
    prefix: '',
    routes,
    mounting,
    guard: memoryGuard(config.memory.allowedHosts),
    yaml: false,
    log,
    openapi: {
      title: 'Cairn memory service API',
      version: '1.0.0',
      description: 'Scoped memories with lexical, semantic and hybrid search, context, personality, fact extraction, single-completion chat, export and deletion. Reads wait until every event appended before the request is applied. An optional body field sent as null is the same as one left out, except `session`, where null is no label (see POST /v1/memories). An answer of more than 64 KiB is cut (the connection closed before its end) when its client takes none of it for SEND_TIMEOUT_MS (default 60 s).',
      basePath: '',
      securitySchemes: { owner: { description: 'MEMORY_OWNER_TOKEN, required when configured' } },
      // Without MEMORY_OWNER_TOKEN every request is served without credentials: the document says so.
      anonymous: config.memory.ownerToken === undefined,
    },
    publicRoutes: health,
    // Every request but /healthz, /readyz and /docs/openapi.json carries the owner token (when one is
    // configured), unknown routes and wrong methods included.
    authenticateUnmatched: (ctx) => mounting.authenticate(ctx, ['owner']),
  });
}

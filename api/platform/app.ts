import type Koa from 'koa';
import type { Config } from '../../infra/config.js';
import type { Logger } from '../../infra/logger.js';
import { createHttpApp } from '../http/app.js';
import type { Mounting, RouteDef } from '../http/routes.js';
import { agentRoutes } from './agents/routes.js';
import { configRoutes } from './config/routes.js';
import type { PlatformDeps } from './context.js';
import { browserSignal } from '../http/guard.js';
import { keyRoutes } from './keys/routes.js';
import { projectRoutes } from './projects/routes.js';
import { unbuiltRoutes } from './unbuilt.js';

export function platformRouteTable(deps: PlatformDeps, clock: () => Date): RouteDef[] {
  return [...projectRoutes(deps), ...keyRoutes(deps, clock), ...configRoutes(deps), ...agentRoutes(deps, clock), ...unbuiltRoutes()];
}

/** `health`: the public /healthz and /readyz routes (see api/http/health.ts). */
export function createPlatformApp(deps: PlatformDeps, mounting: Mounting, config: Config, log: Logger, clock: () => Date, health: RouteDef[]): Koa {
  return createHttpApp({
    name: 'platform',
    prefix: '/api/v1',
    routes: platformRouteTable(deps, clock),
    mounting,
    guard: browserSignal,
    yaml: true,
    log,
    openapi: {
      title: 'Cairn agent platform API',
      version: '1.0.0',
      description: 'Agents with authored personality, project configuration, API keys and projects. Event-sourced: every command response carries X-Event-Position; queries accept X-Min-Position for read-your-writes. An optional body field sent as null is the same as one left out. An answer of more than 64 KiB is cut (the connection closed before its end) when its client takes none of it for SEND_TIMEOUT_MS (default 60 s).',
      basePath: '/api/v1',
      securitySchemes: {
        key: { description: 'Project API key (`sk_…`), created with POST /projects/{projectId}/keys or `npm run ops -- keys create`. A key carries scopes (`*` is every scope); the scope an operation needs is listed in its security requirement and in `x-required-scope`, and a key without it gets 403.' },
        session: { description: 'Dashboard session JWT (HS256 with AUTH_JWT_SECRET, or verified against AUTH_JWKS_URL)', bearerFormat: 'JWT' },
      },
    },
    publicRoutes: health,
  });
}

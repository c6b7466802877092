import { resolve } from 'node:path';

/** Every setting Cairn reads, from the environment. README's configuration table lists the same names. */
export interface Config {
  host: string;
  port: number;
  memoryPort: number;
  dataDir: string;
  eventStoreUrl?: string;
  mongodbUrl?: string;
  mongodbDb: string;
  auth: {
    jwtSecret?: string;
    jwksUrl?: string;
    tenantClaim: string;
    issuer?: string;
    audience?: string;
  };
  consistencyTimeoutMs: number;
  memory: {
    ownerToken?: string;
    allowedHosts?: string[];
  };
  logLevel: string;
}

function int(name: string, fallback: number, env: NodeJS.ProcessEnv): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return value;
}

function optional(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const allowedHosts = optional(env.MEMORY_ALLOWED_HOSTS);
  return {
    host: optional(env.HOST) ?? '127.0.0.1',
    port: int('PORT', 8080, env),
    memoryPort: int('MEMORY_PORT', 8081, env),
    dataDir: resolve(optional(env.DATA_DIR) ?? './data'),
    eventStoreUrl: optional(env.EVENTSTORE_URL),
    mongodbUrl: optional(env.MONGODB_URL),
    mongodbDb: optional(env.MONGODB_DB) ?? 'cairn',
    auth: {
      jwtSecret: optional(env.AUTH_JWT_SECRET),
      jwksUrl: optional(env.AUTH_JWKS_URL),
      tenantClaim: optional(env.AUTH_TENANT_CLAIM) ?? 'tenant_id',
      issuer: optional(env.AUTH_ISSUER),
      audience: optional(env.AUTH_AUDIENCE),
    },
    consistencyTimeoutMs: int('CONSISTENCY_TIMEOUT_MS', 5000, env),
    memory: {
      ownerToken: optional(env.MEMORY_OWNER_TOKEN),
      allowedHosts: allowedHosts?.split(',').map((h) => h.trim().toLowerCase()).filter(Boolean),
    },
    logLevel: optional(env.LOG_LEVEL) ?? 'info',
  };
}

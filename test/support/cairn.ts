import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { startCairn, type Cairn } from '../../api/app.js';
import { loadConfig } from '../../infra/config.js';
import { createLogger, type Logger } from '../../infra/logger.js';
import { OpenApiConformance } from './openapi-conformance.js';

export const TEST_JWT_SECRET = 'test-secret-for-hs256-at-least-32-bytes!';

export interface TestCairn extends Cairn {
  dataDir: string;
  /** fetch against the platform app: path relative to /api/v1 unless it starts with '/docs', '/healthz' or '/readyz'. */
  platform(path: string, init?: RequestInit & { json?: unknown }): Promise<Response>;
  memory(path: string, init?: RequestInit & { json?: unknown }): Promise<Response>;
  stop(options?: { keepData?: boolean }): Promise<void>;
}

/**
 * Starts the real app (both Koa servers on ephemeral ports, embedded stores in a temp DATA_DIR).
 * `env` overrides environment settings, e.g. { MEMORY_OWNER_TOKEN: 'x' } or LLM_BASE_URL.
 */
export async function startTestCairn(env: Record<string, string> = {}, options: { dataDir?: string; clock?: () => Date; log?: Logger } = {}): Promise<TestCairn> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'cairn-test-'));
  const config = loadConfig({
    AUTH_JWT_SECRET: TEST_JWT_SECRET,
    ...env,
    DATA_DIR: dataDir,
    PORT: '0',
    MEMORY_PORT: '0',
    HOST: '127.0.0.1',
  });
  const cairn = await startCairn({ config, log: options.log ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'), clock: options.clock });
  // Every response the tests receive through these helpers is checked against the OpenAPI document the
  // service publishes (see openapi-conformance.ts): a response it does not describe fails the request.
  const documents = new Map<string, Promise<OpenApiConformance>>();
  const conform = async (base: string, method: string, url: string, res: Response, json?: unknown) => {
    if (process.env.CAIRN_OPENAPI_CHECK === '0' || new URL(url).pathname.startsWith('/docs/')) return;
    let document = documents.get(base);
    if (!document) documents.set(base, document = OpenApiConformance.load(base, base === cairn.memoryUrl ? 'memory' : 'platform'));
    // The request too: a success for a body the document calls invalid is a document that says too little.
    const violations = await (await document).violations(method, url, res, { json });
    if (violations.length > 0) throw new Error(`response not as the OpenAPI document describes it:\n${violations.join('\n')}`);
  };
  const call = (base: string) => async (path: string, init: RequestInit & { json?: unknown } = {}) => {
    const { json, ...rest } = init;
    const headers = new Headers(rest.headers);
    if (json !== undefined) headers.set('Content-Type', 'application/json');
    const res = await fetch(base + path, { ...rest, headers, body: json !== undefined ? JSON.stringify(json) : rest.body });
    await conform(base, (rest.method ?? 'GET').toUpperCase(), base + path, res, json);
    return res;
  };
  return {
    ...cairn,
    dataDir,
    platform: (path, init) => call(cairn.platformUrl)(/^\/(docs|healthz|readyz)/.test(path) ? path : `/api/v1${path}`, init),
    memory: call(cairn.memoryUrl),
    async stop({ keepData = false } = {}) {
      await cairn.close();
      if (!keepData && !options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Resolves once the named projections have applied the log up to its head (wanted before a read that must succeed),
 * bounded by `ms`, not by the app's CONSISTENCY_TIMEOUT_MS: tests that make that short for the 503 they check, or
 * that seed thousands of events, would otherwise depend on how fast the projection thread, at a lower CPU priority,
 * gets through them beside another test file's processes (in full runs on a loaded machine it took longer than 1.5 s
 * for one memory on a fresh thread, and longer than 5 s for 3,000 seeded ones).
 */
export async function caughtUp(app: Pick<Cairn, 'events' | 'projections'>, names: readonly string[], ms = 30_000): Promise<void> {
  const head = await app.events.headPosition();
  await Promise.all(names.map((name) => app.projections.waitFor(name, head, ms)));
}

export async function sessionToken(claims: { sub?: string; tenant_id?: string } = {}, options: { expiresIn?: string; secret?: string; alg?: string } = {}): Promise<string> {
  return new SignJWT({ tenant_id: claims.tenant_id ?? 'tenant-a' })
    .setProtectedHeader({ alg: options.alg ?? 'HS256' })
    .setSubject(claims.sub ?? 'user-1')
    .setIssuedAt()
    .setExpirationTime(options.expiresIn ?? '10m')
    .sign(new TextEncoder().encode(options.secret ?? TEST_JWT_SECRET));
}

export const bearer = (token: string) => ({ Authorization: `Bearer ${token}` });

/** Creates a project through the API with a session of `tenant`, then a key for it; returns both. */
export async function projectWithKey(app: TestCairn, tenant = 'tenant-a', scopes?: string[]): Promise<{ projectId: string; key: string; keyId: string; session: string }> {
  const session = await sessionToken({ tenant_id: tenant });
  const project = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: `project of ${tenant}` } });
  if (project.status !== 200) throw new Error(`create project: ${project.status} ${await project.text()}`);
  const { project_id } = (await project.json()) as { project_id: string };
  const created = await app.platform(`/projects/${project_id}/keys`, { method: 'POST', headers: bearer(session), json: scopes ? { scopes } : {} });
  if (created.status !== 200) throw new Error(`create key: ${created.status} ${await created.text()}`);
  const { key, key_id } = (await created.json()) as { key: string; key_id: string };
  // Key creation waits for the api-keys read model only up to CONSISTENCY_TIMEOUT_MS, then returns the key anyway (it
  // works once applied): apps with a short timeout, on a loaded machine, would otherwise get a 401 for its first use.
  await caughtUp(app, ['projects', 'api-keys']);
  return { projectId: project_id, key, keyId: key_id, session };
}

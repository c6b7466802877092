import type { AddressInfo } from 'node:net';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type Koa from 'koa';
import { CommandBus, cacheLimits } from '../commands/bus.js';
import { apiKeyDecider, apiKeyStream, USE_RECORD_INTERVAL_MS } from '../domain/apikeys/decider.js';
import type { Config } from '../infra/config.js';
import type { EventStore } from '../infra/eventstore/port.js';
import { createLogger, type Logger } from '../infra/logger.js';
import type { ReadStore } from '../infra/readstore/port.js';
import { closeStores, openStores } from '../infra/stores.js';
import { Throttle } from '../infra/throttle.js';
import { startProjectionHost, type ProjectionHost } from '../projections/host.js';
import { aheadFix, readModelsAhead, ReadModelsAheadError } from '../projections/ahead.js';
import { readiness } from '../projections/health.js';
import { answerClientErrors } from './http/app.js';
import { healthRoutes } from './http/health.js';
import { createMemoryApp } from './memory/app.js';
import { ownerAuthenticator } from './memory/guard.js';
import { createMemoryModule } from './memory/module.js';
import { createPlatformApp } from './platform/app.js';
import { platformAuthenticator, type KeyUse } from './platform/auth.js';
import type { PlatformDeps } from './platform/context.js';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';

export interface Cairn {
  platformUrl: string;
  memoryUrl: string;
  events: EventStore;
  reads: ReadStore;
  bus: CommandBus;
  projections: ProjectionHost;
  /** Waits until every named projection has applied `position`, bounded by CONSISTENCY_TIMEOUT_MS; released early when `signal` aborts. */
  waitFor(projections: string[], position: number, signal?: AbortSignal): Promise<void>;
  /** Read-model waits not yet settled (each ends when its position is reached, at its timeout, or when its client goes away). */
  pendingWaits(): number;
  close(): Promise<void>;
}

export interface CairnOptions {
  config: Config;
  log?: Logger;
  clock?: () => Date;
}

/** How long a stopping server waits for requests in flight beyond the longest read-model wait. */
const SHUTDOWN_GRACE_MS = 5_000;

/** A listening server; `drain()`, once it stops, makes every answer not yet begun close its connection. */
interface Listening {
  server: Server;
  drain(): void;
}

function listen(app: Koa, host: string, port: number, log: Logger, service: string): Promise<Listening> {
  return new Promise((resolve, reject) => {
    const handle = app.callback();
    // Answers not yet begun (requests in flight, pipelined ones): once the server stops, they say `Connection:
    // close` (RFC 9112 §9.6) instead of promising a keep-alive the stop breaks a moment later, so a client's pool
    // does not send its next request on a connection being closed (a POST lost without knowing whether it was done).
    const unanswered = new Set<ServerResponse>();
    let draining = false;
    const server = createServer((req, res) => {
      if (draining) res.shouldKeepAlive = false;
      else {
        unanswered.add(res);
        res.once('close', () => unanswered.delete(res));
      }
      void handle(req, res);
    });
    const drain = () => {
      draining = true;
      for (const res of unanswered) if (!res.headersSent) res.shouldKeepAlive = false;
    };
    // Longer than the idle timeouts of common load balancers and client pools (60 s), so the server is
    // not the side that closes an idle keep-alive connection while a client reuses it (ECONNRESET).
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 66_000;
    answerClientErrors(server, log, service);
    server.once('error', reject);
    server.listen(port, host, () => resolve({ server, drain }));
  });
}

const urlOf = (server: Server) => {
  const { address, port } = server.address() as AddressInfo;
  return `http://${address.includes(':') ? `[${address}]` : address}:${port}`;
};

/** The composition root: stores, command bus, projection runners, and both HTTP apps. */
export async function startCairn(options: CairnOptions): Promise<Cairn> {
  const { config } = options;
  const clock = options.clock ?? (() => new Date());
  const log = options.log ?? createLogger(config.logLevel);
  const { events, reads } = await openStores(config, { checkpointer: !config.projectionsThread });
  const { end, ahead } = await readModelsAhead(events, reads).catch(async (error: unknown) => {
    await closeStores({ events, reads });
    throw error;
  });
  if (ahead.length > 0) {
    await closeStores({ events, reads });
    throw new ReadModelsAheadError(ahead, end, aheadFix(config.mongodbUrl ? undefined : join(config.dataDir, 'readmodels.db')));
  }
  const bus = new CommandBus(events, clock, cacheLimits(config.stateCacheMb));

  let projections: ProjectionHost | undefined;
  let pending = 0;
  const settled = () => { pending -= 1; };
  const waitFor = async (names: string[], position: number, signal?: AbortSignal) => {
    if (!projections) throw new Error('projections are not running');
    const host = projections;
    await Promise.all(names.map((name) => {
      pending += 1;
      return host.waitFor(name, position, config.consistencyTimeoutMs, signal).finally(settled);
    }));
  };
  // The vector index loads (and finds vectors of an earlier local embedder) while the host starts.
  let hostStarted!: (host: ProjectionHost) => void;
  const started = new Promise<ProjectionHost>((resolve) => { hostStarted = resolve; });
  const reembed = (older: string[]) => { void started.then((h) => h.reembed(older)); };
  const memory = await createMemoryModule({ bus, events, reads, config, log, waitFor, reembed });
  // Created before the projections start: the api-keys projection tells it which cached keys changed.
  let platformAuth: ReturnType<typeof platformAuthenticator> | undefined;
  const host = await startProjectionHost({
    config, events, reads, log,
    sinks: { keys: (keyIds) => platformAuth?.forget(keyIds), ...memory.sinks },
  });
  projections = host;
  hostStarted(host);

  // last_used_at: at most one ApiKeyUsed event a minute per key, recorded off the request path.
  const useRecords = new Throttle(USE_RECORD_INTERVAL_MS);
  const recordKeyUse = (use: KeyUse) => {
    if (!useRecords.pass(use.key_id, clock().getTime())) return;
    // Caused by the request that used the key: its X-Request-Id correlates the event.
    const id = randomUUID();
    const correlation = use.correlation_id ?? id;
    bus.handle(apiKeyStream(use.key_id), apiKeyDecider, { type: 'RecordApiKeyUse', data: { key_id: use.key_id, project_id: use.project_id } },
      { correlation_id: correlation, causation_id: correlation, actor: `key:${use.key_id}`, project_id: use.project_id, tenant_id: use.tenant_id, request_key: id, sequence: { next: 0 } })
      .catch((error) => log.warn({ err: error, key_id: use.key_id }, 'could not record API key use'));
  };

  const deps: PlatformDeps = { bus, events, reads, waitFor: (name, position, signal) => waitFor([name], position, signal), log };
  // A key's creation is in the log: waiting past its head for a key (a position far ahead, sent with a key
  // that does not exist) would only hold the request until CONSISTENCY_TIMEOUT_MS.
  platformAuth = platformAuthenticator(config.auth, reads, recordKeyUse, clock,
    async (position, signal) => waitFor(['api-keys'], Math.min(position, await events.headPosition()), signal));
  // Both services run on this process's projections: they answer /readyz alike.
  const health = healthRoutes(() => readiness(host, { events, reads }, config.readyMaxLag));
  const platformApp = createPlatformApp(deps, {
    authenticate: platformAuth.authenticate,
    waitFor,
    sendTimeoutMs: config.sendTimeoutMs,
  }, config, log, clock, health);
  const authenticateOwner = ownerAuthenticator(config.memory.ownerToken);
  const memoryApp = createMemoryApp(memory.routes, {
    authenticate: (ctx) => authenticateOwner(ctx), waitFor, jsonTypes: ['application/json'], sendTimeoutMs: config.sendTimeoutMs,
  }, config, log, health);

  let platformServer: Listening | undefined;
  let memoryServer: Listening;
  try {
    platformServer = await listen(platformApp, config.host, config.port, log, 'platform');
    memoryServer = await listen(memoryApp, config.host, config.memoryPort, log, 'memory');
  } catch (error) {
    // A port in use: nothing half-started stays behind (a server listening, the projection thread, the stores).
    platformServer?.server.close();
    await host.stop().catch(() => undefined);
    await closeStores({ events, reads });
    throw error;
  }

  let closed = false;
  return {
    platformUrl: urlOf(platformServer.server),
    memoryUrl: urlOf(memoryServer.server),
    events, reads, bus, projections: host, waitFor,
    pendingWaits: () => pending,
    async close() {
      if (closed) return;
      closed = true;
      // Requests in flight get their answers (an acknowledged write is never cut off before its response);
      // idle keep-alive connections are closed as they become idle; whatever is left after the grace period is cut.
      await Promise.all([platformServer, memoryServer].map(({ server: s, drain }) => new Promise<void>((resolve) => {
        drain();
        const idle = setInterval(() => s.closeIdleConnections(), 25);
        const cut = setTimeout(() => s.closeAllConnections(), config.consistencyTimeoutMs + SHUTDOWN_GRACE_MS);
        s.close(() => {
          clearInterval(idle);
          clearTimeout(cut);
          resolve();
        });
        s.closeIdleConnections();
      })));
      // Graceful stop: no new writes arrive now; let the read models apply everything written (bounded),
      // so a restart (perhaps with another embedding model) does not have to apply it instead.
      // An event store that does not answer (EVENTSTORE_TIMEOUT_MS) skips the wait, not the closing.
      const head = await events.headPosition().catch(() => undefined);
      // A paused projection (ProjectionHost.pause) applies nothing until resumed: not waited for.
      const running = host.health().projections.filter((p) => p.paused_at === null).map((p) => p.projection);
      if (head !== undefined) await Promise.all(running.map((name) => host.waitFor(name, head, config.consistencyTimeoutMs).catch(() => undefined)));
      await host.stop();
      await reads.close();
      await events.close();
    },
  };
}

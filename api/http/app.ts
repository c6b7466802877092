import Router from '@koa/router';
import Koa from 'koa';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { stringify as toYaml } from 'yaml';
import type { RequestMeta } from '../../commands/bus.js';
import { DomainError, type DomainErrorKind } from '../../domain/shared/decider.js';
import { AppendTooLargeError, DuplicateEventIdError, EventLogBusyError, EventStoreTimeoutError, StorageFullError, StreamDeletedError, WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import type { Logger } from '../../infra/logger.js';
import { InvalidCursorError } from '../../infra/readstore/port.js';
import { ConsistencyTimeoutError } from '../../projections/runner.js';
import { buildOpenApi, type OpenApiInfo } from './openapi.js';
import { headerLines } from './guard.js';
import { badRequest, forbidden, ProblemError, type ProblemChoice } from './problem.js';
import { awaitContinue, mountRoutes, REQUEST_ID_PATTERN, sendContinue, type Mounting, type RouteDef } from './routes.js';

const REQUEST_ID = new RegExp(REQUEST_ID_PATTERN);

export interface HttpAppOptions {
  name: string;
  prefix: string;
  routes: RouteDef[];
  mounting: Mounting;
  /** Rejects browser (and, on the memory service, foreign-host) requests with 403. */
  guard(ctx: Koa.Context): string | undefined;
  openapi: OpenApiInfo;
  yaml: boolean;
  log: Logger;
  /** Routes outside the prefix (health): mounted before the API, and documented at the root of the OpenAPI document. */
  publicRoutes?: RouteDef[];
  /**
   * When given, a request that matches no route (except on a public path: the OpenAPI documents and
   * `publicRoutes`) is authenticated before it gets 404 or 405, so only a caller with credentials
   * learns which paths and methods exist. The memory service needs its owner token on every request.
   */
  authenticateUnmatched?(ctx: Koa.Context): Promise<unknown>;
}

const DOMAIN_PROBLEMS: Record<DomainErrorKind, ProblemChoice> = {
  invalid: [400, 'invalid'], forbidden: [403, 'forbidden'], not_found: [404, 'not-found'], conflict: [409, 'conflict'],
  idempotency_mismatch: [422, 'idempotency-mismatch'], not_implemented: [501, 'not-implemented'],
};

/** Maps any thrown error to a problem: the one place statuses are decided. */
export function toProblemError(error: unknown): ProblemError {
  if (error instanceof ProblemError) return error;
  if (error instanceof DomainError) {
    const [status, slug] = DOMAIN_PROBLEMS[error.kind];
    return new ProblemError(status, slug, error.message, error.details ?? {});
  }
  if (error instanceof WrongExpectedVersionError) {
    return new ProblemError(409, 'concurrency-conflict', 'the resource was changed concurrently; retry the request', { stream: error.stream });
  }
  if (error instanceof DuplicateEventIdError) return new ProblemError(409, 'duplicate-request', 'this request id was already used for a different change');
  if (error instanceof AppendTooLargeError) {
    return new ProblemError(413, 'request-too-large', `the event store refuses to write this much at once${error.maxAppendSize === undefined ? '' : ` (at most ${error.maxAppendSize} bytes per write, the request's own data and metadata included)`}: nothing was written; send less`);
  }
  if (error instanceof StreamDeletedError) {
    return new ProblemError(410, 'stream-deleted', 'this resource\'s event stream was deleted for good in the event store (an operator\'s hard delete): it can no longer be changed; nothing was written', { stream: error.stream });
  }
  if (error instanceof EventLogBusyError) {
    return new ProblemError(503, 'event-store-unavailable', 'the event log is locked by another process (an operator\'s tool holding a write transaction): nothing of this request was written; retry', { headers: { 'Retry-After': '1' } });
  }
  if (error instanceof StorageFullError) return new ProblemError(507, 'storage-full', 'the server\'s storage is full: nothing of this request was written; retry once space has been freed');
  if (error instanceof EventStoreTimeoutError) {
    return new ProblemError(503, 'event-store-unavailable', error.operation === 'append'
      ? 'the event store did not answer in time: whether this request\'s changes were written is unknown; retrying it with the same Idempotency-Key is safe'
      : 'the event store did not answer in time; retry later', { headers: { 'Retry-After': '5' } });
  }
  if (error instanceof ConsistencyTimeoutError) {
    return new ProblemError(503, 'not-caught-up', error.message, { headers: { 'Retry-After': '1' } });
  }
  if (error instanceof InvalidCursorError) return badRequest(error.message, [{ location: 'query.cursor', message: error.message }]);
  return new ProblemError(500, 'internal', 'the request could not be completed');
}

export function createHttpApp(options: HttpAppOptions): Koa {
  const app = new Koa();
  app.proxy = false;
  // Only the paths of the OpenAPI document are routes: paths are case-sensitive (RFC 3986 §6.2.2.1), so /V1/search is
  // 404, and so is /v1/search/ (@koa/router matches either unless told, sensitive and strict).
  const routing = { prefix: options.prefix, sensitive: true, strict: true };
  const router = new Router(routing);
  // Operations that only answer 501 (RouteDef.implemented) have a router of their own, tried after the others:
  // @koa/router tries a path against every route of a router in turn, and the platform's 77 cost every request
  // 11 µs there (0.9 µs for the implemented routes alone).
  const unbuilt = new Router(routing);
  const docs = new Router({ sensitive: true, strict: true });
  const openapi = buildOpenApi(options.openapi, options.routes);
  const publicRoutes = options.publicRoutes ?? [];
  openapi.paths = { ...buildOpenApi({ ...options.openapi, basePath: '' }, publicRoutes).paths as object, ...openapi.paths as object };
  docs.get('/docs/openapi.json', (ctx) => { ctx.body = openapi; });
  if (options.yaml) {
    const yaml = toYaml(openapi, { aliasDuplicateObjects: false });
    docs.get('/docs/openapi.yaml', (ctx) => { ctx.type = 'application/yaml'; ctx.body = yaml; });
  }
  mountRoutes(docs, publicRoutes, options.mounting);
  mountRoutes(router, options.routes.filter((r) => r.implemented !== false), options.mounting);
  mountRoutes(unbuilt, options.routes.filter((r) => r.implemented === false), options.mounting);

  app.use(async (ctx, next) => {
    const started = performance.now();
    const given = ctx.get('X-Request-Id');
    const requestId = given && REQUEST_ID.test(given) ? given : randomUUID();
    // Absent is no key; sent empty is a malformed one (a client that meant to send a key must not get creates repeated).
    const sentKey = ctx.req.headers['idempotency-key'] === undefined ? undefined : ctx.get('Idempotency-Key');
    ctx.set('X-Request-Id', requestId);
    // Answers carry project data, keys shown once and personal memories: no cache (browser, proxy) keeps them.
    ctx.set('Cache-Control', 'no-store');
    // Nor may a browser that gets one anyway read it as another type than it says (HTML from a JSON body).
    ctx.set('X-Content-Type-Options', 'nosniff');
    // The request's logger is made when something logs (most requests at LOG_LEVEL=warn log nothing).
    // A getter method, not a named closure: under tsx (esbuild's keepNames) each one made costs a defineProperty of its name.
    let child: Logger | undefined;
    Object.defineProperty(ctx.state, 'log', { get() { return (child ??= options.log.child({ request_id: requestId, service: options.name })); }, enumerable: true, configurable: true });
    const state = ctx.state as { log: Logger };
    const meta: RequestMeta = {
      correlation_id: requestId,
      causation_id: requestId,
      actor: 'anonymous',
      // Only an Idempotency-Key makes a repeated request a replay; request ids just correlate.
      request_key: sentKey ? `idem:${sentKey}` : randomUUID(),
      sequence: { next: 0 },
    };
    ctx.state.meta = meta;
    try {
      // What Node itself would refuse with an empty body (see answerClientErrors) is refused first, as it would be.
      if (ctx.req.httpVersion === '1.1' && ctx.req.headers.host === undefined) {
        throw new ProblemError(400, 'malformed-request', 'an HTTP/1.1 request must have a Host header (RFC 9112 §3.2)');
      }
      // Node keeps the first of several Host lines; which one a proxy in front routed by is unknown (RFC 9112 §3.2: 400).
      if (headerLines(ctx, 'host') > 1) throw new ProblemError(400, 'malformed-request', 'the Host header was sent more than once (RFC 9112 §3.2)');
      if (unmetExpectations.has(ctx.req)) {
        throw new ProblemError(417, 'expectation-failed', 'the Expect header asks for what the server cannot meet: 100-continue is the only expectation it supports');
      }
      // Browsers are refused before anything else of their request is looked at.
      const rejected = options.guard(ctx);
      if (rejected) throw forbidden(rejected);
      // The router matches a path whose escapes are not UTF-8 as raw text (`/agents/100%` finds the agent "100%").
      if (!decodable(ctx.path)) {
        throw badRequest('malformed percent-encoding in the path', [{ location: 'path', message: 'invalid percent-encoding: escapes must encode UTF-8 and a literal % is written %25', value: ctx.path.slice(0, 256) }]);
      }
      await next();
    } catch (error) {
      const problem = toProblemError(error);
      // An unexpected error is logged with its stack; a deliberate 5xx (a provider failure, whose route already
      // logged the upstream reply; a missing configuration; a read-model wait that timed out) only says which.
      if (problem.slug === 'internal') state.log.error({ err: error }, 'request failed');
      // Every write fails until an operator frees space: an error to alert on, though not a defect (no stack).
      else if (problem.slug === 'storage-full') state.log.error({ status: problem.status, problem: problem.slug, detail: (error as Error).message }, 'request failed: storage full');
      else if (problem.status >= 500) state.log.warn({ status: problem.status, problem: problem.slug, detail: problem.detail }, 'request failed');
      ctx.status = problem.status;
      ctx.type = 'application/problem+json';
      ctx.body = problem.toProblem(requestId);
      for (const [k, v] of Object.entries(problem.extra.headers ?? {})) ctx.set(k, v);
    }
    // A client that sent the body it announced without waiting for 100 Continue (clients wait a second or so)
    // is answered as without Expect: the body is read and dropped after the answer, on a connection kept open,
    // rather than left unread under a connection closed (whose reset could lose the answer).
    if (ctx.req.readableLength > 0) sendContinue(ctx);
    if (options.log.isLevelEnabled('info')) {
      state.log.info({ method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round((performance.now() - started) * 10) / 10 }, 'request');
    }
  });
  app.use(docs.routes());
  app.use(router.routes());
  app.use(unbuilt.routes());
  app.use(async (ctx) => {
    if (options.authenticateUnmatched && docs.match(ctx.path, ctx.method).path.length === 0) await options.authenticateUnmatched(ctx);
    // Nothing matched: 405 with Allow when the path exists for other methods, else 404.
    const matched = [router, unbuilt, docs].flatMap((r) => r.match(ctx.path, ctx.method).path);
    const methods = new Set(matched.flatMap((layer) => layer.methods).filter((m) => m !== 'HEAD' || matched.some((l) => l.methods.includes('GET'))));
    if (methods.size > 0) {
      const allow = [...methods].sort().join(', ');
      throw new ProblemError(405, 'method-not-allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: ${allow}`, { headers: { Allow: allow } });
    }
    throw new ProblemError(404, 'not-found', `no route for ${ctx.method} ${ctx.path}`);
  });
  app.on('error', () => undefined);
  return app;
}

function decodable(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/** Node's statuses for the requests its HTTP parser refuses; anything else it refuses is 400. */
const CLIENT_ERRORS: Record<string, readonly [...ProblemChoice, detail: string]> = {
  HPE_HEADER_OVERFLOW: [431, 'request-too-large', 'the URL and headers exceed the server\'s limit (16 KiB by default)'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'request-too-large', 'the chunk extensions exceed the server\'s limit'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'request-timeout', 'the request was not received in time'],
};

/** Requests with an Expect header Node does not meet (anything but 100-continue): answered 417 by the app. */
const unmetExpectations = new WeakSet<IncomingMessage>();

/**
 * Requests Node refuses never reach Koa, and Node answers them with an empty body: answer with a problem.
 * Those its HTTP parser refuses are answered here; the two it refuses after parsing (an HTTP/1.1 request
 * without Host: 400, an Expect other than 100-continue: 417) are handed to the app, which refuses them first.
 */
export function answerClientErrors(server: Server, log: Logger, service: string): void {
  // Set as a property: Node reads it on every request, though its types know it only as a createServer option.
  (server as Server & { requireHostHeader: boolean }).requireHostHeader = false;
  // 100 Continue is sent when the body is read (see awaitContinue), not by Node at once; at once, as Node does,
  // for a request without a body (nothing to wait for), since answering it without would close its connection.
  server.on('checkContinue', (req: IncomingMessage, res) => {
    const length = req.headers['content-length'];
    if (req.headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) !== 0)) awaitContinue(req);
    else res.writeContinue();
    server.emit('request', req, res);
  });
  server.on('checkExpectation', (req: IncomingMessage, res) => {
    unmetExpectations.add(req);
    server.emit('request', req, res);
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // As Node does: only when nothing of a response has been written to this connection yet.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (error.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const [status, slug, detail] = CLIENT_ERRORS[error.code ?? ''] ?? [400, 'malformed-request', 'the request is not valid HTTP/1.1'];
    const requestId = randomUUID();
    const problem = new ProblemError(status, slug, detail).toProblem(requestId);
    const body = JSON.stringify(problem);
    // The access log's line for a request that never reached the app, so the request id the client got is found.
    if (log.isLevelEnabled('info')) log.info({ request_id: requestId, service, status, problem: slug, code: error.code }, 'request refused by the HTTP parser');
    // The headers every answer of the apps carries (see createHttpApp).
    socket.end(`HTTP/1.1 ${status} ${problem.title}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\n`
      + `Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n${body}`);
  });
}

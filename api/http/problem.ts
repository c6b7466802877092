/** RFC 9457 problem details. Every error either API returns is one of these. */
export interface ProblemFieldError {
  location: string;
  message: string;
  value?: unknown;
}

/** The Problem schema in the service's own OpenAPI document (same path on both APIs). */
export const PROBLEM_SCHEMA = '/docs/openapi.json#/components/schemas/Problem';

export interface Problem {
  $schema?: string;
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  errors?: ProblemFieldError[];
  [extension: string]: unknown;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  410: 'Gone',
  413: 'Content Too Large',
  417: 'Expectation Failed',
  422: 'Unprocessable Content',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
  507: 'Insufficient Storage',
};

export const PROBLEM_BASE = 'https://cairn.dev/problems/';

/**
 * Every problem `type` either service answers, as `PROBLEM_BASE` + slug: the statuses it comes with and
 * what it means. The one source for the OpenAPI documents' Problem schema and README's table; a
 * ProblemError with a slug (or a status) not listed here does not compile.
 */
export const PROBLEM_TYPES = {
  validation: { statuses: [400], meaning: 'The request is invalid: a path or query parameter, a header or the body failed validation (`errors[]` names each), or the body could not be read as JSON (malformed, not UTF-8, over 1 MiB, nested too deeply, a name twice in one object, wrong Content-Type, charset or Content-Encoding), or the path\'s percent-encoding is not UTF-8.' },
  invalid: { statuses: [400], meaning: 'A rule of the domain refused the command. The routes check the same rules first and answer `validation` naming the field, so a client should not see this type; it is what the domain answers a caller that skipped those checks.' },
  aborted: { statuses: [400], meaning: 'The request body was not received completely.' },
  'malformed-request': { statuses: [400], meaning: 'Not valid HTTP/1.1: refused by the HTTP parser, an HTTP/1.1 request without a `Host` header, or one with more than one.' },
  'embeddings-not-configured': { statuses: [400], meaning: 'Memory service: semantic or hybrid search while `EMBEDDINGS_PROVIDER` is `none`.' },
  unauthorized: { statuses: [401], meaning: 'Credentials missing, malformed, not valid, revoked or expired (with `WWW-Authenticate: Bearer`).' },
  forbidden: { statuses: [403], meaning: 'A browser request (an `Origin` or `Sec-Fetch-Site` header), or on the memory service a `Host` not in `MEMORY_ALLOWED_HOSTS`.' },
  'insufficient-scope': { statuses: [403], meaning: 'Platform: the API key lacks the scope the operation needs (its `x-required-scope`).' },
  'not-found': { statuses: [404], meaning: 'No such resource (objects of another project included), or no route for the path.' },
  'method-not-allowed': { statuses: [405], meaning: 'The path exists, but not for this method: `Allow` lists those it has.' },
  'request-timeout': { statuses: [408], meaning: 'The request was not received in time.' },
  'expectation-failed': { statuses: [417], meaning: 'The request has an `Expect` header other than `100-continue`, which is the only expectation the server meets.' },
  conflict: { statuses: [409], meaning: 'The change conflicts with the current state: the project, agent or key exists already, the agent name is taken (`agent_id` names its holder), or a project configuration would pass its limits (1,000 keys, 16 MiB of values).' },
  'concurrency-conflict': { statuses: [409], meaning: 'The resource kept being changed concurrently while the command was retried (`stream` names it): send the request again.' },
  'storage-full': { statuses: [507], meaning: 'The server\'s storage (the event log\'s disk) is full: nothing of the request was written. Writes succeed again once an operator has freed space; read models on the same disk stall meanwhile (reads that wait for them answer `not-caught-up`) and catch up then.' },
  'duplicate-request': { statuses: [409], meaning: 'The events this request would append (their ids derive from its Idempotency-Key) are already in the log elsewhere: a repeat that cannot be answered as a replay. Nothing was written.' },
  'idempotency-replay': { statuses: [409], meaning: 'Platform: a key creation repeated with its Idempotency-Key; the key exists, but its secret cannot be shown again.' },
  'concurrent-delete': { statuses: [409], meaning: 'Memory service: a store changed nothing (the text was already held), and a concurrent request deleted that memory (or changed it to another text) before the answer could be read; sending the store again stores the text anew. (`POST /v1/memories` only: an ingest leaves such a fact out of its answer.)' },
  'stream-deleted': { statuses: [410], meaning: 'EventStoreDB: the event stream of the resource the command changes was deleted for good (tombstoned by an operator\'s hard delete), so the store refuses every read and write of it (`stream` names it). Nothing was written; the resource cannot be changed again. The embedded log has no hard deletes.' },
  'request-too-large': { statuses: [413, 431], meaning: 'The URL and headers exceed the server\'s limit (431), or a chunked body\'s chunk extensions do (413), or EventStoreDB refuses the write as larger than its `MaxAppendSize` (413; a configuration value close to 1 MiB with the server\'s default). A body over 1 MiB is `validation`.' },
  'idempotency-mismatch': { statuses: [422], meaning: 'The Idempotency-Key was already used for a different request.' },
  internal: { statuses: [500], meaning: 'An unexpected failure, e.g. of the event store or a read store: the body is generic and the server log has the details.' },
  'provider-failure': { statuses: [500], meaning: 'Memory service: a model provider (chat or embeddings) failed or answered unusably; the upstream reply is logged, never returned.' },
  'not-implemented': { statuses: [501], meaning: 'An operation of the platform spec that this version of Cairn does not implement yet: it is routed and listed in the OpenAPI document (with `x-implemented: false`), and answers this once the caller is authenticated.' },
  'not-caught-up': { statuses: [503], meaning: 'A read model did not reach the position the request waits for (`X-Min-Position`, or the operation\'s own wait) within `CONSISTENCY_TIMEOUT_MS`: retry after `Retry-After`.' },
  'not-configured': { statuses: [503], meaning: 'Something the operation needs is not configured: dashboard sessions (`AUTH_JWKS_URL` or `AUTH_JWT_SECRET`), or the memory service\'s chat provider (`LLM_BASE_URL`).' },
  'not-ready': { statuses: [503], meaning: '`GET /readyz`: the event store or the read store failed or did not answer within 2 s, a projection this process serves is failing, paused or past the end of the event log, the projection thread is restarting or unresponsive, or (with `READY_MAX_LAG`) a projection is too far behind; `detail` names each reason, and the `stores`, `thread` and `projections` members say more.' },
  'identity-provider-unavailable': { statuses: [503], meaning: 'Platform: the identity provider\'s keys (`AUTH_JWKS_URL`) could not be fetched, or a session token names a key (`kid`) the key set did not hold when fetched less than 30 s ago, so a session token cannot be verified now: retry after `Retry-After`.' },
  'event-store-unavailable': { statuses: [503], meaning: 'The event store (EventStoreDB, `EVENTSTORE_URL`) did not answer within `EVENTSTORE_TIMEOUT_MS`, answered that its write timed out, or could not be reached (a network partition, a server that hangs or is down, a leader election). The outcome of a write is unknown: its changes may have been written, or may be still. Retrying with the same Idempotency-Key is safe where the operation takes one; retry after `Retry-After`. Also the embedded log locked by another process for more than 5 s (an operator\'s `sqlite3` session holding a write transaction): then nothing was written.' },
} as const satisfies Record<string, { statuses: readonly number[]; meaning: string }>;

export type ProblemSlug = keyof typeof PROBLEM_TYPES;
/** The statuses a problem type comes with. */
export type ProblemStatus<S extends ProblemSlug = ProblemSlug> = (typeof PROBLEM_TYPES)[S]['statuses'][number];
/** A status and a slug that go together: for tables that pick a problem (see api/http/app.ts). */
export type ProblemChoice = { [S in ProblemSlug]: readonly [status: ProblemStatus<S>, slug: S] }[ProblemSlug];

export class ProblemError<S extends ProblemSlug = ProblemSlug> extends Error {
  override readonly name = 'ProblemError';
  constructor(
    readonly status: ProblemStatus<S>,
    readonly slug: S,
    readonly detail: string,
    readonly extra: { errors?: ProblemFieldError[]; headers?: Record<string, string>; [key: string]: unknown } = {},
  ) {
    super(detail);
  }

  toProblem(instance: string): Problem {
    const { headers: _headers, ...extensions } = this.extra;
    return {
      // As the spec's generated error model does: where the shape of this body is described.
      $schema: PROBLEM_SCHEMA,
      type: `${PROBLEM_BASE}${this.slug}`,
      title: TITLES[this.status] ?? 'Error',
      status: this.status,
      detail: this.detail,
      instance,
      ...extensions,
    };
  }
}

export const badRequest = (detail: string, errors?: ProblemFieldError[]) =>
  new ProblemError(400, 'validation', detail, errors ? { errors } : {});
export const notFound = (detail = 'resource not found') => new ProblemError(404, 'not-found', detail);
export const unauthorized = (detail: string) =>
  new ProblemError(401, 'unauthorized', detail, { headers: { 'WWW-Authenticate': 'Bearer' } });
export const forbidden = (detail: string) => new ProblemError(403, 'forbidden', detail);

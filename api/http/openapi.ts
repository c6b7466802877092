import type { TSchema } from 'typebox';
import { PROBLEM_BASE, PROBLEM_SCHEMA, PROBLEM_TYPES } from './problem.js';
import { BODY_LIMIT_BYTES, IDEMPOTENCY_KEY_PATTERN, isCommand, MAX_JSON_DEPTH, REQUEST_ID_PATTERN, type AuthKind, type RouteDef } from './routes.js';

export interface OpenApiInfo {
  title: string;
  version: string;
  description: string;
  basePath: string;
  securitySchemes: Partial<Record<AuthKind, { description: string; bearerFormat?: string }>>;
  /** Credentials are optional (the memory service without MEMORY_OWNER_TOKEN): each operation also lists `{}`. */
  anonymous?: boolean;
}

const SCHEME_NAMES: Record<AuthKind, string> = { key: 'ApiKey', session: 'SessionJwt', owner: 'OwnerToken' };

const problemTypes = Object.entries(PROBLEM_TYPES);

/** The problem types as a Markdown table: in the Problem schema here, and (a test keeps it so) in README. */
export function problemTypesTable(): string {
  return ['| `type` (after `' + PROBLEM_BASE + '`) | status | meaning |', '|---|---|---|']
    .concat(problemTypes.map(([slug, { statuses, meaning }]) => `| \`${slug}\` | ${statuses.join(', ')} | ${meaning} |`))
    .join('\n');
}

const ProblemSchema = {
  type: 'object',
  description: 'RFC 9457 problem details',
  // Every type either service answers, with its statuses: the catalogue in api/http/problem.ts.
  'x-problem-types': Object.fromEntries(problemTypes.map(([slug, { statuses, meaning }]) => [slug, { type: `${PROBLEM_BASE}${slug}`, status: statuses, meaning }])),
  required: ['type', 'title', 'status', 'detail'],
  properties: {
    // `examples` (an array): OpenAPI 3.1's Schema Object is JSON Schema 2020-12, where `example` is deprecated.
    $schema: { type: 'string', description: 'where this shape is described: this document\'s Problem schema', examples: [PROBLEM_SCHEMA] },
    type: {
      type: 'string',
      format: 'uri',
      description: `What went wrong, as \`${PROBLEM_BASE}<slug>\`: one of these (also listed in the schema's \`x-problem-types\`). A client that meets a type it does not know should act on \`status\`.\n\n${problemTypesTable()}`,
      examples: problemTypes.map(([slug]) => `${PROBLEM_BASE}${slug}`),
    },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    instance: { type: 'string', description: 'the request id' },
    stream: { type: 'string', description: 'with `concurrency-conflict` and `stream-deleted`: the event stream of the resource the command changes' },
    errors: {
      type: 'array',
      items: {
        type: 'object',
        required: ['location', 'message'],
        properties: { location: { type: 'string', examples: ['body.big5.openness'] }, message: { type: 'string' }, value: {} },
      },
    },
  },
};

const ERROR_TEXT: Record<number, string> = {
  400: 'Invalid input (validation, malformed or oversize body, unknown fields)',
  401: 'Missing or invalid credentials',
  403: 'Browser request rejected (an `Origin` or `Sec-Fetch-Site` header; on the memory service also a `Host` not in MEMORY_ALLOWED_HOSTS)',
  404: 'Not found (also objects of another project)',
  405: 'Method not allowed on this path (see Allow)',
  409: 'Conflict: with the current state (`conflict`, e.g. a duplicate name, or a project configuration at its limits), a resource that kept being changed concurrently while the command was retried (`concurrency-conflict`: send it again), or a repeat whose events are in the log elsewhere (`duplicate-request`)',
  410: 'The resource\'s event stream was deleted for good in EventStoreDB (`stream-deleted`: an operator\'s hard delete): nothing was written, and it cannot be changed again',
  413: 'The event store refuses the write as larger than it takes at once (`request-too-large`; EventStoreDB\'s `MaxAppendSize`, 1 MiB by default): nothing was written',
  422: 'Idempotency-Key already used for a different request',
  500: 'Internal failure: a store failed or something unexpected happened (`internal`), or a model provider failed where one is called (`provider-failure`); the body is generic, the server log has the details',
  501: 'Not implemented in this version of Cairn (`not-implemented`)',
  507: 'The server\'s storage is full (`storage-full`): nothing was written; retry once space has been freed',
  503: 'Unavailable for now (the problem\'s `type` says why): a read model did not catch up in time (`not-caught-up`, see Retry-After), something the operation needs is not configured (`not-configured`), or the event store did not answer in time (`event-store-unavailable`, see Retry-After: a write\'s outcome is unknown, and a retry with the same Idempotency-Key is safe)',
};
const SESSION_UNAVAILABLE = ', or the identity provider\'s keys could not be fetched to verify the session (`identity-provider-unavailable`, see Retry-After)';

/**
 * How every JSON body is read (readJsonBody in routes.ts), beyond its schema: what a gateway or client in front must
 * let through, and what makes a 400. The byte limit is also `x-max-body-bytes`, for tools that configure a gateway.
 */
const BODY_RULES = `JSON, \`Content-Type: application/json\` (charset, if given, UTF-8), at most ${BODY_LIMIT_BYTES.toLocaleString('en-US')} bytes `
  + `(1 MiB; with a \`Content-Encoding\` of gzip, deflate or br, counted after decompression), nested at most ${MAX_JSON_DEPTH} levels deep, `
  + 'one JSON value with nothing after it, well-formed UTF-8, no member name twice in one object and no `__proto__` member; anything else is 400 (`validation`).';

/** Every command's success carries it (mountRoutes sends Reply.position, which every command handler sets). */
const EVENT_POSITION = { description: 'Log position of the last event this command appended', required: true, schema: { type: 'string', pattern: '^[0-9]+$' } };

/** Headers problem answers carry (see `unauthorized()` and the problems built with a Retry-After). */
const ERROR_HEADERS: Record<number, Record<string, unknown>> = {
  401: { 'WWW-Authenticate': { description: 'the authentication scheme: `Bearer`', required: true, schema: { type: 'string' } } },
  503: {
    'Retry-After': {
      description: 'seconds to wait before retrying: sent with `not-caught-up`, `event-store-unavailable` and `identity-provider-unavailable`, not with `not-configured`',
      schema: { type: 'string', pattern: '^[0-9]+$' },
    },
  },
};

/**
 * The headers of this operation's problem answer with `status`. Retry-After comes only with the 503s that wait or
 * depend on something coming back (a read model: a query's wait, a command's own, an API key's with X-Min-Position;
 * the event store, on commands; the identity provider, for sessions): not on the probes, whose 503 (`not-ready`)
 * never has one.
 */
function errorHeaders(r: RouteDef, status: number): Record<string, unknown> | undefined {
  const mayRetry = isCommand(r) || (r.readModels?.length ?? 0) > 0 || r.auth.includes('key') || r.auth.includes('session');
  if (status === 503 && !mayRetry) return undefined;
  return ERROR_HEADERS[status];
}

/**
 * Problem statuses an operation can answer whatever its handler does, added to those its route lists:
 * 400 wherever mountRoutes validates something of the request (path parameters, also their percent-encoding;
 * a query not open to any parameter refuses unknown ones and a misplaced `min_position`; a body; a command's
 * Idempotency-Key), 500 on every one (the stores can fail), 409 on every command (the bus retries a concurrent
 * change a few times, then gives up; an Idempotency-Key repeat can collide), 410 (EventStoreDB refuses a stream an operator tombstoned), 413 (EventStoreDB refuses an append over its MaxAppendSize), 507 (the log's storage is full) and 503 (the event
 * store did not answer in time); 503 also where it waits for a read model (X-Min-Position) or accepts dashboard
 * sessions (not configured, or the identity provider's keys out of reach).
 */
function impliedErrors(r: RouteDef): number[] {
  const openQuery = (r.query as { additionalProperties?: unknown } | undefined)?.additionalProperties === true;
  return [
    ...(r.params || !openQuery || r.body || isCommand(r) ? [400] : []),
    ...(isCommand(r) ? [409, 410, 413, 503, 507] : []),
    500,
    ...((r.readModels?.length ?? 0) > 0 || r.auth.includes('session') ? [503] : []),
  ];
}

function errorText(r: RouteDef, status: number): string {
  const own = r.errorDescriptions?.[status];
  if (own !== undefined) return own;
  const text = ERROR_TEXT[status] ?? 'Error';
  if (status === 403 && r.scope !== undefined && r.auth.includes('key')) return `${text}, or an API key without the scope \`${r.scope}\` (nor \`*\`)`;
  if (status === 503 && r.auth.includes('session')) return text + SESSION_UNAVAILABLE;
  return text;
}

/** The Problem, with the members this operation's problem of a status adds (RouteDef.problemExtensions). */
function problemSchema(extension: TSchema | undefined): Record<string, unknown> {
  const problem = { $ref: '#/components/schemas/Problem' };
  return extension ? { allOf: [problem, withEnums(extension)] } : problem;
}

function parameters(schema: TSchema | undefined, location: 'path' | 'query') {
  const s = schema as { properties?: Record<string, TSchema & { description?: string }>; required?: string[] } | undefined;
  return Object.entries(s?.properties ?? {}).map(([name, prop]) => ({
    name,
    in: location,
    required: location === 'path' || (s?.required ?? []).includes(name),
    ...(prop.description ? { description: prop.description } : {}),
    schema: prop,
  }));
}

/**
 * A copy of `value` in which every choice among constants of one type (TypeBox's union of literals:
 * `anyOf: [{type: 'string', const: 'male'}, …]`) is an `enum`: the same values, in the form code generators
 * turn into an enumeration (an `anyOf` becomes a wrapper type, or is dropped to a plain string). A numeric
 * literal that is a whole number (TypeBox types `Type.Literal(1)` as `number`) is an `integer`, so generated
 * code gets an integer type (Go `int`, Java `Integer`) rather than a float for a count.
 */
function withEnums(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withEnums);
  if (value === null || typeof value !== 'object') return value;
  const { anyOf, ...rest } = value as { anyOf?: unknown[] } & Record<string, unknown>;
  const choices = Array.isArray(anyOf) ? anyOf as Array<Record<string, unknown>> : [];
  const type = choices[0]?.type;
  if (choices.length > 0 && typeof type === 'string' && choices.every((c) => c !== null && typeof c === 'object' && c.type === type && 'const' in c && Object.keys(c).length === 2)) {
    return withWholeNumbers({ type, enum: choices.map((c) => c.const), ...withEnums(rest) as object });
  }
  return withWholeNumbers(Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withEnums(v)])));
}

function withWholeNumbers(schema: Record<string, unknown>): Record<string, unknown> {
  if (schema.type !== 'number') return schema;
  const values = 'const' in schema ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : [];
  return values.length > 0 && values.every((v) => Number.isInteger(v)) ? { ...schema, type: 'integer' } : schema;
}

/** The OpenAPI 3.1 document, generated from the same route table and TypeBox schemas the server validates with. */
export function buildOpenApi(info: OpenApiInfo, routes: RouteDef[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = info.basePath + r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const params = [...parameters(r.params, 'path'), ...parameters(r.query, 'query')];
    // An API key is judged as the api-keys read model knows it: with a position, authentication waits for it first.
    const keyWait = r.auth.includes('key') ? ' An API key is judged once the api-keys read model has applied it too (a key whose creation answered before its read model had it works with that X-Event-Position).' : '';
    if (r.readModels) {
      params.push(
        { name: 'X-Min-Position', in: 'header' as never, required: false, description: `Wait (bounded) until the read model has applied this log position (from X-Event-Position); given with min_position, the later of the two.${keyWait}`, schema: { type: 'string', pattern: '^[0-9]{1,16}$' } as never },
        { name: 'min_position', in: 'query', required: false, description: 'Same as X-Min-Position', schema: { type: 'string', pattern: '^[0-9]{1,16}$' } as never },
      );
    } else if (keyWait) {
      params.push({ name: 'X-Min-Position', in: 'header' as never, required: false, description: `A log position (from X-Event-Position). A command does not wait for read models, but${keyWait.replace(' An', ' an')} Malformed values are ignored here.`, schema: { type: 'string' } as never });
    }
    params.push({ name: 'X-Request-Id', in: 'header' as never, required: false, description: 'Correlation id; echoed back and recorded on every event the request appends (a value not matching the pattern is replaced by a generated id)', schema: { type: 'string', pattern: REQUEST_ID_PATTERN } as never });
    const command = isCommand(r);
    if (command) {
      params.push({ name: 'Idempotency-Key', in: 'header' as never, required: false, description: 'Repeating a request with the same key never acts twice: a create returns the first result, except where that cannot be shown again (a new API key, whose secret is shown once: 409 `idempotency-replay`); on other commands the repeat writes nothing (see each operation for what it answers)', schema: { type: 'string', pattern: IDEMPOTENCY_KEY_PATTERN, description: '1-255 visible ASCII characters' } as never });
    }
    const responses: Record<string, unknown> = {};
    for (const [status, doc] of Object.entries(r.responses)) {
      const headers = command || doc.headers
        ? { ...(command ? { 'X-Event-Position': EVENT_POSITION } : {}), ...doc.headers }
        : undefined;
      responses[status] = {
        description: doc.description,
        ...(headers ? { headers } : {}),
        ...(doc.schema ? { content: { 'application/json': { schema: doc.schema } } } : {}),
      };
    }
    for (const status of [...new Set([...r.errors, ...impliedErrors(r)])].sort((a, b) => a - b)) {
      responses[String(status)] = {
        description: errorText(r, status),
        ...(errorHeaders(r, status) ? { headers: errorHeaders(r, status) } : {}),
        content: { 'application/problem+json': { schema: problemSchema(r.problemExtensions?.[status]) } },
      };
    }
    paths[path] ??= {};
    paths[path][r.method.toLowerCase()] = {
      operationId: r.operationId,
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      tags: [r.tag],
      // OpenAPI 3.1 lets any scheme's requirement name roles: an API key needs this scope (or `*`).
      security: [...r.auth.map((a) => ({ [SCHEME_NAMES[a]]: a === 'key' && r.scope ? [r.scope] : [] })), ...(info.anonymous && r.auth.length > 0 ? [{}] : [])],
      ...(r.scope && r.auth.includes('key') ? { 'x-required-scope': r.scope } : {}),
      ...(r.implemented === false ? { 'x-implemented': false } : {}),
      parameters: params,
      ...(r.body ? { requestBody: { required: true, description: BODY_RULES, 'x-max-body-bytes': BODY_LIMIT_BYTES, content: { 'application/json': { schema: r.body } } } } : {}),
      responses,
    };
  }
  const securitySchemes: Record<string, unknown> = {};
  for (const [kind, scheme] of Object.entries(info.securitySchemes)) {
    securitySchemes[SCHEME_NAMES[kind as AuthKind]] = { type: 'http', scheme: 'bearer', ...scheme };
  }
  return {
    openapi: '3.1.0',
    info: { title: info.title, version: info.version, description: info.description },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    paths: withEnums(paths),
    components: { schemas: { Problem: ProblemSchema }, securitySchemes },
  };
}

import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { toProblemError } from '../../api/http/app.js';
import { problemTypesTable } from '../../api/http/openapi.js';
import { PROBLEM_BASE, PROBLEM_TYPES, ProblemError, type ProblemSlug } from '../../api/http/problem.js';
import { DomainError, type DomainErrorKind } from '../../domain/shared/decider.js';
import { DuplicateEventIdError, EventStoreTimeoutError, StorageFullError, WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import { InvalidCursorError } from '../../infra/readstore/port.js';
import { ConsistencyTimeoutError } from '../../projections/runner.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const catalogue = PROBLEM_TYPES as Record<string, { statuses: readonly number[]; meaning: string }>;

function sources(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? sources(path) : path.endsWith('.ts') ? [path] : [];
  });
}

t.test('every problem the code builds is in the catalogue, with its status, and every catalogued type is built somewhere', async (t) => {
  // The compiler checks this already (ProblemError's slug and status are typed against PROBLEM_TYPES); this
  // test also fails when it runs without a type check, and finds catalogue entries nothing answers any more.
  // Problems are built as `new ProblemError(status, 'slug', …)` or as `[status, 'slug']` pairs in the tables
  // that choose one (api/http/app.ts).
  const built = new Map<string, Set<number>>();
  for (const file of ['api', 'commands', 'domain', 'infra', 'workers', 'ops', 'projections'].flatMap(sources)) {
    const text = readFileSync(join(root, file), 'utf8');
    if (!/\bProblem(Error|Choice)\b/.test(text)) continue;
    for (const [, status, slug] of text.matchAll(/\b([1-5]\d\d),\s*'([a-z][a-z0-9-]*)'/g)) {
      t.ok(catalogue[slug!]?.statuses.includes(Number(status)), `${file}: ${status} ${slug} is catalogued with that status`);
      built.set(slug!, (built.get(slug!) ?? new Set()).add(Number(status)));
    }
  }
  for (const [slug, { statuses }] of Object.entries(catalogue)) {
    t.strictSame([...(built.get(slug) ?? [])].sort(), [...statuses].sort(), `${slug}: built with each of its statuses`);
  }
});

t.test('errors thrown below the API become catalogued problems', async (t) => {
  const kinds = { not_found: true, conflict: true, invalid: true, forbidden: true, not_implemented: true, idempotency_mismatch: true } satisfies Record<DomainErrorKind, true>;
  const thrown: unknown[] = [
    ...Object.keys(kinds).map((kind) => new DomainError(kind as DomainErrorKind, `a ${kind}`)),
    new WrongExpectedVersionError('s', 1, 2),
    new DuplicateEventIdError('id', 's'),
    new StorageFullError('disk full'),
    new EventStoreTimeoutError('append', 's', 10_000),
    new ConsistencyTimeoutError('agents', 5, 4),
    new InvalidCursorError(),
    new Error('anything else'),
  ];
  for (const error of thrown) {
    const problem = toProblemError(error).toProblem('req-1');
    const slug = problem.type.slice(PROBLEM_BASE.length);
    t.ok(problem.type.startsWith(PROBLEM_BASE) && catalogue[slug]?.statuses.includes(problem.status), `${(error as Error).name}: ${problem.status} ${slug}`);
  }
  t.strictSame(Object.keys(kinds).map((kind) => toProblemError(new DomainError(kind as DomainErrorKind, 'x')).slug),
    ['not-found', 'conflict', 'invalid', 'forbidden', 'not-implemented', 'idempotency-mismatch'], 'a domain error\'s slug is its kind with hyphens');
});

t.test('every catalogued type has its status\'s reason phrase as title, not a generic "Error"', async (t) => {
  for (const [slug, { statuses }] of Object.entries(catalogue)) {
    for (const status of statuses) {
      const { title } = new ProblemError(status as never, slug as ProblemSlug, 'x').toProblem('req-1');
      t.not(title, 'Error', `${status} ${slug}: ${title}`);
    }
  }
  t.equal(toProblemError(new StorageFullError('disk full')).toProblem('req-1').title, 'Insufficient Storage', '507 storage-full (RFC 4918 §11.5)');
});

t.test('an event store that did not answer in time: 503 event-store-unavailable with Retry-After; a write\'s outcome is unknown', async (t) => {
  const append = toProblemError(new EventStoreTimeoutError('append', 'config-p', 10_000));
  t.match(append.toProblem('req-1'), { type: `${PROBLEM_BASE}event-store-unavailable`, status: 503, title: 'Service Unavailable', detail: /whether this request's changes were written is unknown; retrying it with the same Idempotency-Key is safe/ });
  t.strictSame(append.extra.headers, { 'Retry-After': '5' }, 'Retry-After: 5 s');
  t.notMatch(append.toProblem('req-1'), { stream: String }, 'the stream\'s name is not told to the client');
  const read = toProblemError(new EventStoreTimeoutError('readStream', 'config-p', 10_000));
  t.match(read.toProblem('req-1'), { type: `${PROBLEM_BASE}event-store-unavailable`, status: 503, detail: 'the event store did not answer in time; retry later' });
  t.strictSame(read.extra.headers, { 'Retry-After': '5' }, 'Retry-After: 5 s');
});

t.test('README lists the catalogue', async (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  t.ok(readme.includes(problemTypesTable()), 'README\'s table under "Problem types" is problemTypesTable() (api/http/openapi.ts) verbatim');
});

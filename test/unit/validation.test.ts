import t from 'tap';
import Type from 'typebox';
import { Settings } from 'typebox/system';
import { ProblemError } from '../../api/http/problem.js';
import { MAX_SCHEMA_ERRORS, nameErrors, Validator, type Location } from '../../api/http/validation.js';
import { ScopeQuery, SearchBody, StoreMemoryBody } from '../../api/memory/schemas.js';
import { CreateAgentBody } from '../../api/platform/agents/schemas.js';
import { CreateApiKeyBody } from '../../api/platform/keys/schemas.js';
import { CreateProjectBody } from '../../api/platform/projects/schemas.js';

/** The problem's `errors[]` for a value the validator refuses (the test fails if it accepts it). */
function errorsOf(schema: ConstructorParameters<typeof Validator>[0], value: unknown, location: Location = 'body', convert = false) {
  try {
    new Validator(schema, location, convert).parse(value);
  } catch (error) {
    if (error instanceof ProblemError && error.status === 400) return error.extra.errors ?? [];
    throw error;
  }
  throw new Error('the value passed validation');
}

const scope = { agent: 'a', user: 'u' };
const fields = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`f${i}`, i]));
const names = (n: number) => Array.from({ length: n }, (_, i) => `f${i}`);

t.test('unknown fields are one error per object, however many, and never crowd out the other errors', async (t) => {
  // TypeBox's default cap (8) was spent on one hidden error per unknown field: 8 of them left `errors: []`.
  t.strictSame(errorsOf(StoreMemoryBody, { scope, text: 'x', ...fields(9) }), [
    { location: 'body', message: `unknown fields: ${names(9).join(', ')}`, value: names(9) },
  ], 'nine at the top level');
  t.strictSame(errorsOf(StoreMemoryBody, { scope: { ...scope, ...fields(9) }, text: 'x' }), [
    { location: 'body.scope', message: `unknown fields: ${names(9).join(', ')}`, value: names(9) },
  ], 'nine in a nested object');
  t.strictSame(errorsOf(ScopeQuery, { ...scope, ...Object.fromEntries(names(9).map((n) => [n, 'x'])) }, 'query', true), [
    { location: 'query', message: `unknown parameters: ${names(9).join(', ')}`, value: names(9) },
  ], 'nine in the query');
  t.strictSame(errorsOf(ScopeQuery, { agent: 'a' }, 'query', true), [
    { location: 'query', message: 'missing required parameter: user' },
  ], 'the query\'s members are parameters, as on a route that takes none');
  t.strictSame(errorsOf(StoreMemoryBody, { scope, text: 5, session: 5, ...fields(4) }), [
    { location: 'body', message: `unknown fields: ${names(4).join(', ')}`, value: names(4) },
    { location: 'body.text', message: 'must be string', value: 5 },
    { location: 'body.session', message: 'must be a string or null', value: 5 },
  ], 'four unknown fields and two bad values: all three reported');
  t.strictSame(errorsOf(StoreMemoryBody, { scope: { agent: 'a', 'x/y~z': 1 }, text: 'x' }), [
    { location: 'body.scope', message: 'missing required field: user' },
    { location: 'body.scope', message: 'unknown field: x/y~z', value: ['x/y~z'] },
  ], 'a name with "/" and "~" as sent');
});

t.test(`at most ${MAX_SCHEMA_ERRORS} schema errors are gathered, and a last entry says when there were more`, async (t) => {
  const many = errorsOf(StoreMemoryBody, { scope, text: 5, ...fields(MAX_SCHEMA_ERRORS + 10) });
  t.strictSame(many, [
    { location: 'body', message: `unknown fields: ${names(MAX_SCHEMA_ERRORS).join(', ')}`, value: names(MAX_SCHEMA_ERRORS) },
    { location: 'body', message: `more errors not listed: validation stops after ${MAX_SCHEMA_ERRORS} schema errors` },
  ]);
  const below = errorsOf(StoreMemoryBody, { scope, text: 5, ...fields(10) });
  t.notOk(below.some((e) => /more errors/.test(e.message)), 'no such entry when every error is listed');
  t.equal(Settings.Get().maxErrors, 8, 'TypeBox\'s process-wide cap is left as it was');
});

t.test('a value outside a union is one error saying what is allowed', async (t) => {
  const modes = 'must be one of "lexical", "semantic", "hybrid"';
  // null is no mode (left out), as every optional body field's null.
  for (const mode of [5, 'fuzzy', true]) {
    t.strictSame(errorsOf(SearchBody, { scope, query: 'q', mode }), [{ location: 'body.mode', message: modes, value: mode }], `mode ${JSON.stringify(mode)}`);
  }
  t.strictSame(errorsOf(CreateApiKeyBody, { scopes: ['agents:read', 5] }), [
    { location: 'body.scopes.1', message: 'must be one of "*", "agents:read", "agents:write", "config:read", "config:write", "projects:read"', value: 5 },
  ], 'an array item of the wrong type');
  for (const session of [5, true, {}]) {
    t.strictSame(errorsOf(StoreMemoryBody, { scope, text: 'x', session }), [{ location: 'body.session', message: 'must be a string or null', value: session }], `session ${JSON.stringify(session)}`);
  }
  for (const expires of ['tomorrow', 5, false]) {
    t.strictSame(errorsOf(CreateApiKeyBody, { expires_at: expires }), [
      { location: 'body.expires_at', message: 'must be a date-time string (RFC 3339) or null', value: expires },
    ], `expires_at ${JSON.stringify(expires)}`);
  }
  const other = Type.Object({ link: Type.Union([Type.String({ format: 'uri' }), Type.Null()]), level: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]) });
  t.strictSame(errorsOf(other, { link: 'not a uri', level: 'high' }), [
    { location: 'body.link', message: 'must be a string of format "uri" or null', value: 'not a uri' },
    { location: 'body.level', message: 'must be an integer or null', value: 'high' },
  ], 'other formats and types are named too');
  t.strictSame(errorsOf(other, { link: null, level: 0 }), [{ location: 'body.level', message: 'must be >= 1', value: 0 }], 'a number under the bound of the integer branch: that bound alone');
  const long = 'x'.repeat(129);
  t.strictSame(errorsOf(StoreMemoryBody, { scope, text: 'x', session: long }), [
    { location: 'body.session', message: 'must be at most 128 bytes (is 129)', value: '129 bytes' },
  ], 'a string over the bound of the string branch: that bound alone (its length given, not the value; in bytes, the limit\'s unit)');
  const label = Type.Object({ label: Type.Union([Type.String({ maxLength: 128 }), Type.Null()]) });
  t.strictSame(errorsOf(label, { label: long }), [
    { location: 'body.label', message: 'must not have more than 128 characters', value: '129 characters' },
  ], 'a limit in characters is said in characters');
});

t.test('a value over a length limit is given by its size, not echoed (a text may be up to the 1 MiB body limit)', async (t) => {
  const huge = '😀'.repeat(300_000);
  t.strictSame(errorsOf(StoreMemoryBody, { scope, text: huge }), [{ location: 'body.text', message: 'must be at most 8192 bytes (is 1200000)', value: '1200000 bytes' }]);
  t.strictSame(errorsOf(Type.Object({ bio: Type.String({ maxLength: 8000 }) }), { bio: huge }), [{ location: 'body.bio', message: 'must not have more than 8000 characters', value: '300000 characters' }]);
  t.strictSame(errorsOf(Type.Object({ tags: Type.Array(Type.String(), { maxItems: 2 }) }), { tags: ['a', 'b', 'c'] }), [{ location: 'body.tags', message: 'must not have more than 2 items', value: '3 items' }]);
});

t.test('a name over its limit is given by its size too, not echoed (agent, project and key names)', async (t) => {
  t.strictSame(nameErrors('body.name', ` ${'n'.repeat(128)} `, 128), [], 'exactly at the limit after trimming');
  t.strictSame(nameErrors('body.name', 'n'.repeat(129), 128),
    [{ location: 'body.name', message: 'must not have more than 128 characters (after trimming and NFC normalisation)', value: '129 characters' }], 'one past it');
  t.strictSame(nameErrors('body.name', '😀'.repeat(101), 100).map((e) => e.value), ['101 characters'], 'counted in characters, not UTF-16 units');
  // Past even the looser bound the schema puts on the text sent (room for trimming and NFC): the name's own limit is named.
  for (const [schema, body, max, sent] of [
    [CreateAgentBody, { name: 'n'.repeat(513) }, 128, 513], [CreateProjectBody, { name: 'n'.repeat(801) }, 200, 801], [CreateApiKeyBody, { name: 'n'.repeat(401) }, 100, 401],
  ] as const) {
    t.strictSame(errorsOf(schema, body), [{ location: 'body.name', message: `must not have more than ${max} characters (after trimming and NFC normalisation)`, value: `${sent} characters` }], `${max}: not the schema's ${4 * max}`);
  }
});

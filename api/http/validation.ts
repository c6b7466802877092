import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { Settings } from 'typebox/system';
import { nameForm, nameProblems, rawNameLength, unpairedSurrogate } from '../../domain/shared/text.js';
import { badRequest, type ProblemFieldError } from './problem.js';

export type Location = 'body' | 'query' | 'path' | 'header';

/**
 * The most schema errors gathered for one value: a guard against values built to make huge error lists.
 * TypeBox's own cap (`maxErrors`, 8) is too low for a problem that lists every error: each unknown field
 * spends one on a `boolean` error, so 8 unknown fields left nothing for the rest of the body.
 */
export const MAX_SCHEMA_ERRORS = 50;

/** A schema compiled once at start-up, with its error translation to problem `errors[]`. */
export class Validator<T = unknown> {
  private readonly compiled;
  constructor(readonly schema: TSchema, private readonly location: Location, private readonly convert = false) {
    this.compiled = Compile(schema);
  }

  /** Returns the (converted) value or throws a 400 problem listing every error (a last entry says when there were more). */
  parse(input: unknown): T {
    const value = this.convert ? convertStrings(this.schema, input) : input;
    if (this.compiled.Check(value)) return value as T;
    const found = this.errors(value);
    const errors = explain(found, this.schema, value, this.location);
    if (found.length >= MAX_SCHEMA_ERRORS) {
      errors.push({ location: this.location, message: `more errors not listed: validation stops after ${MAX_SCHEMA_ERRORS} schema errors` });
    }
    throw badRequest(`invalid ${this.location === 'path' ? 'path parameter' : this.location}`, errors);
  }

  /** TypeBox's cap is process-wide: raised only while gathering (synchronously, so no other validation sees it). */
  private errors(value: unknown): SchemaError[] {
    const previous = Settings.Get().maxErrors;
    Settings.Set({ maxErrors: MAX_SCHEMA_ERRORS });
    try {
      return [...this.compiled.Errors(value)];
    } finally {
      Settings.Set({ maxErrors: previous });
    }
  }
}

/**
 * Query and path values arrive as strings: convert those whose schema wants a number or boolean, but only
 * when the text is exactly such a value ("5.5" stays a string for an integer, so it fails validation).
 */
function convertStrings(schema: TSchema, input: unknown): unknown {
  const properties = (schema as { properties?: Record<string, { type?: string }> }).properties;
  if (!properties || input === null || typeof input !== 'object') return input;
  const out: Record<string, unknown> = { ...(input as Record<string, unknown>) };
  for (const [name, raw] of Object.entries(out)) {
    const type = properties[name]?.type;
    if (typeof raw !== 'string') continue;
    if (type === 'integer' && /^[+-]?\d{1,15}$/.test(raw)) out[name] = Number(raw);
    else if (type === 'number' && /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(raw)) out[name] = Number(raw);
    else if (type === 'boolean' && (raw === 'true' || raw === 'false')) out[name] = raw === 'true';
  }
  return out;
}

type SchemaError = { keyword: string; schemaPath: string; instancePath: string; params: Record<string, unknown>; message: string };

/**
 * Schema errors become field errors, one per unknown-field list and one per union, in the order found. TypeBox
 * reports an unknown field twice: a `boolean` error at the field (its `additionalProperties: false` schema) and,
 * after all fields of the object, one `additionalProperties` error listing them; when the cap cuts the list, only
 * the first may be there, so both count. A union reports each branch's errors and then `anyOf`.
 */
function explain(found: SchemaError[], schema: TSchema, root: unknown, location: Location): ProblemFieldError[] {
  const groups = new Map<unknown, SchemaError[]>();
  for (const e of found) {
    const object = objectWithUnknownField(e);
    const union = unionOf(e);
    const key = object !== undefined ? `unknown ${object}` : union !== undefined ? `union ${union} ${e.instancePath}` : e;
    groups.set(key, [...(groups.get(key) ?? []), e]);
  }
  return [...groups.values()].flatMap((errors) => {
    if (objectWithUnknownField(errors[0]!) !== undefined) return [unknownFields(errors, location)];
    if (unionOf(errors[0]!) !== undefined) return explainUnion(errors, schema, root, location);
    return errors.map((e) => describe(e, root, location, schema));
  });
}

/** The instance path of the object an unknown-field error is about, or undefined for any other error. */
function objectWithUnknownField(e: SchemaError): string | undefined {
  if (e.keyword === 'additionalProperties') return e.instancePath;
  return e.keyword === 'boolean' && e.schemaPath.endsWith('/additionalProperties') ? e.instancePath.slice(0, e.instancePath.lastIndexOf('/')) : undefined;
}

/** The schema path of the union an error is about: the union's own, or the one a branch's error is in. */
const unionOf = (e: SchemaError) => (e.keyword === 'anyOf' ? e.schemaPath : /^(.*)\/anyOf\/\d+(?:\/|$)/.exec(e.schemaPath)?.[1]);

function unknownFields(errors: SchemaError[], location: Location): ProblemFieldError {
  const names = new Set(errors.flatMap((e) => e.keyword === 'boolean'
    ? [unescapePointer(e.instancePath.slice(e.instancePath.lastIndexOf('/') + 1))]
    : (e.params.additionalProperties as string[] | undefined) ?? []));
  const instancePath = objectWithUnknownField(errors[0]!)!;
  return describe({ keyword: 'additionalProperties', schemaPath: '', instancePath, params: { additionalProperties: [...names] }, message: '' }, undefined, location);
}

/**
 * A value that fits no branch of a union fails each branch and then the union ("must be string", "must be
 * equal to constant", "must be null", "must match a schema in anyOf"): one error says what is allowed instead,
 * `must be one of "lexical", "semantic", "hybrid"` or `must be a date-time string (RFC 3339) or null`. A value
 * of a branch's type that breaks one of its bounds (a session label too long) gets that bound's error alone.
 */
function explainUnion(errors: SchemaError[], schema: TSchema, root: unknown, location: Location): ProblemFieldError[] {
  const { instancePath } = errors[0]!;
  const unionPath = unionOf(errors[0]!)!;
  const branches = (pointerGet(schema, unionPath.replace(/^#/, '')) as { anyOf?: unknown[] } | undefined)?.anyOf ?? [];
  const choices = branches.map(choice);
  if (branches.length === 2 && choices.includes('null') && choices.includes(undefined)) return explainNullable(errors, branches, unionPath, root, location, schema);
  if (choices.length === 0 || choices.includes(undefined)) return errors.map((e) => describe(e, root, location, schema));
  const bounds = errors.filter((e) => !['anyOf', 'type', 'const', 'format'].includes(e.keyword));
  if (bounds.length > 0) return bounds.map((e) => describe(e, root, location, schema));
  const literals = branches.every((b) => 'const' in (b as object) || (b as { type?: unknown }).type === 'null');
  const message = literals ? `must be one of ${choices.join(', ')}` : `must be ${choices.join(' or ')}`;
  return [describe({ keyword: 'enum', schemaPath: unionPath, instancePath, params: {}, message }, root, location)];
}

/**
 * An object or array that may also be null (an optional field a client may send as null): a value that is not null
 * gets the errors of the object or array alone, as if the field could not be null (`must be a number` at
 * `body.big5.openness`), and a value of another type one error, `must be an object or null`. The union's own
 * "must be null" and "must match a schema in anyOf" say nothing more; where the branch's errors are deeper (another
 * group), this group has none.
 */
function explainNullable(errors: SchemaError[], branches: unknown[], unionPath: string, root: unknown, location: Location, schema: TSchema): ProblemFieldError[] {
  const other = branches.findIndex((b) => (b as { type?: unknown }).type !== 'null');
  const within = `${unionPath}/anyOf/${other}`;
  const own = errors.filter((e) => e.schemaPath === within || e.schemaPath.startsWith(`${within}/`));
  const wrongType = own.find((e) => e.keyword === 'type' && (e.schemaPath === within || e.schemaPath === `${within}/type`));
  if (wrongType) {
    const name = ({ object: 'an object', array: 'an array' } as Record<string, string>)[String((branches[other] as { type?: unknown }).type)] ?? 'a value of the documented shape';
    return [describe({ ...wrongType, keyword: 'enum', message: `must be ${name} or null` }, root, location)];
  }
  return own.map((e) => describe(e, root, location, schema));
}

const TYPE_NAMES: Record<string, string> = { string: 'a string', integer: 'an integer', number: 'a number', boolean: 'a boolean', null: 'null' };

/** How a branch of a union is named in its error, or undefined for a branch too complex to name (an object). */
function choice(branch: unknown): string | undefined {
  const { const: value, type, format } = branch as { const?: unknown; type?: string; format?: string };
  if (value !== undefined) return JSON.stringify(value);
  if (type === 'string' && format === 'date-time') return 'a date-time string (RFC 3339)';
  if (type === 'string' && format) return `a string of format "${format}"`;
  return type === undefined ? undefined : TYPE_NAMES[type];
}

const unescapePointer = (segment: string) => segment.replace(/~1/g, '/').replace(/~0/g, '~');

function pointerGet(value: unknown, pointer: string): unknown {
  let current = value;
  for (const raw of pointer.split('/').slice(1)) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[unescapePointer(raw)];
  }
  return current;
}

/**
 * A string schema's limit in UTF-8 bytes (the spec's memory texts, queries, sessions, personality), published as
 * `x-max-bytes` beside the `maxLength` of the same number that it implies: a string over that many characters is
 * over that many bytes too, and is refused in bytes, as one a few characters shorter but of more bytes is.
 */
export const MAX_BYTES = 'x-max-bytes';

/**
 * A name's limit in characters of the form it is stored in (nameForm: trimmed, NFC), published as
 * `x-max-name-characters` beside the looser `maxLength` of the text sent (rawNameLength), which leaves room for what
 * trimming and normalisation take away: a name past even that bound is refused with the name's own limit, not the
 * bound's. Spread into a string schema: `Type.String({ ...nameLength(128), description })`.
 */
export const MAX_NAME_CHARACTERS = 'x-max-name-characters';
export const nameLength = (max: number) => ({ minLength: 1, maxLength: rawNameLength(max), [MAX_NAME_CHARACTERS]: max });

function describe(e: SchemaError, root: unknown, location: Location, schema?: TSchema): ProblemFieldError {
  const path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (e.keyword === 'additionalProperties') {
    const names = (e.params.additionalProperties as string[] | undefined) ?? [];
    return { location: join(location, path), message: `unknown ${nounOf(location)}${names.length > 1 ? 's' : ''}: ${names.join(', ')}`, value: names };
  }
  if (e.keyword === 'required') {
    const names = (e.params.requiredProperties as string[] | undefined) ?? [];
    return { location: join(location, path), message: `missing required ${nounOf(location)}${names.length > 1 ? 's' : ''}: ${names.join(', ')}` };
  }
  const value = pointerGet(root, e.instancePath);
  // An empty string where one character is the least: said plainly rather than as "fewer than 1 characters".
  if (e.keyword === 'minLength' && value === '' && e.params.limit === 1) return { location: join(location, path), message: 'must not be empty', value };
  const limited = e.keyword === 'maxLength' && schema ? pointerGet(schema, e.schemaPath.replace(/^#/, '')) as Record<string, unknown> | undefined : undefined;
  const [maxBytes, maxName] = [limited?.[MAX_BYTES], limited?.[MAX_NAME_CHARACTERS]];
  if (typeof maxBytes === 'number' && typeof value === 'string') return byteLimit(join(location, path), value, maxBytes)!;
  if (typeof maxName === 'number' && typeof value === 'string') {
    return { location: join(location, path), message: `must not have more than ${maxName} characters (after trimming and NFC normalisation)`, value: tooLong(e.keyword, value) };
  }
  return { location: join(location, path), message: e.message, value: tooLong(e.keyword, value) ?? value };
}

/**
 * What a value over a length limit is said to be: its size, not itself (as byteLimit does), so that the problem
 * does not echo a body of up to 1 MiB.
 */
function tooLong(keyword: string, value: unknown): string | undefined {
  if (keyword === 'maxLength' && typeof value === 'string') return `${[...value].length} characters`;
  if (keyword === 'maxItems' && Array.isArray(value)) return `${value.length} items`;
  return undefined;
}

const join = (location: string, path: string) => (path ? `${location}.${path}` : location);
/** What a member is called where it is: a body has fields, a query string and a path parameters (as routes.ts says of a query on a route that takes none), a request headers. */
const nounOf = (location: Location) => (location === 'body' ? 'field' : location === 'header' ? 'header' : 'parameter');

/** Limits the spec states in bytes (UTF-8), which JSON Schema's maxLength (characters) cannot express. */
export function byteLimit(location: string, value: string | undefined, max: number): ProblemFieldError | undefined {
  if (value === undefined) return undefined;
  const bytes = Buffer.byteLength(value, 'utf8');
  return bytes > max ? { location, message: `must be at most ${max} bytes (is ${bytes})`, value: `${bytes} bytes` } : undefined;
}

/** Text must be well-formed Unicode (see `unpairedSurrogate`): the problem names the first lone surrogate. */
export function wellFormed(location: string, value: string | null | undefined): ProblemFieldError | undefined {
  const problem = typeof value === 'string' ? unpairedSurrogate(value) : undefined;
  return problem && { location, ...problem };
}

export function nonBlank(location: string, value: string | undefined): ProblemFieldError | undefined {
  return value !== undefined && value.trim() === '' ? { location, message: 'must not be empty or only whitespace', value } : undefined;
}

/** Throws one 400 problem for all the given checks that failed. */
export function check(...results: Array<ProblemFieldError | undefined>): void {
  const errors = results.filter((r): r is ProblemFieldError => r !== undefined);
  if (errors.length > 0) throw badRequest('invalid body', errors);
}

/**
 * The field errors for a name sent as `raw`, if one was (of an agent, a project or an API key): the
 * deciders' rules on the form it is stored in, each naming the offending code point or else the name sent.
 */
export const nameErrors = (location: string, raw: string | undefined, max: number): ProblemFieldError[] =>
  raw === undefined ? [] : nameProblems(nameForm(raw), max).map(({ message, value }) => ({ location, message, value: value ?? raw }));

import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { nameForm, nameProblems, unpairedSurrogate } from '../../domain/shared/text.js';
import { badRequest, type ProblemFieldError } from './problem.js';

export type Location = 'body' | 'query' | 'path' | 'header';

/** A schema compiled once at start-up, with its error translation to problem `errors[]`. */
export class Validator<T = unknown> {
  private readonly compiled;
  constructor(readonly schema: TSchema, private readonly location: Location, private readonly convert = false) {
    this.compiled = Compile(schema);
  }

  /** Returns the (converted) value or throws a 400 problem listing every error. */
  parse(input: unknown): T {
    const value = this.convert ? convertStrings(this.schema, input) : input;
    if (this.compiled.Check(value)) return value as T;
    const errors: ProblemFieldError[] = [];
    for (const e of collapseChoices([...this.compiled.Errors(value)])) {
      if (e.keyword === 'boolean') continue; // additionalProperties: false reports each field twice
      errors.push(describe(e, value, this.location));
    }
    throw badRequest(`invalid ${this.location === 'path' ? 'path parameter' : this.location}`, errors);
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
 * A value outside a choice of constants (`Type.Union` of literals, perhaps with null) fails each branch and
 * then the union: one "must be equal to constant" per allowed value and "must match a schema in anyOf",
 * none of them naming a value. Those become one error listing what is allowed.
 */
function collapseChoices(errors: SchemaError[]): SchemaError[] {
  const dropped = new Set<SchemaError>();
  const replaced = new Map<SchemaError, SchemaError>();
  for (const union of errors) {
    if (union.keyword !== 'anyOf') continue;
    const branches = errors.filter((e) => e !== union && e.instancePath === union.instancePath && e.schemaPath.startsWith(`${union.schemaPath}/anyOf/`));
    const choices = branches.map((e) => (e.keyword === 'const' ? JSON.stringify(e.params.allowedValue) : e.keyword === 'type' && e.params.type === 'null' ? 'null' : undefined));
    if (branches.length === 0 || choices.includes(undefined)) continue;
    for (const b of branches) dropped.add(b);
    replaced.set(union, { ...union, keyword: 'enum', message: `must be one of ${choices.join(', ')}` });
  }
  return errors.filter((e) => !dropped.has(e)).map((e) => replaced.get(e) ?? e);
}

function pointerGet(value: unknown, pointer: string): unknown {
  let current = value;
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[key];
  }
  return current;
}

function describe(e: SchemaError, root: unknown, location: Location): ProblemFieldError {
  const path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (e.keyword === 'additionalProperties') {
    const names = (e.params.additionalProperties as string[] | undefined) ?? [];
    return { location: join(location, path), message: `unknown field${names.length > 1 ? 's' : ''}: ${names.join(', ')}`, value: names };
  }
  if (e.keyword === 'required') {
    const names = (e.params.requiredProperties as string[] | undefined) ?? [];
    return { location: join(location, path), message: `missing required field${names.length > 1 ? 's' : ''}: ${names.join(', ')}` };
  }
  return { location: join(location, path), message: e.message, value: pointerGet(root, e.instancePath) };
}

const join = (location: string, path: string) => (path ? `${location}.${path}` : location);

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

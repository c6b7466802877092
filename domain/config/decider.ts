import { hash } from 'node:crypto';
import { DomainError, isRepeatable, type Decider, type DomainEvent } from '../shared/decider.js';
import { unpairedSurrogate } from '../shared/text.js';

export const CONFIG_STREAM_PREFIX = 'config-';
export const configStream = (projectId: string) => `${CONFIG_STREAM_PREFIX}${projectId}`;

/** `request_key`: the request that made the change (its Idempotency-Key, or a fresh id), so a repeat of it is recognised; absent in older logs. */
export type ConfigValueSet = DomainEvent<'ConfigValueSet', { project_id: string; key: string; value: unknown; set_at: string; request_key?: string }>;
export type ConfigValueDeleted = DomainEvent<'ConfigValueDeleted', { project_id: string; key: string; deleted_at: string; request_key?: string }>;
/** A deletion sent with an Idempotency-Key of a key that was not set (answered 404): recorded so that its repeats answer 404 too. */
export type ConfigValueDeletionRefused = DomainEvent<'ConfigValueDeletionRefused', { project_id: string; key: string; refused_at: string; request_key: string }>;
export type ConfigEvent = ConfigValueSet | ConfigValueDeleted | ConfigValueDeletionRefused;

export type SetConfigValue = { type: 'SetConfigValue'; data: { project_id: string; key: string; value: unknown } };
export type DeleteConfigValue = { type: 'DeleteConfigValue'; data: { project_id: string; key: string } };
export type ConfigCommand = SetConfigValue | DeleteConfigValue;

/** How many requests sent with an Idempotency-Key a project's configuration remembers for repeats. */
export const MAX_REMEMBERED_CONFIG_REQUESTS = 256;

/** What a remembered request did (its command), so only a repeat of the same request is recognised. */
type RememberedChange = { type: ConfigEvent['type']; key: string; valueHash?: string };
/**
 * SHA-256 of a value's JSON text, and the text's length in UTF-8 bytes: values reach 1 MiB, so the state keeps only
 * these. The last value measured is remembered: a PUT measures its value when it is decided, and again (the same
 * parsed value, never mutated) when its event is evolved into the state.
 */
let lastMeasured: { value: unknown; hash: string; bytes: number } | undefined;
function measure(value: unknown): { hash: string; bytes: number } {
  if (lastMeasured !== undefined && lastMeasured.value === value) return lastMeasured;
  const text = JSON.stringify(value);
  lastMeasured = { value, hash: hash('sha256', text, 'base64'), bytes: Buffer.byteLength(text) };
  return lastMeasured;
}
export const valueHash = (value: unknown): string => measure(value).hash;

/**
 * A project's configuration is at most MAX_CONFIG_KEYS keys and MAX_CONFIG_BYTES of values (their JSON texts, UTF-8):
 * `GET /config` answers all of it in one document, which a key holder could otherwise grow without bound (a thousand
 * values of 1 MiB each) until building that answer exhausts the server's memory. As remote-configuration services
 * bound theirs (Firebase Remote Config: 3,000 parameters; AWS AppConfig: 2 MB per configuration).
 */
export const MAX_CONFIG_KEYS = 1000;
export const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/**
 * Config keys: 1-256 of `A-Z a-z 0-9 _ . : -`, other than "." and ".." (URL clients resolve those as path segments).
 * Written without a lookahead (published in the OpenAPI document: RE2-based validators, such as Go's, refuse one):
 * a key not starting with a dot, or a dot and a character other than a dot, or two dots and at least one more.
 */
export const CONFIG_KEY_PATTERN = '^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,255}|\\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,254}|\\.\\.[A-Za-z0-9_.:-]{1,254})$';
const CONFIG_KEY = new RegExp(CONFIG_KEY_PATTERN);

/** The rules of a key and a value, whoever sends the command (the HTTP API reports them per field first). */
function requireValid(command: ConfigCommand): void {
  if (!CONFIG_KEY.test(command.data.key)) throw new DomainError('invalid', 'config key must be 1-256 of A-Z a-z 0-9 _ . : -, other than "." and ".."');
  // A value is a JSON value: undefined, a function, a symbol or a bigint has no JSON text, so it could be neither hashed nor stored.
  if (command.type === 'SetConfigValue' && ['undefined', 'function', 'symbol', 'bigint'].includes(typeof command.data.value)) {
    throw new DomainError('invalid', 'config value must be a JSON value');
  }
  const unstorable = command.type === 'SetConfigValue' ? unstorableAt(command.data.value) : undefined;
  if (unstorable !== undefined) throw new DomainError('invalid', `config value holds ${UNSTORABLE[unstorable.kind]} (at ${['value', ...unstorable.path].join('.')})`);
}

/** What unstorableAt finds. */
export type Unstorable = { path: Array<string | number>; kind: 'number' | 'text' | 'key' };
const UNSTORABLE: Record<Unstorable['kind'], string> = {
  number: 'a number too large for a 64-bit float', text: 'a string that is not well-formed Unicode (an unpaired surrogate)', key: 'a key that is not well-formed Unicode (an unpaired surrogate)',
};
const wellFormed = (text: string): boolean => unpairedSurrogate(text) === undefined;
/** What a value that is neither an object nor an array cannot be stored as: a number JSON cannot hold, a string that is not well-formed Unicode. */
const unstorableKind = (value: unknown): Unstorable['kind'] | undefined => {
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : 'number';
  return typeof value === 'string' && !wellFormed(value) ? 'text' : undefined;
};

/**
 * Where a value holds what cannot be stored as it is, and why, or undefined: a number that is not finite (JSON.parse
 * reads `1e400` as Infinity, which has no JSON text and would silently become `null`), or a string or an object's key
 * with an unpaired surrogate (`"\ud800"`, which JSON can carry escaped and UTF-8 stores such as MongoDB keep as U+FFFD,
 * so that two such keys can become one). The path's segments: [] for the value itself. A first walk only looks (values
 * reach 1 MiB, and this runs on every PUT); the path is built once something is found.
 */
export function unstorableAt(value: unknown): Unstorable | undefined {
  const stack: unknown[] = [value];
  let found = false;
  while (stack.length > 0 && !found) {
    const current = stack.pop();
    if (current === null || typeof current !== 'object') found = unstorableKind(current) !== undefined;
    // A loop, not push(...children): an array of a few hundred thousand numbers fits in 1 MiB, and that many arguments overflow the stack.
    else if (Array.isArray(current)) for (const child of current) stack.push(child);
    else for (const [key, child] of Object.entries(current)) {
      if (!wellFormed(key)) found = true;
      stack.push(child);
    }
  }
  return found ? pathToUnstorable(value, []) : undefined;
}

function pathToUnstorable(value: unknown, path: Array<string | number>): Unstorable | undefined {
  if (value === null || typeof value !== 'object') {
    const kind = unstorableKind(value);
    return kind === undefined ? undefined : { path, kind };
  }
  for (const [name, child] of Array.isArray(value) ? value.entries() : Object.entries(value)) {
    if (typeof name === 'string' && !wellFormed(name)) return { path: [...path, name], kind: 'key' };
    const found = pathToUnstorable(child, [...path, name]);
    if (found) return found;
  }
  return undefined;
}

const notFound = (key: string) => new DomainError('not_found', `config key ${key} not found`);

/** Setting `key` to a value of `bytes` keeps the configuration within MAX_CONFIG_KEYS and MAX_CONFIG_BYTES (a value replaced counts no more). */
function requireWithinLimits(state: ConfigState, key: string, bytes: number): void {
  const isNew = !state.values.has(key);
  if (isNew && state.values.size >= MAX_CONFIG_KEYS) {
    throw new DomainError('conflict', `the project's configuration holds ${state.values.size} keys, the most it may hold (${MAX_CONFIG_KEYS}): delete one before adding ${key}`);
  }
  const total = state.totalBytes - (state.bytes.get(key) ?? 0) + bytes;
  if (total > MAX_CONFIG_BYTES) {
    throw new DomainError('conflict', `the project's configuration would hold ${total} bytes of values, more than the ${MAX_CONFIG_BYTES} it may hold (each value counted as its JSON text, UTF-8)`);
  }
}

/**
 * Keys present, with the hash of their value so an unchanged PUT appends nothing (not the value: this state
 * is cached per project, and values of 1 MiB each would stay in memory); for each key the request that last
 * set or deleted it; and the last requests sent with an Idempotency-Key (`idem:` request
 * keys, at most MAX_REMEMBERED_CONFIG_REQUESTS, oldest forgotten first). A repeat of a remembered request
 * decides the same event again, whatever happened since, which the store recognises by its id and answers
 * with the first one's position.
 */
export type ConfigState = { values: Map<string, string>; bytes: Map<string, number>; totalBytes: number; changedBy: Map<string, string>; requests: Map<string, RememberedChange> };

function rememberRequest(state: ConfigState, requestKey: string, change: RememberedChange): void {
  state.requests.delete(requestKey);
  state.requests.set(requestKey, change);
  if (state.requests.size > MAX_REMEMBERED_CONFIG_REQUESTS) state.requests.delete(state.requests.keys().next().value!);
}

export const configDecider: Decider<ConfigState, ConfigCommand, ConfigEvent> = {
  initialState: () => ({ values: new Map(), bytes: new Map(), totalBytes: 0, changedBy: new Map(), requests: new Map() }),
  /** Its keys and remembered requests, for the command bus's cache (see Decider.size). */
  size: (state) => 1 + state.values.size + state.requests.size,
  decide(command, state, ctx): ConfigEvent[] {
    requireValid(command);
    const { key } = command.data;
    const remembered = state.requests.get(ctx.request_key);
    const hash = command.type === 'SetConfigValue' ? valueHash(command.data.value) : undefined;
    const repeat = state.changedBy.get(key) === ctx.request_key || (remembered !== undefined && remembered.key === key && (command.type === 'SetConfigValue'
      ? remembered.type === 'ConfigValueSet' && remembered.valueHash === hash
      : remembered.type === 'ConfigValueDeleted'));
    // A request sent with an Idempotency-Key that changes nothing, or is refused, is recorded all the same
    // (the value set again; the refusal), so that its repeats are recognised whatever changes later.
    switch (command.type) {
      case 'SetConfigValue':
        if (state.values.get(key) === hash && !repeat && !isRepeatable(ctx.request_key)) return [];
        // A repeat decides what it decided the first time, whatever the configuration holds since.
        if (!repeat) requireWithinLimits(state, key, measure(command.data.value).bytes);
        return [{ type: 'ConfigValueSet', data: { ...command.data, set_at: ctx.now, request_key: ctx.request_key } }];
      case 'DeleteConfigValue': {
        const refused = remembered?.type === 'ConfigValueDeletionRefused' && remembered.key === key;
        if (refused || (!state.values.has(key) && !repeat)) {
          if (!isRepeatable(ctx.request_key)) throw notFound(key);
          return [{ type: 'ConfigValueDeletionRefused', data: { ...command.data, refused_at: ctx.now, request_key: ctx.request_key } }];
        }
        return [{ type: 'ConfigValueDeleted', data: { ...command.data, deleted_at: ctx.now, request_key: ctx.request_key } }];
      }
      default: {
        const _exhaustive: never = command;
        throw new Error(`unknown command ${JSON.stringify(_exhaustive)}`);
      }
    }
  },
  // The map is updated in place (copying it per event would make a project with many keys quadratic).
  // Safe with the command bus: a state is only evolved from the newest cached state, and a failed append
  // drops that cache entry and reloads from the log.
  evolve(state, event) {
    // Total: an event type this version does not know (a newer version's) changes nothing here.
    if (event.type !== 'ConfigValueSet' && event.type !== 'ConfigValueDeleted' && event.type !== 'ConfigValueDeletionRefused') return state;
    if (event.type === 'ConfigValueDeletionRefused') {
      // Changes no value, nor which request last changed the key: only what a repeat of this request answers.
      if (isRepeatable(event.data.request_key)) rememberRequest(state, event.data.request_key, { type: event.type, key: event.data.key });
      return { ...state };
    }
    // Sizes are counted as the log holds them: a configuration over the limits (written before they existed) stays
    // readable, and only its growth is refused.
    const before = state.bytes.get(event.data.key) ?? 0;
    let totalBytes = state.totalBytes - before;
    if (event.type === 'ConfigValueSet') {
      const { hash: digest, bytes } = measure(event.data.value);
      state.values.set(event.data.key, digest);
      state.bytes.set(event.data.key, bytes);
      totalBytes += bytes;
    } else {
      state.values.delete(event.data.key);
      state.bytes.delete(event.data.key);
    }
    const requestKey = event.data.request_key;
    if (requestKey) state.changedBy.set(event.data.key, requestKey);
    else state.changedBy.delete(event.data.key);
    if (isRepeatable(requestKey)) {
      rememberRequest(state, requestKey, event.type === 'ConfigValueSet'
        ? { type: event.type, key: event.data.key, valueHash: state.values.get(event.data.key) }
        : { type: event.type, key: event.data.key });
    }
    return { values: state.values, bytes: state.bytes, totalBytes, changedBy: state.changedBy, requests: state.requests };
  },
  refusal: (event) => (event.type === 'ConfigValueDeletionRefused' ? notFound(event.data.key) : undefined),
};

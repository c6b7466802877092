import { createHash } from 'node:crypto';
import { DomainError, isRepeatable, type Decider, type DomainEvent } from '../shared/decider.js';

export const configStream = (projectId: string) => `config-${projectId}`;

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
 * SHA-256 of a value's JSON text: values reach 1 MiB, so the state keeps only this. The last value hashed
 * is remembered: a PUT hashes its value when it is decided, and again (the same parsed value, never
 * mutated) when its event is evolved into the state.
 */
let lastHashed: { value: unknown; hash: string } | undefined;
export function valueHash(value: unknown): string {
  if (lastHashed !== undefined && lastHashed.value === value) return lastHashed.hash;
  const hash = createHash('sha256').update(JSON.stringify(value)).digest('base64');
  lastHashed = { value, hash };
  return hash;
}

/** Config keys: 1-256 of `A-Z a-z 0-9 _ . : -`, other than "." and ".." (URL clients resolve those as path segments). */
export const CONFIG_KEY_PATTERN = '^(?!\\.\\.?$)[A-Za-z0-9_.:-]{1,256}$';
const CONFIG_KEY = new RegExp(CONFIG_KEY_PATTERN);

/** The rules of a key and a value, whoever sends the command (the HTTP API reports them per field first). */
function requireValid(command: ConfigCommand): void {
  if (!CONFIG_KEY.test(command.data.key)) throw new DomainError('invalid', 'config key must be 1-256 of A-Z a-z 0-9 _ . : -, other than "." and ".."');
  // A value is a JSON value: undefined, a function, a symbol or a bigint has no JSON text, so it could be neither hashed nor stored.
  if (command.type === 'SetConfigValue' && ['undefined', 'function', 'symbol', 'bigint'].includes(typeof command.data.value)) {
    throw new DomainError('invalid', 'config value must be a JSON value');
  }
}

const notFound = (key: string) => new DomainError('not_found', `config key ${key} not found`);

/**
 * Keys present, with the hash of their value so an unchanged PUT appends nothing (not the value: this state
 * is cached per project, and values of 1 MiB each would stay in memory); for each key the request that last
 * set or deleted it; and the last requests sent with an Idempotency-Key (`idem:` request
 * keys, at most MAX_REMEMBERED_CONFIG_REQUESTS, oldest forgotten first). A repeat of a remembered request
 * decides the same event again, whatever happened since, which the store recognises by its id and answers
 * with the first one's position.
 */
export type ConfigState = { values: Map<string, string>; changedBy: Map<string, string>; requests: Map<string, RememberedChange> };

function rememberRequest(state: ConfigState, requestKey: string, change: RememberedChange): void {
  state.requests.delete(requestKey);
  state.requests.set(requestKey, change);
  if (state.requests.size > MAX_REMEMBERED_CONFIG_REQUESTS) state.requests.delete(state.requests.keys().next().value!);
}

export const configDecider: Decider<ConfigState, ConfigCommand, ConfigEvent> = {
  initialState: () => ({ values: new Map(), changedBy: new Map(), requests: new Map() }),
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
      return { values: state.values, changedBy: state.changedBy, requests: state.requests };
    }
    if (event.type === 'ConfigValueSet') state.values.set(event.data.key, valueHash(event.data.value));
    else if (event.type === 'ConfigValueDeleted') state.values.delete(event.data.key);
    const requestKey = event.data.request_key;
    if (requestKey) state.changedBy.set(event.data.key, requestKey);
    else state.changedBy.delete(event.data.key);
    if (isRepeatable(requestKey)) {
      rememberRequest(state, requestKey, event.type === 'ConfigValueSet'
        ? { type: event.type, key: event.data.key, valueHash: state.values.get(event.data.key) }
        : { type: event.type, key: event.data.key });
    }
    return { values: state.values, changedBy: state.changedBy, requests: state.requests };
  },
  refusal: (event) => (event.type === 'ConfigValueDeletionRefused' ? notFound(event.data.key) : undefined),
};

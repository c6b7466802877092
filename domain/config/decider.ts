import { DomainError, type Decider, type DomainEvent } from '../shared/decider.js';

export const configStream = (projectId: string) => `config-${projectId}`;

/** `request_key`: the request that made the change (its Idempotency-Key, or a fresh id), so a repeat of it is recognised; absent in older logs. */
export type ConfigValueSet = DomainEvent<'ConfigValueSet', { project_id: string; key: string; value: unknown; set_at: string; request_key?: string }>;
export type ConfigValueDeleted = DomainEvent<'ConfigValueDeleted', { project_id: string; key: string; deleted_at: string; request_key?: string }>;
export type ConfigEvent = ConfigValueSet | ConfigValueDeleted;

export type SetConfigValue = { type: 'SetConfigValue'; data: { project_id: string; key: string; value: unknown } };
export type DeleteConfigValue = { type: 'DeleteConfigValue'; data: { project_id: string; key: string } };
export type ConfigCommand = SetConfigValue | DeleteConfigValue;

/**
 * Keys present, with the JSON text of their value so an unchanged PUT appends nothing, and for each key
 * the request that last set or deleted it: a repeat of that request decides the same event again, which
 * the store recognises by its id and answers with the first one's position.
 */
export type ConfigState = { values: Map<string, string>; changedBy: Map<string, string> };

export const configDecider: Decider<ConfigState, ConfigCommand, ConfigEvent> = {
  initialState: () => ({ values: new Map(), changedBy: new Map() }),
  decide(command, state, ctx): ConfigEvent[] {
    const { key } = command.data;
    const repeat = state.changedBy.get(key) === ctx.request_key;
    switch (command.type) {
      case 'SetConfigValue':
        if (state.values.get(key) === JSON.stringify(command.data.value) && !repeat) return [];
        return [{ type: 'ConfigValueSet', data: { ...command.data, set_at: ctx.now, request_key: ctx.request_key } }];
      case 'DeleteConfigValue':
        if (!state.values.has(key) && !repeat) throw new DomainError('not_found', `config key ${key} not found`);
        return [{ type: 'ConfigValueDeleted', data: { ...command.data, deleted_at: ctx.now, request_key: ctx.request_key } }];
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
    if (event.type === 'ConfigValueSet') state.values.set(event.data.key, JSON.stringify(event.data.value));
    else if (event.type === 'ConfigValueDeleted') state.values.delete(event.data.key);
    if (event.data.request_key) state.changedBy.set(event.data.key, event.data.request_key);
    else state.changedBy.delete(event.data.key);
    return { values: state.values, changedBy: state.changedBy };
  },
};

import { DomainError, type Decider, type DomainEvent } from '../shared/decider.js';

export const configStream = (projectId: string) => `config-${projectId}`;

export type ConfigValueSet = DomainEvent<'ConfigValueSet', { project_id: string; key: string; value: unknown; set_at: string }>;
export type ConfigValueDeleted = DomainEvent<'ConfigValueDeleted', { project_id: string; key: string; deleted_at: string }>;
export type ConfigEvent = ConfigValueSet | ConfigValueDeleted;

export type SetConfigValue = { type: 'SetConfigValue'; data: { project_id: string; key: string; value: unknown } };
export type DeleteConfigValue = { type: 'DeleteConfigValue'; data: { project_id: string; key: string } };
export type ConfigCommand = SetConfigValue | DeleteConfigValue;

/** Keys present, with the JSON text of their value so an unchanged PUT appends nothing. */
export type ConfigState = { values: Map<string, string> };

export const configDecider: Decider<ConfigState, ConfigCommand, ConfigEvent> = {
  initialState: () => ({ values: new Map() }),
  decide(command, state, ctx): ConfigEvent[] {
    switch (command.type) {
      case 'SetConfigValue':
        if (state.values.get(command.data.key) === JSON.stringify(command.data.value)) return [];
        return [{ type: 'ConfigValueSet', data: { ...command.data, set_at: ctx.now } }];
      case 'DeleteConfigValue':
        if (!state.values.has(command.data.key)) throw new DomainError('not_found', `config key ${command.data.key} not found`);
        return [{ type: 'ConfigValueDeleted', data: { ...command.data, deleted_at: ctx.now } }];
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
    return { values: state.values };
  },
};

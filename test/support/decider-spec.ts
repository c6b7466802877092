import type { Test } from 'tap';
import type { CommandContext, Decider, DomainEvent } from '../../domain/shared/decider.js';

export const testContext = (overrides: Partial<CommandContext> = {}): CommandContext => ({
  now: '2026-01-01T00:00:00.000Z', actor: 'key:k1', request_key: 'r1', request_hash: 'h1', ...overrides,
});

/** given([events]).when(command).then([events]) / .thenThrows(kind), after Emmett's DeciderSpecification. */
export function deciderSpec<S, C, E extends DomainEvent>(t: Test, decider: Decider<S, C, E>) {
  return {
    given(events: E[]) {
      const state = events.reduce((s, e) => decider.evolve(s, e), decider.initialState());
      return {
        when(command: C, context: CommandContext = testContext()) {
          const run = () => decider.decide(command, state, context);
          return {
            then(expected: E[], message?: string) { t.strictSame(run(), expected, message ?? 'decides the expected events'); },
            thenThrows(kind: string) {
              t.throws(run, { name: 'DomainError', kind } as never);
            },
          };
        },
      };
    },
  };
}

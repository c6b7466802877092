/** Domain events and commands: discriminated unions with `type` and `data`. Metadata is added by the command bus. */
export interface DomainEvent<Type extends string = string, Data extends Record<string, unknown> = Record<string, unknown>> {
  type: Type;
  data: Data;
}

/** What a command knows about its context. Time comes in here: deciders never read a clock. */
export interface CommandContext {
  now: string;
  actor: string;
  project_id?: string;
  tenant_id?: string;
  /** The request's idempotency key or id: creation commands derive ids from it. */
  request_key: string;
}

export interface Decider<State, Command, Event extends DomainEvent> {
  decide(command: Command, state: State, context: CommandContext): Event[];
  evolve(state: State, event: Event): State;
  initialState(): State;
}

export type DomainErrorKind = 'not_found' | 'conflict' | 'invalid' | 'forbidden' | 'not_implemented';

/** A rule of the domain said no. The API maps `kind` to a status in one place. */
export class DomainError extends Error {
  override readonly name = 'DomainError';
  constructor(readonly kind: DomainErrorKind, message: string, readonly details?: Record<string, unknown>) {
    super(message);
  }
}

export function fold<State, Event extends DomainEvent>(decider: Pick<Decider<State, never, Event>, 'evolve' | 'initialState'>, events: Event[]): State {
  return events.reduce((state, event) => decider.evolve(state, event), decider.initialState());
}

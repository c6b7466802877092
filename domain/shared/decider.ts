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
  /** The request's Idempotency-Key (or a fresh id): creation commands derive ids from it. */
  request_key: string;
  /** Fingerprint of the command: the same Idempotency-Key with a different command is refused. */
  request_hash: string;
}

export interface Decider<State, Command, Event extends DomainEvent> {
  decide(command: Command, state: State, context: CommandContext): Event[];
  evolve(state: State, event: Event): State;
  initialState(): State;
  /**
   * The refusal an event records, if it records one. A request sent with an Idempotency-Key that is
   * refused (a 404) appends such an event instead of appending nothing, so that its repeats answer the
   * same refusal, also once the thing it named exists; the command bus answers the event, appended now
   * or found in the log by its id, with this error.
   */
  refusal?(event: Event): DomainError | undefined;
  /**
   * What a state weighs in the command bus's cache of states, in items (absent: 1). The cache is bounded by
   * streams and by weight, so a decider whose state grows with its stream (a memory scope) says by how much.
   */
  size?(state: State): number;
}

/** A request the client may send again: one sent with an Idempotency-Key (its request key is then `idem:<key>`, see api/http/app.ts). */
export const isRepeatable = (requestKey: string | undefined): requestKey is string => requestKey?.startsWith('idem:') === true;

export type DomainErrorKind = 'not_found' | 'conflict' | 'invalid' | 'forbidden' | 'not_implemented' | 'idempotency_mismatch';

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

/** A creation replayed with the same Idempotency-Key: nothing to do if it is the same command, 422 if not. */
export function replayOf(state: { request_key: string; request_hash: string }, ctx: CommandContext): boolean {
  if (state.request_key !== ctx.request_key) return false;
  if (state.request_hash !== ctx.request_hash) {
    throw new DomainError('idempotency_mismatch', 'this Idempotency-Key was used for a different request');
  }
  return true;
}

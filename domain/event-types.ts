import type { agentDecider, agentNameDecider } from './agents/decider.js';
import type { apiKeyDecider } from './apikeys/decider.js';
import type { configDecider } from './config/decider.js';
import type { memoryDecider } from './memory/decider.js';
import type { projectDecider } from './projects/decider.js';
import type { Decider, DomainEvent } from './shared/decider.js';

/** The event types a decider can emit, read off its type. */
type EmittedBy<D> = D extends Decider<infer _State, infer _Command, infer Event extends DomainEvent> ? Event['type'] : never;

type Written = EmittedBy<typeof projectDecider | typeof apiKeyDecider | typeof configDecider | typeof agentDecider
  | typeof agentNameDecider | typeof memoryDecider>;

/**
 * The names are written out because types are gone at run time, but as the keys of a record over the deciders'
 * event unions: a type a decider comes to emit that is missing here, or a name here that no decider emits, does
 * not compile. A new decider joins `Written`.
 */
const written: Record<Written, true> = {
  ProjectCreated: true,
  ApiKeyCreated: true, ApiKeyRevoked: true, ApiKeyUsed: true,
  ConfigValueSet: true, ConfigValueDeleted: true, ConfigValueDeletionRefused: true,
  AgentCreated: true, AgentNameReserved: true,
  MemoryStored: true, MemoryUpdated: true, MemoryDeleted: true, MemoryDeletionRefused: true, PersonalitySet: true, FactsExtracted: true, ScopeDeleted: true,
};

/**
 * Every event type this version of Cairn writes, in name order: for what checks a type an operator typed
 * (`ops events tail --type`) without reading the log.
 */
export const EVENT_TYPES: readonly string[] = Object.keys(written).sort();

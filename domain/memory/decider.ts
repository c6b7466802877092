import { createHash } from 'node:crypto';
import { DomainError, type Decider, type DomainEvent } from '../shared/decider.js';

/**
 * One stream per scope. '/' cannot occur in scope ids (they are `[A-Za-z0-9_.-]`), so two different
 * scopes can never share a stream name; '.' could, because it is allowed inside ids.
 */
export const MEMORY_STREAM_PREFIX = 'memory-';
export const memoryStream = (agent: string, user: string) => `${MEMORY_STREAM_PREFIX}${agent}/${user}`;

export const SCOPE_ID_PATTERN = '^[A-Za-z0-9_.-]{1,128}$';
/** Memory ids: derived ones look like `m_<32 hex>`; supplied ones may also use ':' (e.g. `note:42`). */
export const MEMORY_ID_PATTERN = '^[A-Za-z0-9_.:-]{1,128}$';
export const MAX_TEXT_BYTES = 8192;
export const MAX_SESSION_BYTES = 128;
export const MAX_PERSONALITY_BYTES = 8192;
export const MAX_FACTS_PER_INGEST = 20;

/** The text as stored: trimmed and NFC-normalised, so canonically equal texts are one memory. */
export const normalizeText = (text: string) => text.trim().normalize('NFC');

/** The id of a memory stored without one: same (normalised) text, same id. */
export function memoryIdFor(text: string): string {
  return `m_${createHash('sha256').update(normalizeText(text)).digest('hex').slice(0, 32)}`;
}

/** 64 bits of SHA-256 over text and session: enough to tell "same content" for one id. */
function fingerprint(text: string, session: string | null): string {
  return createHash('sha256').update(text).update(session === null ? '\u0001' : `\u0000${session}`).digest('hex').slice(0, 16);
}

type Scope = { agent: string; user: string };

export type MemoryStored = DomainEvent<'MemoryStored', Scope & { memory_id: string; text: string; session: string | null; created_at: string }>;
export type MemoryUpdated = DomainEvent<'MemoryUpdated', Scope & { memory_id: string; text: string; session: string | null; created_at: string; updated_at: string }>;
export type MemoryDeleted = DomainEvent<'MemoryDeleted', Scope & { memory_id: string; deleted_at: string }>;
export type PersonalitySet = DomainEvent<'PersonalitySet', Scope & { personality: string; updated_at: string }>;
/** Provenance of an ingest: which memories the extracted facts became. The ingested text itself is never recorded. */
export type FactsExtracted = DomainEvent<'FactsExtracted', Scope & { session: string | null; memory_ids: string[]; model: string; extracted_at: string }>;
export type ScopeDeleted = DomainEvent<'ScopeDeleted', Scope & { memory_count: number; personality: boolean; deleted_at: string }>;
export type MemoryEvent = MemoryStored | MemoryUpdated | MemoryDeleted | PersonalitySet | FactsExtracted | ScopeDeleted;

export const MEMORY_EVENT_TYPES = ['MemoryStored', 'MemoryUpdated', 'MemoryDeleted', 'PersonalitySet', 'FactsExtracted', 'ScopeDeleted'] as const;

export type StoreMemory = { type: 'StoreMemory'; data: Scope & { memory_id: string; text: string; session: string | null } };
export type IngestFacts = { type: 'IngestFacts'; data: Scope & { session: string | null; facts: string[]; model: string } };
export type DeleteMemory = { type: 'DeleteMemory'; data: Scope & { memory_id: string } };
export type SetPersonality = { type: 'SetPersonality'; data: Scope & { personality: string } };
export type DeleteScope = { type: 'DeleteScope'; data: Scope };
export type MemoryCommand = StoreMemory | IngestFacts | DeleteMemory | SetPersonality | DeleteScope;

export interface LiveMemory {
  fingerprint: string;
  created_at: string;
  updated_at: string;
}

/**
 * What deciding needs, kept small because the command bus caches it per scope and a scope may hold
 * 100k memories: live ids with a fingerprint of their content (not the texts) and their timestamps.
 *
 * `evolve` mutates `memories` in place and returns a new top-level object: copying 100k entries per
 * command would cost more than the command. This is safe with the command bus, which decides commands
 * of one stream one after another on the cached state and drops (and reloads from the log) the cached
 * state whenever an append fails.
 */
export interface MemoryState {
  memories: Map<string, LiveMemory>;
  personality: { fingerprint: string; updated_at: string } | null;
}

type StoreOutcome = MemoryStored | MemoryUpdated;

function store(state: MemoryState, scope: Scope, memoryId: string, text: string, session: string | null, now: string): StoreOutcome[] {
  const existing = state.memories.get(memoryId);
  if (!existing) return [{ type: 'MemoryStored', data: { ...scope, memory_id: memoryId, text, session, created_at: now } }];
  if (existing.fingerprint === fingerprint(text, session)) return [];
  return [{ type: 'MemoryUpdated', data: { ...scope, memory_id: memoryId, text, session, created_at: existing.created_at, updated_at: now } }];
}

export const memoryDecider: Decider<MemoryState, MemoryCommand, MemoryEvent> = {
  initialState: () => ({ memories: new Map(), personality: null }),

  decide(command, state, ctx): MemoryEvent[] {
    const scope = { agent: command.data.agent, user: command.data.user };
    switch (command.type) {
      case 'StoreMemory': {
        const { memory_id, text, session } = command.data;
        return store(state, scope, memory_id, text, session, ctx.now);
      }
      case 'IngestFacts': {
        const { facts, session, model } = command.data;
        const ids = new Set<string>();
        const events: Array<StoreOutcome | FactsExtracted> = [];
        for (const fact of facts) {
          const id = memoryIdFor(fact);
          if (ids.has(id)) continue;
          ids.add(id);
          events.push(...store(state, scope, id, fact, session, ctx.now));
        }
        if (ids.size === 0) return [];
        events.push({ type: 'FactsExtracted', data: { ...scope, session, memory_ids: [...ids], model, extracted_at: ctx.now } });
        return events;
      }
      case 'DeleteMemory':
        if (!state.memories.has(command.data.memory_id)) {
          throw new DomainError('not_found', `memory ${command.data.memory_id} does not exist in this scope`);
        }
        return [{ type: 'MemoryDeleted', data: { ...scope, memory_id: command.data.memory_id, deleted_at: ctx.now } }];
      case 'SetPersonality':
        if (state.personality?.fingerprint === fingerprint(command.data.personality, null)) return [];
        return [{ type: 'PersonalitySet', data: { ...scope, personality: command.data.personality, updated_at: ctx.now } }];
      case 'DeleteScope':
        if (state.memories.size === 0 && state.personality === null) return [];
        return [{ type: 'ScopeDeleted', data: { ...scope, memory_count: state.memories.size, personality: state.personality !== null, deleted_at: ctx.now } }];
      default: {
        const _exhaustive: never = command;
        throw new Error(`unknown command ${JSON.stringify(_exhaustive)}`);
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'MemoryStored':
        state.memories.set(event.data.memory_id, {
          fingerprint: fingerprint(event.data.text, event.data.session), created_at: event.data.created_at, updated_at: event.data.created_at,
        });
        return { memories: state.memories, personality: state.personality };
      case 'MemoryUpdated':
        state.memories.set(event.data.memory_id, {
          fingerprint: fingerprint(event.data.text, event.data.session), created_at: event.data.created_at, updated_at: event.data.updated_at,
        });
        return { memories: state.memories, personality: state.personality };
      case 'MemoryDeleted':
        state.memories.delete(event.data.memory_id);
        return { memories: state.memories, personality: state.personality };
      case 'PersonalitySet':
        return { memories: state.memories, personality: { fingerprint: fingerprint(event.data.personality, null), updated_at: event.data.updated_at } };
      case 'ScopeDeleted':
        return { memories: new Map(), personality: null };
      case 'FactsExtracted':
        return state;
      default:
        return state;
    }
  },
};

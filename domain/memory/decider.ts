import { hash } from 'node:crypto';
import { DomainError, isRepeatable, type Decider, type DomainEvent } from '../shared/decider.js';
import { unpairedSurrogate } from '../shared/text.js';

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
/** How many requests sent with an Idempotency-Key (deletions, ingests) a scope remembers for repeats. */
export const MAX_REMEMBERED_REQUESTS = 64;

/** The text as stored: trimmed and NFC-normalised, so canonically equal texts are one memory. */
export const normalizeText = (text: string) => text.trim().normalize('NFC');

/**
 * The id a memory stored without one gets: derived from its (normalised) text. `n` > 1 only when that id
 * belongs to a memory since corrected (by id) to another text: see `resolveId`.
 */
export function memoryIdFor(text: string, n = 1): string {
  const normalized = normalizeText(text);
  return `m_${hash('sha256', n === 1 ? normalized : `${normalized}\u0000${n}`, 'hex').slice(0, 32)}`;
}

/** 128 bits of SHA-256 over the stored text: which live memories hold a text, without keeping the texts. */
export function textKey(text: string): string {
  return hash('sha256', text, 'hex').slice(0, 32);
}

/**
 * The fingerprint of a request the client may repeat (it sent an Idempotency-Key): 128 bits of SHA-256
 * over the request key, the operation and what identifies the request (for an ingest its text and
 * session, which are never stored themselves). Deletions and ingests record it in their event, so a
 * repeat can be recognised from the scope's state.
 */
export function requestFingerprint(requestKey: string, operation: MemoryCommand['type'], ...parts: string[]): string {
  return hash('sha256', JSON.stringify([requestKey, operation, ...parts]), 'hex').slice(0, 32);
}

type Scope = { agent: string; user: string };
/** See requestFingerprint: present only on events of requests sent with an Idempotency-Key (and absent from older events). */
type Repeatable = { request_fingerprint?: string };

export type MemoryStored = DomainEvent<'MemoryStored', Scope & { memory_id: string; text: string; session: string | null; created_at: string }>;
export type MemoryUpdated = DomainEvent<'MemoryUpdated', Scope & { memory_id: string; text: string; session: string | null; created_at: string; updated_at: string }>;
export type MemoryDeleted = DomainEvent<'MemoryDeleted', Scope & Repeatable & { memory_id: string; deleted_at: string }>;
/** A deletion sent with an Idempotency-Key of a memory the scope did not hold (answered 404): recorded so that its repeats answer 404 too. */
export type MemoryDeletionRefused = DomainEvent<'MemoryDeletionRefused', Scope & Required<Repeatable> & { memory_id: string; refused_at: string }>;
export type PersonalitySet = DomainEvent<'PersonalitySet', Scope & { personality: string; updated_at: string }>;
/** Provenance of an ingest: which memories the extracted facts became. The ingested text itself is never recorded. */
export type FactsExtracted = DomainEvent<'FactsExtracted', Scope & Repeatable & { session: string | null; memory_ids: string[]; model: string; extracted_at: string }>;
export type ScopeDeleted = DomainEvent<'ScopeDeleted', Scope & Repeatable & { memory_count: number; personality: boolean; deleted_at: string }>;
export type MemoryEvent = MemoryStored | MemoryUpdated | MemoryDeleted | MemoryDeletionRefused | PersonalitySet | FactsExtracted | ScopeDeleted;

export const MEMORY_EVENT_TYPES = ['MemoryStored', 'MemoryUpdated', 'MemoryDeleted', 'MemoryDeletionRefused', 'PersonalitySet', 'FactsExtracted', 'ScopeDeleted'] as const;

/**
 * `memory_id` given: store under that id (create or update) with exactly this session (absent: none).
 * Absent: see `resolveId`; a live memory already holding the text keeps its session unless one is given
 * (`null` included, which removes the label).
 */
export type StoreMemory = { type: 'StoreMemory'; data: Scope & { memory_id?: string; text: string; session?: string | null } };
/** `request_fingerprint` given and remembered: a repeat, which decides nothing (the first ingest's facts stand). */
export type IngestFacts = { type: 'IngestFacts'; data: Scope & Repeatable & { session: string | null; facts: string[]; model: string } };
/**
 * `request_fingerprint` given and remembered: a repeat, which decides the first deletion's event again, even once the memory is gone (or back);
 * given and the memory not live: the refusal is recorded (MemoryDeletionRefused) rather than thrown, and a repeat decides it again.
 */
export type DeleteMemory = { type: 'DeleteMemory'; data: Scope & Repeatable & { memory_id: string } };
export type SetPersonality = { type: 'SetPersonality'; data: Scope & { personality: string } };
export type DeleteScope = { type: 'DeleteScope'; data: Scope & Repeatable };
export type MemoryCommand = StoreMemory | IngestFacts | DeleteMemory | SetPersonality | DeleteScope;

export interface LiveMemory {
  /** textKey of the stored text. */
  text_key: string;
  session: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * What deciding needs, kept small because the command bus caches it per scope and a scope may hold
 * 100k memories: live ids with a hash of their text (not the texts), their session and timestamps, and
 * which live memories hold which text.
 *
 * `evolve` mutates `memories`, `byText` and `requests` in place and returns a new top-level object:
 * copying 100k entries per command would cost more than the command. This is safe with the command bus,
 * which decides commands of one stream one after another on the cached state and drops (and reloads from
 * the log) the cached state whenever an append fails or turns out to be an idempotent replay.
 */
export interface MemoryState {
  memories: Map<string, LiveMemory>;
  /** textKey → ids of the live memories holding that text, oldest first (explicit ids may repeat a text). */
  byText: Map<string, string[]>;
  personality: { fingerprint: string; updated_at: string } | null;
  /**
   * The last MAX_REMEMBERED_REQUESTS deletions (refused ones and those of an empty scope included) and
   * ingests (also those that stored nothing) sent with an Idempotency-Key, by fingerprint (oldest first),
   * with what a repeat needs: deletions are decided again as the same event (the store recognises its id
   * and writes nothing); an ingest answers the memories it stored. Kept across
   * ScopeDeleted: a deletion of the scope is a later change, not a reset of what was asked before.
   */
  requests: Map<string, RememberedRequest>;
}

export type RememberedRequest =
  | { type: 'MemoryDeleted'; memory_id: string; deleted_at: string }
  | { type: 'MemoryDeletionRefused'; memory_id: string; refused_at: string }
  | { type: 'ScopeDeleted'; memory_count: number; personality: boolean; deleted_at: string }
  | { type: 'FactsExtracted'; memory_ids: string[] };

type StoreOutcome = MemoryStored | MemoryUpdated;

/**
 * `now`, or `earlier` when the clock reads before it (stepped back, or another node's clock behind):
 * an update is never dated before the memory's creation or its previous update.
 */
const notBefore = (now: string, earlier: string) => (now < earlier ? earlier : now);

function store(state: MemoryState, scope: Scope, memoryId: string, text: string, session: string | null, now: string): StoreOutcome[] {
  const existing = state.memories.get(memoryId);
  if (!existing) return [{ type: 'MemoryStored', data: { ...scope, memory_id: memoryId, text, session, created_at: now } }];
  if (existing.text_key === textKey(text) && existing.session === session) return [];
  return [{ type: 'MemoryUpdated', data: { ...scope, memory_id: memoryId, text, session, created_at: existing.created_at, updated_at: notBefore(now, existing.updated_at) } }];
}

/**
 * The memory a text stored without an id goes to. A live memory that already holds the text, however its
 * id was chosen: storing a text twice is one memory. Otherwise a new one, under the id derived from the
 * text, or, when a memory with that id was since corrected by id to another text, under the next derived
 * id that is free: storing the old text again must not undo a correction. `taken`: ids given to other
 * texts of the same command.
 */
export function resolveId(state: MemoryState, text: string, taken: ReadonlySet<string> = new Set()): string {
  const holding = state.byText.get(textKey(text));
  if (holding && holding.length > 0) return holding[0]!;
  for (let n = 1; ; n++) {
    const id = memoryIdFor(text, n);
    if (!state.memories.has(id) && !taken.has(id)) return id;
  }
}

function personalityFingerprint(personality: string): string {
  return hash('sha256', personality, 'hex').slice(0, 16);
}

function holdText(state: MemoryState, key: string, id: string): void {
  const ids = state.byText.get(key);
  if (!ids) state.byText.set(key, [id]);
  else if (!ids.includes(id)) ids.push(id);
}

function releaseText(state: MemoryState, key: string, id: string): void {
  const ids = state.byText.get(key);
  if (!ids) return;
  const rest = ids.filter((x) => x !== id);
  if (rest.length === 0) state.byText.delete(key);
  else state.byText.set(key, rest);
}

function remember(state: MemoryState, id: string, memory: LiveMemory): void {
  const before = state.memories.get(id);
  if (before) releaseText(state, before.text_key, id);
  state.memories.set(id, memory);
  holdText(state, memory.text_key, id);
}

function rememberRequest(state: MemoryState, request: string | undefined, what: RememberedRequest): void {
  if (request === undefined) return;
  state.requests.delete(request);
  state.requests.set(request, what);
  if (state.requests.size > MAX_REMEMBERED_REQUESTS) state.requests.delete(state.requests.keys().next().value!);
}

const SCOPE_ID = new RegExp(SCOPE_ID_PATTERN);
const MEMORY_ID = new RegExp(MEMORY_ID_PATTERN);
const utf8Bytes = (value: string) => Buffer.byteLength(value, 'utf8');

/** A memory text (or fact) as stored: trimmed and NFC-normalised, not empty, well-formed, at most MAX_TEXT_BYTES bytes (bytes, not characters). */
function storedTextProblem(text: string): string | undefined {
  if (text !== normalizeText(text)) return 'must be trimmed and NFC-normalised';
  if (text === '') return 'must not be empty or only whitespace';
  if (utf8Bytes(text) > MAX_TEXT_BYTES) return `must be at most ${MAX_TEXT_BYTES} bytes (is ${utf8Bytes(text)})`;
  return unpairedSurrogate(text)?.message;
}

/** A session label: none (null), or a non-empty, well-formed label of at most MAX_SESSION_BYTES bytes. */
function sessionProblem(session: string | null | undefined): string | undefined {
  if (session === undefined || session === null) return undefined;
  if (session === '') return 'must be null rather than empty (no label)';
  if (utf8Bytes(session) > MAX_SESSION_BYTES) return `must be at most ${MAX_SESSION_BYTES} bytes (is ${utf8Bytes(session)})`;
  return unpairedSurrogate(session)?.message;
}

/**
 * A module function bound per call rather than a closure: under tsx (esbuild's keepNames) every named closure costs a
 * defineProperty of its name when it is made (~0.8 us), and requireValid runs for every memory command.
 */
function addProblem(problems: string[], what: string, problem: string | undefined): void {
  if (problem !== undefined) problems.push(`${what} ${problem}`);
}

/**
 * The spec's rules on what a command stores, checked here as well as in the HTTP layer (which reports them
 * per field first), so no caller can write a memory, fact, label or personality the service would refuse.
 */
function requireValid(command: MemoryCommand): void {
  const problems: string[] = [];
  const add = addProblem.bind(null, problems);
  for (const part of ['agent', 'user'] as const) {
    if (!SCOPE_ID.test(command.data[part])) problems.push(`scope ${part} must be 1-128 of A-Z a-z 0-9 _ . -`);
  }
  switch (command.type) {
    case 'StoreMemory':
      if (command.data.memory_id !== undefined && !MEMORY_ID.test(command.data.memory_id)) problems.push('memory id must be 1-128 of A-Z a-z 0-9 _ . : -');
      add('memory text', storedTextProblem(command.data.text));
      add('session', sessionProblem(command.data.session));
      break;
    case 'IngestFacts':
      if (command.data.facts.length > MAX_FACTS_PER_INGEST) problems.push(`an ingest must store at most ${MAX_FACTS_PER_INGEST} facts (has ${command.data.facts.length})`);
      command.data.facts.forEach((fact, i) => add(`fact ${i + 1}`, storedTextProblem(fact)));
      add('session', sessionProblem(command.data.session));
      break;
    case 'DeleteMemory':
      // An id that cannot exist is simply not found (the 404 the spec names), not refused as invalid.
      break;
    case 'SetPersonality': {
      const { personality } = command.data;
      if (personality.trim() === '') problems.push('personality must not be empty or only whitespace');
      else if (utf8Bytes(personality) > MAX_PERSONALITY_BYTES) problems.push(`personality must be at most ${MAX_PERSONALITY_BYTES} bytes (is ${utf8Bytes(personality)})`);
      add('personality', unpairedSurrogate(personality)?.message);
      break;
    }
    case 'DeleteScope':
      break;
    default: {
      const _exhaustive: never = command;
      throw new Error(`unknown command ${JSON.stringify(_exhaustive)}`);
    }
  }
  if (problems.length > 0) throw new DomainError('invalid', problems.join('; '));
}

const withRequest = (request: string | undefined) => (request === undefined ? {} : { request_fingerprint: request });

const memoryNotFound = (memoryId: string) => new DomainError('not_found', `memory ${memoryId} does not exist in this scope`);

/**
 * A store or personality sent with an Idempotency-Key that changes nothing: recorded all the same, as the
 * memory (personality) as it is, times included, so that a repeat is recognised by its event ids (the
 * store answers it as a replay) and never stores the text again once it was changed or deleted since.
 */
function unchangedMemory(state: MemoryState, scope: Scope, memoryId: string, text: string): MemoryUpdated[] {
  const live = state.memories.get(memoryId)!;
  return [{ type: 'MemoryUpdated', data: { ...scope, memory_id: memoryId, text, session: live.session, created_at: live.created_at, updated_at: live.updated_at } }];
}

export const memoryDecider: Decider<MemoryState, MemoryCommand, MemoryEvent> = {
  initialState: () => ({ memories: new Map(), byText: new Map(), personality: null, requests: new Map() }),

  /** Its live memories and remembered requests (each ~470 bytes of state with its byText entry), for the command bus's cache. */
  size: (state) => 1 + state.memories.size + state.requests.size,

  decide(command, state, ctx): MemoryEvent[] {
    requireValid(command);
    const scope = { agent: command.data.agent, user: command.data.user };
    switch (command.type) {
      case 'StoreMemory': {
        const { memory_id, text, session } = command.data;
        const id = memory_id ?? resolveId(state, text);
        // A live memory already holds the text: without a session it stays as it is, label included.
        const events = memory_id === undefined && session === undefined && state.memories.has(id) ? [] : store(state, scope, id, text, session ?? null, ctx.now);
        return events.length === 0 && isRepeatable(ctx.request_key) ? unchangedMemory(state, scope, id, text) : events;
      }
      case 'IngestFacts': {
        const { facts, session, model, request_fingerprint: request } = command.data;
        if (request !== undefined && state.requests.get(request)?.type === 'FactsExtracted') return [];
        const ids = new Set<string>();
        const texts = new Set<string>();
        const events: Array<StoreOutcome | FactsExtracted> = [];
        for (const fact of facts) {
          const key = textKey(fact);
          if (texts.has(key)) continue;
          texts.add(key);
          const id = resolveId(state, fact, ids);
          ids.add(id);
          // A fact a live memory already holds comes back as it is: an ingest never relabels or re-dates it.
          if (!state.memories.has(id)) events.push(...store(state, scope, id, fact, session, ctx.now));
        }
        // An ingest sent with a key is recorded even when it stored nothing: its repeat answers no facts, without asking the provider again.
        if (ids.size === 0 && request === undefined) return [];
        events.push({ type: 'FactsExtracted', data: { ...scope, session, memory_ids: [...ids], model, extracted_at: ctx.now, ...withRequest(request) } });
        return events;
      }
      case 'DeleteMemory': {
        const { memory_id, request_fingerprint: request } = command.data;
        const first = request !== undefined ? state.requests.get(request) : undefined;
        if (first?.type === 'MemoryDeleted') {
          return [{ type: 'MemoryDeleted', data: { ...scope, memory_id: first.memory_id, deleted_at: first.deleted_at, request_fingerprint: request } }];
        }
        const refusedAt = first?.type === 'MemoryDeletionRefused' ? first.refused_at : !state.memories.has(memory_id) ? ctx.now : undefined;
        if (refusedAt !== undefined) {
          // Refused: recorded when sent with a key, so that a repeat is refused too, also once a memory with this id was stored.
          if (request === undefined) throw memoryNotFound(memory_id);
          return [{ type: 'MemoryDeletionRefused', data: { ...scope, memory_id, refused_at: refusedAt, request_fingerprint: request } }];
        }
        return [{ type: 'MemoryDeleted', data: { ...scope, memory_id, deleted_at: ctx.now, ...withRequest(request) } }];
      }
      case 'SetPersonality':
        if (state.personality?.fingerprint === personalityFingerprint(command.data.personality)) {
          // Unchanged: recorded as it is when sent with a key (see unchangedMemory).
          return isRepeatable(ctx.request_key) ? [{ type: 'PersonalitySet', data: { ...scope, personality: command.data.personality, updated_at: state.personality.updated_at } }] : [];
        }
        return [{ type: 'PersonalitySet', data: { ...scope, personality: command.data.personality, updated_at: notBefore(ctx.now, state.personality?.updated_at ?? ctx.now) } }];
      case 'DeleteScope': {
        const { request_fingerprint: request } = command.data;
        const first = request !== undefined ? state.requests.get(request) : undefined;
        if (first?.type === 'ScopeDeleted') {
          return [{ type: 'ScopeDeleted', data: { ...scope, memory_count: first.memory_count, personality: first.personality, deleted_at: first.deleted_at, request_fingerprint: request } }];
        }
        // An empty scope: nothing to delete, but a deletion sent with a key is recorded (of 0), so that its repeat deletes nothing stored since.
        if (state.memories.size === 0 && state.personality === null && request === undefined) return [];
        return [{ type: 'ScopeDeleted', data: { ...scope, memory_count: state.memories.size, personality: state.personality !== null, deleted_at: ctx.now, ...withRequest(request) } }];
      }
      default: {
        const _exhaustive: never = command;
        throw new Error(`unknown command ${JSON.stringify(_exhaustive)}`);
      }
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'MemoryStored':
        remember(state, event.data.memory_id, {
          text_key: textKey(event.data.text), session: event.data.session, created_at: event.data.created_at, updated_at: event.data.created_at,
        });
        return { ...state };
      case 'MemoryUpdated':
        remember(state, event.data.memory_id, {
          text_key: textKey(event.data.text), session: event.data.session, created_at: event.data.created_at, updated_at: event.data.updated_at,
        });
        return { ...state };
      case 'MemoryDeleted': {
        const { memory_id, deleted_at, request_fingerprint: request } = event.data;
        const before = state.memories.get(memory_id);
        if (before) releaseText(state, before.text_key, memory_id);
        state.memories.delete(memory_id);
        rememberRequest(state, request, { type: 'MemoryDeleted', memory_id, deleted_at });
        return { ...state };
      }
      case 'MemoryDeletionRefused':
        rememberRequest(state, event.data.request_fingerprint, { type: 'MemoryDeletionRefused', memory_id: event.data.memory_id, refused_at: event.data.refused_at });
        return { ...state };
      case 'PersonalitySet':
        return { ...state, personality: { fingerprint: personalityFingerprint(event.data.personality), updated_at: event.data.updated_at } };
      case 'ScopeDeleted': {
        const { memory_count, personality, deleted_at, request_fingerprint: request } = event.data;
        rememberRequest(state, request, { type: 'ScopeDeleted', memory_count, personality, deleted_at });
        return { memories: new Map(), byText: new Map(), personality: null, requests: state.requests };
      }
      case 'FactsExtracted':
        rememberRequest(state, event.data.request_fingerprint, { type: 'FactsExtracted', memory_ids: event.data.memory_ids });
        return { ...state };
      default:
        return state;
    }
  },

  refusal: (event) => (event.type === 'MemoryDeletionRefused' ? memoryNotFound(event.data.memory_id) : undefined),
};

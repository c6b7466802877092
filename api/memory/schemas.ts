import Type, { type Static } from 'typebox';
import {
  MAX_PERSONALITY_BYTES, MAX_SESSION_BYTES, MAX_TEXT_BYTES, MEMORY_ID_PATTERN, SCOPE_ID_PATTERN,
} from '../../domain/memory/decider.js';
import { MAX_BYTES } from '../http/validation.js';
import { DateTime, OrNull } from '../shared/schemas.js';

// maxLength (characters) is implied by the byte limits (a UTF-8 string has at least as many bytes as
// characters); it rejects gross oversize early (in bytes: MAX_BYTES), and the handlers check the exact byte limits.
const ScopeId = Type.String({ pattern: SCOPE_ID_PATTERN, description: '1-128 ASCII letters, digits, `_`, `.`, `-`' });
const MemoryId = Type.String({
  pattern: MEMORY_ID_PATTERN,
  description: '1-128 ASCII letters, digits, `_`, `.`, `:`, `-`. Given: updates that memory in the scope, or creates it with this id. Omitted (or null, in a body): derived from the trimmed text (`m_` + 32 hex digits), so the same text is one memory.',
});
const Text = (what: string, max: number) => Type.String({ minLength: 1, maxLength: max, [MAX_BYTES]: max, description: `${what}: not empty after trimming, at most ${max.toLocaleString('en-US')} bytes (UTF-8), well-formed Unicode (no unpaired surrogates)` });
const Session = (more: string) => Type.Union([Type.String({ maxLength: MAX_SESSION_BYTES, [MAX_BYTES]: MAX_SESSION_BYTES }), Type.Null()], {
  description: `optional provenance label, at most ${MAX_SESSION_BYTES} bytes, well-formed Unicode; "" and null mean none. ${more}`,
});

export const Scope = Type.Object({ agent: ScopeId, user: ScopeId }, { additionalProperties: false, description: 'agent and user namespaces' });
export type Scope = Static<typeof Scope>;

export const StoreMemoryBody = Type.Object({
  scope: Scope,
  id: OrNull(MemoryId),
  text: Text('memory text, stored trimmed and NFC-normalised', MAX_TEXT_BYTES),
  session: Type.Optional(Session('Without `id`, when a live memory already holds the text: omitted keeps its label, anything else replaces it. With `id`: the memory gets exactly this label (omitted: none).')),
}, { additionalProperties: false });
export type StoreMemoryBody = Static<typeof StoreMemoryBody>;

/** The spec's defaults, applied by the handlers and published as the schemas' `default` (not only in prose). */
export const DEFAULT_SEARCH_MODE = 'lexical';
export const DEFAULT_SEARCH_LIMIT = 5;

export const SearchMode = Type.Union([Type.Literal('lexical'), Type.Literal('semantic'), Type.Literal('hybrid')], {
  default: DEFAULT_SEARCH_MODE,
  description: '`lexical` (default): BM25; `semantic`: cosine similarity of embeddings; `hybrid`: reciprocal rank fusion (k = 60) of both ranks',
});

export const SearchBody = Type.Object({
  scope: Scope,
  query: Text('query', MAX_TEXT_BYTES),
  mode: OrNull(SearchMode),
  limit: OrNull(Type.Integer({ minimum: 1, maximum: 100, default: DEFAULT_SEARCH_LIMIT, description: `default ${DEFAULT_SEARCH_LIMIT}` })),
}, { additionalProperties: false });
export type SearchBody = Static<typeof SearchBody>;

export const PersonalityBody = Type.Object({
  scope: Scope,
  personality: Text('personality text', MAX_PERSONALITY_BYTES),
}, { additionalProperties: false });
export type PersonalityBody = Static<typeof PersonalityBody>;

export const IngestBody = Type.Object({
  scope: Scope,
  text: Text('text to extract facts from (never stored)', MAX_TEXT_BYTES),
  session: Type.Optional(Session('The label of the memories this ingest creates; a fact a live memory already holds keeps that memory\'s label.')),
}, { additionalProperties: false });
export type IngestBody = Static<typeof IngestBody>;

export const ScopeQuery = Type.Object({ agent: ScopeId, user: ScopeId }, { additionalProperties: false });
export const DeleteMemoryQuery = Type.Object({ agent: ScopeId, user: ScopeId, id: MemoryId }, { additionalProperties: false });

export const MemoryView = Type.Object({
  id: Type.String(),
  text: Type.String(),
  session: Type.Union([Type.String(), Type.Null()]),
  created_at: DateTime,
  updated_at: DateTime,
});
export type MemoryView = Static<typeof MemoryView>;

export const ScoredMemory = Type.Object({
  ...MemoryView.properties,
  score: Type.Number({ description: 'higher is better; scales differ by mode and are not probabilities: lexical BM25 above 0 without an upper bound, semantic cosine from -1 to 1, hybrid above 0 and at most 2/61. Equal scores are ordered by memory id, ascending' }),
});
export type ScoredMemory = Static<typeof ScoredMemory>;

export const SearchResponse = Type.Object({ results: Type.Array(ScoredMemory, { description: 'best first' }) });
const PersonalityText = Type.String({ description: 'the scope\'s personality text; "" when none is set' });
export const ContextResponse = Type.Object({ personality: PersonalityText, memories: Type.Array(ScoredMemory) });
export const PersonalityResponse = Type.Object({ scope: Scope, personality: Type.String(), updated_at: DateTime });
export const IngestResponse = Type.Object({ facts: Type.Array(MemoryView, { maxItems: 20, description: 'the stored memories, at most 20; a fact a live memory of the scope already holds is returned once and unchanged (its session and updated_at are kept, whatever the ingest\'s session)' }) });
export const ChatResponse = Type.Object({ answer: Type.String(), context: ContextResponse });
export const ExportResponse = Type.Object({
  scope: Scope,
  personality: PersonalityText,
  memories: Type.Array(Type.Object({
    ...MemoryView.properties,
    vector: Type.Optional(Type.Array(Type.Number(), { description: 'embedding of the exported text: unit length, or all zeros when it has no direction (the local embedder\'s for a text without words, such as `...`); absent when embeddings are not configured or the provider refused this text' })),
    vector_model: Type.Optional(Type.String({ description: 'embedding model the vector was computed with' })),
  }), { description: 'live memories, oldest first' }),
});
export const DeleteMemoryResponse = Type.Object({ id: Type.String(), deleted: Type.Literal(1) });
export const DeleteScopeResponse = Type.Object({
  scope: Scope,
  deleted: Type.Integer({ description: 'live memories deleted (0 for an empty or unknown scope)' }),
  personality_deleted: Type.Boolean(),
});

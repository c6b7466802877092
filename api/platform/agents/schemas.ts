import Type, { type Static } from 'typebox';
import { LANGUAGE_PATTERN, MAX_LANGUAGE_TAG } from '../../../domain/agents/language.js';
import { MAX_AGENT_NAME } from '../../../domain/agents/names.js';
import { nameLength } from '../../http/validation.js';
import { DateTime, OrNull, Uuid } from '../../shared/schemas.js';

const Score = Type.Number({ minimum: 0, maximum: 1 });
export const Big5 = Type.Object({
  openness: Score, conscientiousness: Score, extraversion: Score, agreeableness: Score, neuroticism: Score,
}, { additionalProperties: false, description: 'all five scores, each 0.0-1.0' });

const Phrases = Type.Array(Type.String({ minLength: 1, maxLength: 500 }), { maxItems: 100, description: 'at most 100 phrases of 1-500 characters, well-formed Unicode' });
const Gender = Type.Union([Type.Literal('male'), Type.Literal('female'), Type.Literal('non_binary')]);
export const CreateAgentBody = Type.Object({
  name: Type.String({ ...nameLength(MAX_AGENT_NAME), description: `not empty or only whitespace; at most ${MAX_AGENT_NAME} characters after trimming and NFC normalisation, unique within the project; well-formed Unicode; no control characters, bidirectional controls, line separators, noncharacters or invisible (default-ignorable) characters, except zero-width joiners, variation selectors and tags where they shape a script or an emoji; must not look like a UUID nor be "." or ".."` }),
  personality_prompt: OrNull(Type.String({ maxLength: 16000, description: 'custom system prompt, well-formed Unicode' })),
  big5: OrNull(Big5),
  speech_patterns: OrNull(Phrases),
  true_interests: OrNull(Phrases),
  true_dislikes: OrNull(Phrases),
  project_id: OrNull(Uuid),
  language: OrNull(Type.String({ pattern: LANGUAGE_PATTERN, maxLength: MAX_LANGUAGE_TAG, description: 'BCP 47 language tag whose language is an ISO 639 code, in any case (tags are case-insensitive): "en", "EN-us", "zh-hant-tw"; stored and returned in canonical form ("en-US", "zh-Hant-TW"); default "en"' })),
  bio: OrNull(Type.String({ maxLength: 8000, description: 'well-formed Unicode' })),
  gender: OrNull(Gender),
  avatar_url: OrNull(Type.String({ format: 'uri', pattern: '^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@\\s]+(?:[/?#]|$)', maxLength: 2048 })),
}, { additionalProperties: false });
export type CreateAgentBody = Static<typeof CreateAgentBody>;

/** Page sizes of GET /agents, as the spec's lists have them (1-500). */
export const MAX_AGENTS_PAGE = 500;
export const ListAgentsQuery = Type.Object({
  project_id: Type.Optional(Uuid),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_AGENTS_PAGE, description: `at most this many agents (1-${MAX_AGENTS_PAGE}), oldest first; when more follow, X-Next-Cursor says where to go on. Without it, every agent of the project is returned (as before paging existed)` })),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'opaque: the X-Next-Cursor of the previous page (with the same project_id); needs `limit`' })),
}, { additionalProperties: false });
export const AgentParams = Type.Object({ agentId: Type.String({ ...nameLength(MAX_AGENT_NAME), description: 'agent UUID or URL-encoded name' }) }, { additionalProperties: false });

const Mood = Type.Object({
  valence: Type.Number(), arousal: Type.Number(), tension: Type.Number(), affiliation: Type.Number(),
  reason: Type.String(), trigger_type: Type.String(),
});

export const AgentView = Type.Object({
  agent_id: Uuid,
  name: Type.String(),
  project_id: Uuid,
  bio: Type.Union([Type.String(), Type.Null()]),
  gender: Type.Union([Gender, Type.Null()]),
  avatar_url: Type.Union([Type.String(), Type.Null()]),
  big5: Big5,
  language: Type.String({ description: 'canonical BCP 47 tag' }),
  personality_prompt: Type.Union([Type.String(), Type.Null()]),
  speech_patterns: Type.Array(Type.String()),
  true_interests: Type.Array(Type.String()),
  true_dislikes: Type.Array(Type.String()),
  owner: Type.String({ description: 'who created the agent (`key:<key_id>`)' }),
  created_at: DateTime,
  personality: Type.Object({
    big5: Big5, personality_prompt: Type.Union([Type.String(), Type.Null()]),
    speech_patterns: Type.Array(Type.String()), true_interests: Type.Array(Type.String()), true_dislikes: Type.Array(Type.String()),
  }),
  mood: Type.Object(Mood.properties, { description: 'baseline (all zero) until conversation turns are processed' }),
  profile: Type.Object({
    bio: Type.Union([Type.String(), Type.Null()]), gender: Type.Union([Gender, Type.Null()]),
    avatar_url: Type.Union([Type.String(), Type.Null()]), language: Type.String(),
  }),
});
export type AgentView = Static<typeof AgentView>;

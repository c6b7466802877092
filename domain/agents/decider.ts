import { DomainError, replayOf, type Decider, type DomainEvent } from '../shared/decider.js';
import { canonicalLanguage } from './language.js';
import { nameProblem, unpairedSurrogate } from '../shared/text.js';
import { agentNameShapeProblem, MAX_AGENT_NAME } from './names.js';

/** The category of agents' streams (`agentname-` streams are not in it). */
export const AGENT_STREAM_PREFIX = 'agent-';
export const agentStream = (agentId: string) => `${AGENT_STREAM_PREFIX}${agentId}`;
/** One stream per (project, name) holds the name's reservation: names are unique within a project. */
export const agentNameStream = (projectId: string, nameKey: string) => `agentname-${projectId}-${nameKey}`;

export type Big5 = {
  openness: number;
  conscientiousness: number;
  extraversion: number;
  agreeableness: number;
  neuroticism: number;
};
export const BIG5_TRAITS = ['openness', 'conscientiousness', 'extraversion', 'agreeableness', 'neuroticism'] as const;
export const NEUTRAL_BIG5: Big5 = { openness: 0.5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 };

export type AgentProfile = {
  agent_id: string;
  project_id: string;
  name: string;
  bio: string | null;
  gender: 'male' | 'female' | 'non_binary' | null;
  avatar_url: string | null;
  big5: Big5;
  language: string;
  personality_prompt: string | null;
  speech_patterns: string[];
  true_interests: string[];
  true_dislikes: string[];
  owner: string;
};

export type AgentCreated = DomainEvent<'AgentCreated', AgentProfile & { created_at: string; request_key: string; request_hash: string }>;
export type AgentNameReserved = DomainEvent<'AgentNameReserved', { project_id: string; name: string; agent_id: string; reserved_at: string }>;
export type AgentEvent = AgentCreated;
export type AgentNameEvent = AgentNameReserved;

export type CreateAgent = { type: 'CreateAgent'; data: Omit<AgentProfile, 'owner'> };
export type ReserveAgentName = {
  type: 'ReserveAgentName';
  /**
   * `abandoned_holder`: an agent id the handler found holding the name without ever having been created
   * (its creation failed after reserving). Only that exact holder may be displaced.
   */
  data: { project_id: string; name: string; agent_id: string; abandoned_holder: string | null };
};

export type AgentState = { exists: false } | { exists: true; request_key: string; request_hash: string; project_id: string };
export type AgentNameState = { holder: string | null };

/** The rules of a name, also for callers other than the HTTP API (which reports them per field first). */
function requireValidName(name: string): void {
  const problem = nameProblem(name, MAX_AGENT_NAME) ?? agentNameShapeProblem(name);
  if (problem) throw new DomainError('invalid', `agent name ${problem}`);
}

const GENDERS: ReadonlyArray<AgentProfile['gender']> = ['male', 'female', 'non_binary', null];
/** The profile's lists of phrases. */
export const PHRASE_LISTS = ['speech_patterns', 'true_interests', 'true_dislikes'] as const;

/** The spec's limits on a profile (Big Five scores 0.0 to 1.0, all five; the three genders) and well-formed texts, whoever sends the command. */
function requireValidProfile(profile: Omit<AgentProfile, 'owner'>): void {
  const { big5 } = profile;
  const traits = big5 !== null && typeof big5 === 'object' ? Object.keys(big5) : [];
  const valid = traits.length === BIG5_TRAITS.length && BIG5_TRAITS.every((trait) => {
    const score: unknown = big5[trait];
    return typeof score === 'number' && score >= 0 && score <= 1; // NaN fails both comparisons
  });
  if (!valid) throw new DomainError('invalid', `agent big5 must hold exactly ${BIG5_TRAITS.join(', ')}, each a number from 0.0 to 1.0`);
  if (!GENDERS.includes(profile.gender)) throw new DomainError('invalid', 'agent gender must be male, female, non_binary or none');
  // Well-formed text, as names are (see unpairedSurrogate): UTF-8 would store a lone surrogate as U+FFFD.
  const texts: Array<[string, string | null]> = [['bio', profile.bio], ['personality_prompt', profile.personality_prompt]];
  for (const field of PHRASE_LISTS) profile[field].forEach((phrase, i) => texts.push([`${field}[${i}]`, phrase]));
  for (const [field, text] of texts) {
    const problem = text === null ? undefined : unpairedSurrogate(text);
    if (problem) throw new DomainError('invalid', `agent ${field} ${problem.message} (${problem.value})`);
  }
}

export const agentDecider: Decider<AgentState, CreateAgent, AgentEvent> = {
  initialState: () => ({ exists: false }),
  decide(command, state, ctx): AgentCreated[] {
    switch (command.type) {
      case 'CreateAgent':
        if (state.exists) {
          if (replayOf(state, ctx)) return [];
          throw new DomainError('conflict', `agent ${command.data.agent_id} already exists`);
        }
        requireValidName(command.data.name);
        requireValidProfile(command.data);
        if (canonicalLanguage(command.data.language) !== command.data.language) {
          throw new DomainError('invalid', `agent language must be a BCP 47 tag in canonical form (e.g. "en-US"), not "${command.data.language}"`);
        }
        return [{ type: 'AgentCreated', data: { ...command.data, owner: ctx.actor, created_at: ctx.now, request_key: ctx.request_key, request_hash: ctx.request_hash } }];
      default: {
        const _exhaustive: never = command.type;
        throw new Error(`unknown command ${_exhaustive}`);
      }
    }
  },
  evolve(state, event) {
    return event.type === 'AgentCreated' ? { exists: true, request_key: event.data.request_key, request_hash: event.data.request_hash, project_id: event.data.project_id } : state;
  },
};

export const agentNameDecider: Decider<AgentNameState, ReserveAgentName, AgentNameEvent> = {
  initialState: () => ({ holder: null }),
  decide(command, state, ctx): AgentNameReserved[] {
    const { project_id, name, agent_id, abandoned_holder } = command.data;
    if (state.holder === agent_id) return [];
    requireValidName(name);
    if (state.holder !== null && state.holder !== abandoned_holder) {
      throw new DomainError('conflict', `an agent named "${name}" already exists in this project`, { agent_id: state.holder });
    }
    return [{ type: 'AgentNameReserved', data: { project_id, name, agent_id, reserved_at: ctx.now } }];
  },
  evolve(state, event) {
    // Total: an event type this version does not know (a newer version's) changes nothing here.
    return event.type === 'AgentNameReserved' ? { holder: event.data.agent_id } : state;
  },
};

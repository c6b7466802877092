import { MEMORY_STREAM_PREFIX, type PersonalitySet, type ScopeDeleted } from '../../domain/memory/decider.js';
import type { Projection } from '../projection.js';
import { scopeKey } from './memories.js';

export const PERSONALITY_PROJECTION = 'memory-personality';
export const PERSONALITY = 'memory_personality';

export interface PersonalityDoc {
  id: string;
  agent: string;
  user: string;
  personality: string;
  updated_at: string;
  [field: string]: unknown;
}

/** The personality text of each scope (doc id `${agent}/${user}`). */
export const personalityProjection: Projection = {
  name: PERSONALITY_PROJECTION,
  collections: [{ name: PERSONALITY }],
  canHandle: ['PersonalitySet', 'ScopeDeleted'],
  streams: [MEMORY_STREAM_PREFIX],
  async apply(event, writer) {
    const e = event as unknown as PersonalitySet | ScopeDeleted;
    const id = scopeKey(e.data.agent, e.data.user);
    if (e.type === 'PersonalitySet') {
      await writer.put<PersonalityDoc>(PERSONALITY, { id, agent: e.data.agent, user: e.data.user, personality: e.data.personality, updated_at: e.data.updated_at }, event.position);
    } else {
      await writer.delete(PERSONALITY, id, event.position);
    }
  },
};

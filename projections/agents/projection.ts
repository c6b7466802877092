import { AGENT_STREAM_PREFIX, type AgentCreated, type AgentProfile } from '../../domain/agents/decider.js';
import type { Projection } from '../projection.js';

export type AgentDoc = AgentProfile & { id: string; created_at: string; updated_at: string };

export const agentsProjection: Projection = {
  name: 'agents',
  collections: [{ name: 'agents', indexes: [['project_id', 'created_at'], ['project_id', 'name']] }],
  canHandle: ['AgentCreated'],
  streams: [AGENT_STREAM_PREFIX],
  async apply(event, writer) {
    const { request_key: _key, request_hash: _hash, ...data } = (event as unknown as AgentCreated).data;
    await writer.put<AgentDoc>('agents', { id: data.agent_id, ...data, updated_at: data.created_at }, event.position);
  },
};

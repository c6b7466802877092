import Type from 'typebox';
import { hash } from 'node:crypto';
import type { CommandResult } from '../../../commands/bus.js';
import { uuidV5 as uuidv5 } from '../../../infra/ids.js';
import { DomainError } from '../../../domain/shared/decider.js';
import {
  agentDecider, agentNameDecider, agentNameStream, agentStream, NEUTRAL_BIG5, PHRASE_LISTS, type AgentEvent, type AgentProfile, type AgentState,
} from '../../../domain/agents/decider.js';
import { canonicalLanguage } from '../../../domain/agents/language.js';
import { agentNameForm, agentNameShapeProblem, MAX_AGENT_NAME } from '../../../domain/agents/names.js';
import { findAll } from '../../../infra/readstore/port.js';
import type { AgentDoc } from '../../../projections/agents/projection.js';
import { badRequest, notFound } from '../../http/problem.js';
import { route, type RouteDef } from '../../http/routes.js';
import { check, nameErrors, wellFormed } from '../../http/validation.js';
import { UUID_PATTERN } from '../../shared/schemas.js';
import { requireProject, requireProjectForCommand, type PlatformDeps } from '../context.js';
import { AgentParams, AgentView, CreateAgentBody, ListAgentsQuery } from './schemas.js';

const AGENT_ID_NAMESPACE = 'c8d1e2f3-4a5b-4c6d-8e7f-901a2b3c4d5e';
/** A reservation whose agent was not created within this time is treated as abandoned (its creation failed). */
const ABANDONED_RESERVATION_MS = 60_000;

export const nameKey = (name: string) => hash('sha256', name.normalize('NFC'), 'hex').slice(0, 32);

export function agentView(a: Omit<AgentDoc, 'id' | 'updated_at'>): AgentView {
  return {
    agent_id: a.agent_id, name: a.name, project_id: a.project_id, bio: a.bio, gender: a.gender, avatar_url: a.avatar_url,
    big5: a.big5, language: a.language, personality_prompt: a.personality_prompt, speech_patterns: a.speech_patterns,
    true_interests: a.true_interests, true_dislikes: a.true_dislikes, owner: a.owner, created_at: a.created_at,
    personality: {
      big5: a.big5, personality_prompt: a.personality_prompt, speech_patterns: a.speech_patterns,
      true_interests: a.true_interests, true_dislikes: a.true_dislikes,
    },
    mood: { valence: 0, arousal: 0, tension: 0, affiliation: 0, reason: 'baseline: no conversation turns processed yet', trigger_type: 'none' },
    profile: { bio: a.bio, gender: a.gender, avatar_url: a.avatar_url, language: a.language },
  };
}

/**
 * Finds an agent of a project by UUID or by exact name, both trimmed (and the name NFC-normalised) as on
 * creation: no name looks like a UUID, so an id sent with a line break or spaces around it is still an id.
 */
export async function findAgent(deps: PlatformDeps, projectId: string, idOrName: string): Promise<AgentDoc> {
  const key = agentNameForm(idOrName);
  let agent: AgentDoc | undefined;
  if (UUID_PATTERN.test(key)) agent = await deps.reads.get<AgentDoc>('agents', key.toLowerCase());
  else agent = (await deps.reads.find<AgentDoc>('agents', { where: { project_id: projectId, name: key }, limit: 1 })).items[0];
  if (!agent || agent.project_id !== projectId) throw notFound('agent not found');
  return agent;
}

/** The agent holding a name reservation if it was never created and the reservation is old enough to be abandoned. */
async function abandonedHolder(deps: PlatformDeps, nameStream: string, clock: () => Date): Promise<string | null> {
  const reservation = (await deps.events.readStream(nameStream)).at(-1);
  if (!reservation) return null;
  const holder = (reservation.data as { agent_id: string }).agent_id;
  const stale = clock().getTime() - Date.parse(reservation.recorded_at) > ABANDONED_RESERVATION_MS;
  return stale && !(await deps.events.streamInfo(agentStream(holder))) ? holder : null;
}

export function agentRoutes(deps: PlatformDeps, clock: () => Date): RouteDef[] {
  return [
    route({
      method: 'POST', path: '/agents', operationId: 'createAgent', tag: 'Agents', auth: ['key'], scope: 'agents:write',
      summary: 'Create an agent with an authored personality',
      description: 'Big Five scores default to 0.5 each when `big5` is omitted. An optional field sent as null is the same as one left out (the agent read back can be sent again). Names are unique within a project (409 `conflict` naming the holder\'s `agent_id` otherwise). `project_id` defaults to the API key\'s project; any other project\'s id is 404. With an Idempotency-Key a repeated request returns the same agent with the same `X-Event-Position`.',
      body: CreateAgentBody,
      responses: { 200: { description: 'the created agent (repeated with its Idempotency-Key: the agent that request created)', schema: AgentView } },
      errors: [400, 401, 403, 404, 409, 422, 503],
      problemExtensions: {
        409: Type.Object({
          agent_id: Type.Optional(Type.String({ format: 'uuid', description: 'with `conflict` for a name that is taken: the agent holding it' })),
        }),
      },
      async handler({ body, principal, meta, signal }) {
        if (principal.kind !== 'key') throw new Error('unreachable');
        const projectId = body.project_id?.toLowerCase() ?? principal.project_id;
        await requireProjectForCommand(deps, principal, projectId);
        const name = agentNameForm(body.name);
        const language = canonicalLanguage(body.language ?? 'en');
        // Not a UUID, not "." or ".." (also sent as %2E): GET /agents/{agentId} takes either.
        const shape = agentNameShapeProblem(name);
        check(
          // Blank, too long (in the stored form), unpaired surrogates (which hashing and UTF-8 URLs turn into
          // U+FFFD: such a name would collide with others and could not be looked up), invisible characters.
          ...nameErrors('body.name', body.name, MAX_AGENT_NAME),
          shape ? { location: 'body.name', message: shape, value: body.name } : undefined,
          language === undefined ? { location: 'body.language', message: 'must be a valid BCP 47 language tag with an ISO 639 language code (e.g. "en", "en-US", "zh-Hant-TW")', value: body.language } : undefined,
          // The other texts too: a lone surrogate is stored as U+FFFD by UTF-8 stores (MongoDB) and readers, so
          // the agent read back would not be the one created (the memory service refuses them in every text).
          wellFormed('body.bio', body.bio),
          wellFormed('body.personality_prompt', body.personality_prompt),
          ...PHRASE_LISTS.flatMap((field) => (body[field] ?? []).map((phrase, i) => wellFormed(`body.${field}.${i}`, phrase))),
        );
        const agentId = uuidv5(`${projectId}/${meta.request_key}`, AGENT_ID_NAMESPACE);
        const profile: Omit<AgentProfile, 'owner'> = {
          agent_id: agentId, project_id: projectId, name,
          bio: body.bio ?? null, gender: body.gender ?? null, avatar_url: body.avatar_url ?? null,
          big5: body.big5 ?? NEUTRAL_BIG5, language: language ?? 'en', personality_prompt: body.personality_prompt ?? null,
          speech_patterns: body.speech_patterns ?? [], true_interests: body.true_interests ?? [], true_dislikes: body.true_dislikes ?? [],
        };
        const nameStream = agentNameStream(projectId, nameKey(name));
        // The name reservation and the agent commit together (one transaction on the embedded log; in
        // order on EventStoreDB, where an agent whose creation failed after its reservation leaves the
        // name held until the reservation is abandoned).
        const create = (abandoned: string | null) => deps.bus.handleAll([
          { stream: nameStream, decider: agentNameDecider, command: { type: 'ReserveAgentName', data: { project_id: projectId, name, agent_id: agentId, abandoned_holder: abandoned } } },
          { stream: agentStream(agentId), decider: agentDecider, command: { type: 'CreateAgent', data: profile } },
        ], meta);
        let results: Awaited<ReturnType<typeof create>>;
        try {
          results = await create(null);
        } catch (error) {
          if (!(error instanceof DomainError && error.kind === 'conflict')) throw error;
          // The agent id derives from the Idempotency-Key: if that agent exists, this key created it for
          // another name (the same name would have been a replay). A different request with the key: 422.
          if (meta.request_key.startsWith('idem:') && (await deps.events.streamInfo(agentStream(agentId)))) {
            throw new DomainError('idempotency_mismatch', 'this Idempotency-Key was used for a different request');
          }
          // Taken: unless its holder never got created (its creation failed after reserving), the name is in use.
          const abandoned = await abandonedHolder(deps, nameStream, clock);
          if (!abandoned) throw error;
          results = await create(abandoned);
        }
        const result = results[1]! as CommandResult<AgentState, AgentEvent>;
        const created = result.events[0]?.data;
        if (created) return { body: agentView(created), position: result.position };
        // Idempotent replay: answer with the agent as created the first time.
        await deps.waitFor('agents', result.position, signal);
        return { body: agentView(await findAgent(deps, projectId, agentId)), position: result.position };
      },
    }),
    route({
      method: 'GET', path: '/agents', operationId: 'listAgents', tag: 'Agents', auth: ['key'], scope: 'agents:read',
      summary: 'List the project\'s agents, oldest first',
      description: 'With `limit`, one page: the `X-Next-Cursor` header, present while more agents follow, is the `cursor` of the next page. Without `limit`, every agent.',
      query: ListAgentsQuery, readModels: ['agents'],
      responses: {
        200: {
          description: 'agents',
          schema: Type.Array(AgentView),
          headers: { 'X-Next-Cursor': { description: 'with `limit`: the `cursor` of the next page; absent on the last page', schema: Type.String() } },
        },
      },
      errors: [400, 401, 403, 404, 503],
      async handler({ query, principal }) {
        if (principal.kind !== 'key') throw new Error('unreachable');
        const projectId = query.project_id?.toLowerCase() ?? principal.project_id;
        await requireProject(deps, principal, projectId);
        const options = { where: { project_id: projectId }, sort: { field: 'created_at', order: 'asc' as const } };
        if (query.limit === undefined) {
          if (query.cursor !== undefined) throw badRequest('invalid query', [{ location: 'query.cursor', message: 'needs limit (the size of the page it starts)', value: query.cursor }]);
          const agents: AgentView[] = [];
          for await (const doc of findAll<AgentDoc>(deps.reads, 'agents', options)) agents.push(agentView(doc));
          return { body: agents };
        }
        const page = await deps.reads.find<AgentDoc>('agents', { ...options, limit: query.limit, cursor: query.cursor });
        const headers: Record<string, string> = page.next_cursor ? { 'X-Next-Cursor': page.next_cursor } : {};
        return { body: page.items.map(agentView), headers };
      },
    }),
    route({
      method: 'GET', path: '/agents/:agentId', operationId: 'getAgent', tag: 'Agents', auth: ['key'], scope: 'agents:read',
      summary: 'Get an agent by UUID or URL-encoded name, with personality, mood and profile',
      description: '`agentId` is the agent\'s UUID (in any case) or its exact name, percent-encoded as UTF-8 (`+` is a plus sign, a space is `%20`); both are trimmed, and a name NFC-normalised, as on creation. Names are case-sensitive. An agent of another project is 404, by id as by name.',
      params: AgentParams, readModels: ['agents'],
      responses: { 200: { description: 'the agent', schema: AgentView } },
      errors: [400, 401, 403, 404, 503],
      async handler({ params, principal }) {
        if (principal.kind !== 'key') throw new Error('unreachable');
        return { body: agentView(await findAgent(deps, principal.project_id, params.agentId)) };
      },
    }),
  ];
}

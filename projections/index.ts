import type { Logger } from '../infra/logger.js';
import type { Config } from '../infra/config.js';
import type { RecordedEvent } from '../infra/eventstore/port.js';
import { createEmbedder } from '../infra/providers/embeddings.js';
import { agentsProjection } from './agents/projection.js';
import { apiKeysProjection } from './apikeys/projection.js';
import { configProjection } from './config/projection.js';
import { memoriesProjection } from './memory/memories.js';
import { personalityProjection } from './memory/personality.js';
import type { IndexSink } from './memory/sync.js';
import { vectorsProjection, type Embedded } from './memory/vectors.js';
import type { Projection } from './projection.js';
import { projectsProjection } from './projects/projection.js';

/** Every platform read model, by name (the name `ops projections rebuild NAME` takes). */
export const platformProjections: Projection[] = [projectsProjection, apiKeysProjection, configProjection, agentsProjection];

/** What the HTTP side keeps in memory beside the read models, fed by the projections' committed batches. */
export interface ProjectionSinks {
  /**
   * Key ids whose api-keys documents changed: their cached authentications are dropped. `'all'` when the
   * projection reloaded from its stored checkpoint (a rebuilt generation went live, or another node applied
   * the events first, sharing the read models): it may have skipped key events, so no cached key is trusted.
   */
  keys?: (keyIds: string[] | 'all') => void;
  /** The BM25 index of the memories. */
  memories?: IndexSink<RecordedEvent[]>;
  /** The vector index of the memories. */
  vectors?: IndexSink<Embedded[]>;
}

/**
 * Every read model of both services (`memory-vectors` only when embeddings are configured). Without
 * sinks this is what the operator CLI rebuilds; the server passes its sinks (or proxies of them when
 * the projections run in their own thread).
 */
export function allProjections(config: Pick<Config, 'providers'>, sinks: ProjectionSinks = {}, log?: Logger): Projection[] {
  const embedder = createEmbedder(config.providers);
  const { keys } = sinks;
  const apiKeys: Projection = !keys ? apiKeysProjection : {
    ...apiKeysProjection,
    afterCommit: (applied) => keys(applied.map((e) => (e.data as { key_id: string }).key_id)),
    reset: async () => keys('all'),
  };
  return [
    projectsProjection, apiKeys, configProjection, agentsProjection,
    memoriesProjection(sinks.memories), personalityProjection,
    ...(embedder ? [vectorsProjection(embedder, sinks.vectors, log)] : []),
  ];
}

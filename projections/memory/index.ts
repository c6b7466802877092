import type { Config } from '../../infra/config.js';
import { createEmbedder } from '../../infra/providers/embeddings.js';
import type { Projection } from '../projection.js';
import { memoriesProjection } from './memories.js';
import { personalityProjection } from './personality.js';
import { vectorsProjection } from './vectors.js';

/**
 * The memory service's read models without their in-process indexes, for the ops CLI
 * (`ops projections rebuild memory-vectors` re-embeds with the configured embedding model).
 * `memory-vectors` exists only when embeddings are configured (EMBEDDINGS_PROVIDER is not `none`).
 */
export function memoryProjections(config: Pick<Config, 'providers'>): Projection[] {
  const embedder = createEmbedder(config.providers);
  return [memoriesProjection(), personalityProjection, ...(embedder ? [vectorsProjection(embedder)] : [])];
}

import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import { createEmbedder, LOCAL_EMBEDDING_MODEL } from '../../infra/providers/embeddings.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { rebuildProjection } from '../rebuild.js';
import { VECTORS, VECTORS_PROJECTION, vectorsProjection } from './vectors.js';

/** The model names of the local embedder's earlier versions (`local-hash-256-v1` … the one before `current`). */
export function olderLocalModels(current: string = LOCAL_EMBEDDING_MODEL): string[] {
  const match = /^(local-hash-\d+-v)(\d+)$/.exec(current);
  if (!match) return [];
  return Array.from({ length: Number(match[2]) - 1 }, (_, i) => `${match[1]}${i + 1}`);
}

/**
 * After an upgrade that changed the local embedder's tokens (its model name's version), the stored vectors
 * of the earlier version are not comparable with new ones, and semantic search leaves them out. When the
 * configured embedder is the local one and such vectors exist, this re-makes them in the background: a
 * blue/green rebuild of memory-vectors, as `ops projections rebuild` does, on the projection thread's own
 * connections and (lower) CPU priority. No provider is called, so it costs only CPU. Vectors of another
 * provider's model are left to the operator (re-embedding them calls and pays the provider).
 * `stop()` aborts a rebuild in progress (its unfinished generation is dropped).
 */
export function reembedOlderLocalVectors(config: Pick<Config, 'providers'>, events: EventStore, reads: ReadStore, log: Logger): { stop(): Promise<void> } {
  const embedder = createEmbedder(config.providers);
  if (!embedder || embedder.model !== LOCAL_EMBEDDING_MODEL) return { stop: async () => undefined };
  const abort = new AbortController();
  const run = (async () => {
    // One look per older version (a scan of the read model where none is left; once, at start).
    const older: string[] = [];
    for (const model of olderLocalModels()) {
      if ((await reads.find(VECTORS, { where: { model }, limit: 1 })).items.length > 0) older.push(model);
    }
    if (older.length === 0 || abort.signal.aborted) return;
    log.info({ models: older, configured: embedder.model }, 'memory-vectors: re-embedding every memory with the upgraded local embedder (blue/green rebuild)');
    const started = Date.now();
    const live = await rebuildProjection(events, reads, vectorsProjection(embedder, undefined, log), undefined, abort.signal);
    log.info({ projection: VECTORS_PROJECTION, generation: live.generation, position: live.position, ms: Date.now() - started }, 'memory-vectors: re-embedded; the new generation is live');
  })().catch((error: unknown) => {
    if (!abort.signal.aborted) log.error({ err: error }, 'memory-vectors: re-embedding failed; run `npm run ops -- projections rebuild memory-vectors`');
  });
  return {
    async stop() {
      abort.abort();
      await run;
    },
  };
}

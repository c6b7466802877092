import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import { createEmbedder, LOCAL_EMBEDDING_MODEL } from '../../infra/providers/embeddings.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { rebuildProjection } from '../rebuild.js';
import { VECTORS_PROJECTION, vectorsProjection } from './vectors.js';

/** The model names of the local embedder's earlier versions (`local-hash-256-v1` … the one before `current`). */
export function olderLocalModels(current: string = LOCAL_EMBEDDING_MODEL): string[] {
  const match = /^(local-hash-\d+-v)(\d+)$/.exec(current);
  if (!match) return [];
  return Array.from({ length: Number(match[2]) - 1 }, (_, i) => `${match[1]}${i + 1}`);
}

/**
 * After an upgrade that changed the local embedder's tokens (its model name's version), the stored vectors
 * of the earlier version are not comparable with new ones, and semantic search leaves them out. The HTTP
 * thread sees them when it loads its vector index (api/memory/module.ts) and asks the projection host to
 * `start` this: a blue/green rebuild of memory-vectors, as `ops projections rebuild` does, on the
 * projection thread's own connections and (lower) CPU priority. Only when the configured embedder is the
 * local one: no provider is called, so it costs only CPU. Vectors of another provider's model are left to
 * the operator (re-embedding them calls and pays the provider). One rebuild at a time; `stop()` aborts
 * the one in progress (its unfinished generation is dropped).
 */
export class Reembedder {
  private running: { abort: AbortController; done: Promise<void> } | undefined;

  constructor(
    private readonly config: Pick<Config, 'providers'>,
    private readonly events: EventStore,
    private readonly reads: ReadStore,
    private readonly log: Logger,
  ) {}

  /** `older`: the earlier local models the stored vectors were found to have been made with. */
  start(older: string[]): void {
    const embedder = createEmbedder(this.config.providers);
    if (this.running || older.length === 0 || !embedder || embedder.model !== LOCAL_EMBEDDING_MODEL) return;
    const abort = new AbortController();
    const done = (async () => {
      this.log.info({ models: older, configured: embedder.model }, 'memory-vectors: re-embedding every memory with the upgraded local embedder (blue/green rebuild)');
      const started = Date.now();
      const live = await rebuildProjection(this.events, this.reads, vectorsProjection(embedder, undefined, this.log), undefined, abort.signal);
      this.log.info({ projection: VECTORS_PROJECTION, generation: live.generation, position: live.position, ms: Date.now() - started }, 'memory-vectors: re-embedded; the new generation is live');
    })().catch((error: unknown) => {
      if (!abort.signal.aborted) this.log.error({ err: error }, 'memory-vectors: re-embedding failed; run `npm run ops -- projections rebuild memory-vectors`');
    }).finally(() => { this.running = undefined; });
    this.running = { abort, done };
  }

  async stop(): Promise<void> {
    const running = this.running;
    if (!running) return;
    running.abort.abort();
    await running.done;
  }
}

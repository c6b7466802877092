import type { CommandBus } from '../../commands/bus.js';
import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import { OpenAiChat } from '../../infra/providers/chat.js';
import { createEmbedder, LOCAL_EMBEDDING_MODEL } from '../../infra/providers/embeddings.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { memoriesIndexSync } from '../../projections/memory/memories.js';
import type { IndexSync } from '../../projections/memory/sync.js';
import { olderLocalModels } from '../../projections/memory/reembed.js';
import { vectorsIndexSync, type Embedded } from '../../projections/memory/vectors.js';
import type { RouteDef } from '../http/routes.js';
import { Retrieval } from './retrieval.js';
import { memoryRoutes } from './routes.js';

export interface MemoryModuleDeps {
  bus: CommandBus;
  events: EventStore;
  reads: ReadStore;
  config: Config;
  log: Logger;
  /** Asks the projections to re-embed vectors of these earlier local embedder models (see Reembedder). */
  reembed?(older: string[]): void;
  /** Waits until the named projections have applied `position`. */
  waitFor(projections: string[], position: number): Promise<void>;
}

export interface MemoryModule {
  /** The in-process indexes the memory projections feed (see ProjectionSinks). */
  sinks: { memories: IndexSync<RecordedEvent[]>; vectors?: IndexSync<Embedded[]> };
  routes: RouteDef[];
  /** For benchmarks and tests: the same retrieval the routes use, without HTTP. */
  retrieval: Retrieval;
}

/** The memory service's in-process BM25 and vector indexes (kept in step with their read models) and routes. */
export async function createMemoryModule(deps: MemoryModuleDeps): Promise<MemoryModule> {
  const { config, reads, log } = deps;
  const { llm } = config.providers;
  const lexical = new Bm25Index();
  const memories = memoriesIndexSync(reads, lexical);
  const embedder = createEmbedder(config.providers);
  const vectorIndex = new BruteForceVectorIndex();
  const vectors = embedder && vectorsIndexSync(reads, vectorIndex, embedder.model);
  if (vectors && embedder) {
    const reset = vectors.reset.bind(vectors);
    // After loading, say so when stored vectors were made by another model than the configured one.
    vectors.reset = async () => {
      await reset();
      // Loading the index has just read every vector: vectors of an earlier local embedder are re-made by
      // the projections (see Reembedder), others are the operator's to rebuild.
      const earlier = embedder.model === LOCAL_EMBEDDING_MODEL ? olderLocalModels() : [];
      const older: string[] = [];
      for (const [model, count] of vectorIndex.models()) {
        if (model === embedder.model) continue;
        if (earlier.includes(model)) {
          log.info({ model, count, configured: embedder.model }, 'vectors of an earlier local embedder are left out of searches until they are re-embedded (in the background)');
          older.push(model);
          continue;
        }
        log.warn({ model, count, configured: embedder.model }, 'vectors of another embedding model are left out of searches until `ops projections rebuild memory-vectors`');
      }
      if (older.length > 0) deps.reembed?.(older);
    };
  }
  const retrieval = new Retrieval({
    reads,
    headPosition: () => deps.events.headPosition(),
    waitFor: deps.waitFor,
    lexical: { index: lexical, sync: memories },
    semantic: vectors && embedder ? { embedder, index: vectorIndex, sync: vectors } : undefined,
  });
  const chat = llm.baseUrl
    ? new OpenAiChat({ baseUrl: llm.baseUrl, apiKey: llm.apiKey, timeoutMs: llm.timeoutMs, maxRetries: llm.maxRetries }, llm.chatModel, log)
    : undefined;
  return {
    sinks: { memories, vectors },
    routes: memoryRoutes({ bus: deps.bus, reads, retrieval, chat, chatMemoryBytes: llm.chatMemoryMaxBytes, waitFor: deps.waitFor }),
    retrieval,
  };
}

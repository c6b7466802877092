import type { CommandBus } from '../../commands/bus.js';
import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import { OpenAiChat } from '../../infra/providers/chat.js';
import { createEmbedder, LOCAL_EMBEDDING_MODEL, type Embedder } from '../../infra/providers/embeddings.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { memoriesIndexSync } from '../../projections/memory/memories.js';
import type { IndexSync } from '../../projections/memory/sync.js';
import { vectorsIndexSync, vectorsProjection, type Embedded } from '../../projections/memory/vectors.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import type { RouteDef } from '../http/routes.js';
import { Retrieval } from './retrieval.js';
import { memoryRoutes } from './routes.js';

export interface MemoryModuleDeps {
  bus: CommandBus;
  events: EventStore;
  reads: ReadStore;
  config: Config;
  log: Logger;
  /** Waits until the named projections have applied `position`. */
  waitFor(projections: string[], position: number): Promise<void>;
}

export interface MemoryModule {
  /** The in-process indexes the memory projections feed (see ProjectionSinks). */
  sinks: { memories: IndexSync<RecordedEvent[]>; vectors?: IndexSync<Embedded[]> };
  routes: RouteDef[];
  /** For benchmarks and tests: the same retrieval the routes use, without HTTP. */
  retrieval: Retrieval;
  /** Stops a re-embedding in progress (its unfinished generation is dropped): before the stores close. */
  stop(): Promise<void>;
}

/** An earlier version of the local embedder (its tokens changed, so its vectors are not comparable). */
const OLDER_LOCAL_MODEL = /^local-hash-\d+-v\d+$/;

/** The memory service's in-process BM25 and vector indexes (kept in step with their read models) and routes. */
export async function createMemoryModule(deps: MemoryModuleDeps): Promise<MemoryModule> {
  const { config, reads, log } = deps;
  const { llm } = config.providers;
  const lexical = new Bm25Index();
  const memories = memoriesIndexSync(reads, lexical);
  const embedder = createEmbedder(config.providers);
  const vectorIndex = new BruteForceVectorIndex();
  const vectors = embedder && vectorsIndexSync(reads, vectorIndex, embedder.model);
  const stopping = new AbortController();
  let reembedding: Promise<void> | undefined;
  /**
   * Vectors of an earlier version of the local embedder (an upgrade changed its tokenizer) are re-made in
   * the background: a blue/green rebuild of memory-vectors, as `ops projections rebuild` does, so semantic
   * search comes back without an operator. It costs nothing but CPU (no provider is called). Until the new
   * generation is swapped in, those memories are found by lexical search only. Vectors of another provider's
   * model are left to the operator: re-embedding them calls (and pays) the provider.
   */
  const reembedOlderLocalVectors = (embedder: Embedder, older: Array<[string, number]>) => {
    reembedding ??= (async () => {
      log.info({ models: Object.fromEntries(older), configured: embedder.model }, 'memory-vectors: re-embedding every memory with the upgraded local embedder (blue/green rebuild)');
      const started = Date.now();
      const live = await rebuildProjection(deps.events, reads, vectorsProjection(embedder, undefined, log), undefined, stopping.signal);
      log.info({ generation: live.generation, position: live.position, ms: Date.now() - started }, 'memory-vectors: re-embedded; the new generation is live');
    })().catch((error: unknown) => {
      if (!stopping.signal.aborted) log.error({ err: error }, 'memory-vectors: re-embedding failed; run `npm run ops -- projections rebuild memory-vectors`');
    }).finally(() => { reembedding = undefined; });
  };
  if (vectors && embedder) {
    const reset = vectors.reset.bind(vectors);
    // After loading, say so when stored vectors were made by another model than the configured one.
    vectors.reset = async () => {
      await reset();
      const others = [...vectorIndex.models()].filter(([model]) => model !== embedder.model);
      const older = others.filter(([model]) => embedder.model === LOCAL_EMBEDDING_MODEL && OLDER_LOCAL_MODEL.test(model));
      if (older.length > 0 && !stopping.signal.aborted) reembedOlderLocalVectors(embedder, older);
      for (const [model, count] of others) {
        if (older.some(([m]) => m === model)) continue;
        log.warn({ model, count, configured: embedder.model }, 'vectors of another embedding model are left out of searches until `ops projections rebuild memory-vectors`');
      }
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
    ? new OpenAiChat({ baseUrl: llm.baseUrl, apiKey: llm.apiKey, timeoutMs: llm.timeoutMs, maxRetries: llm.maxRetries }, llm.chatModel)
    : undefined;
  return {
    sinks: { memories, vectors },
    routes: memoryRoutes({ bus: deps.bus, reads, retrieval, chat, waitFor: deps.waitFor }),
    retrieval,
    async stop() {
      stopping.abort();
      await reembedding;
    },
  };
}

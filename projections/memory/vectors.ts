import { MEMORY_STREAM_PREFIX, textKey, type MemoryDeleted, type MemoryStored, type MemoryUpdated, type ScopeDeleted } from '../../domain/memory/decider.js';
import type { EventStore, RecordedEvent } from '../../infra/eventstore/port.js';
import { getMany, type ReadStore } from '../../infra/readstore/port.js';
import type { Embedder } from '../../infra/providers/embeddings.js';
import { isPermanentRefusal } from '../../infra/providers/http.js';
import type { Logger } from '../../infra/logger.js';
import type { VectorIndex } from '../../infra/search/vector.js';
import type { Projection } from '../projection.js';
import { allDocs, deleteScopeDocs, memoryDocId, scopeKey } from './memories.js';
import { IndexSync, type IndexSink } from './sync.js';

export const VECTORS_PROJECTION = 'memory-vectors';
export const VECTORS = 'memory_vectors';

export interface VectorDoc {
  id: string;
  agent: string;
  user: string;
  memory_id: string;
  model: string;
  dim: number;
  /** See encodeVector. */
  vector: string;
  /** textKey of the text embedded (absent in documents written before it was recorded): see vectorsProjection's reuse. */
  text_key?: string;
  [field: string]: unknown;
}

/**
 * Vectors as text in the document: base64 of the Float32 (little-endian) components, or, for sparse
 * vectors (the local embedder's have about a fifth of their components set), `s:` + base64 of
 * (uint16 index, float32 value) pairs, which keeps documents and the read store's writes small.
 */
export function encodeVector(v: Float32Array): string {
  let nonZero = 0;
  for (let i = 0; i < v.length; i++) if (v[i] !== 0) nonZero++;
  if (nonZero * 6 >= v.length * 4 || v.length > 65536) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
  const bytes = Buffer.alloc(nonZero * 6);
  let at = 0;
  for (let i = 0; i < v.length; i++) {
    if (v[i] === 0) continue;
    bytes.writeUInt16LE(i, at);
    bytes.writeFloatLE(v[i]!, at + 2);
    at += 6;
  }
  return `s:${bytes.toString('base64')}`;
}

export function decodeVector(text: string, dim: number): Float32Array {
  const out = new Float32Array(dim);
  if (text.startsWith('s:')) {
    const bytes = Buffer.from(text.slice(2), 'base64');
    for (let at = 0; at + 6 <= bytes.length; at += 6) out[bytes.readUInt16LE(at)] = bytes.readFloatLE(at + 2);
    return out;
  }
  const bytes = Buffer.from(text, 'base64');
  for (let i = 0; i < dim && i * 4 + 4 <= bytes.length; i++) out[i] = bytes.readFloatLE(i * 4);
  return out;
}

type Handled = MemoryStored | MemoryUpdated | MemoryDeleted | ScopeDeleted;
/** A committed event with the embedding computed for it, if it carries a text. */
export type Embedded = { event: Handled; vector?: Float32Array };

/** The vector index of every scope kept in step with the `memory-vectors` read model. */
export function vectorsIndexSync(reads: ReadStore, vectors: VectorIndex, model: string): IndexSync<Embedded[]> {
  return new IndexSync<Embedded[]>(VECTORS_PROJECTION, reads, async () => {
    vectors.clear();
    for await (const doc of allDocs<VectorDoc>(reads, VECTORS)) {
      vectors.upsert(scopeKey(doc.agent, doc.user), doc.memory_id, doc.model, decodeVector(doc.vector, doc.dim));
    }
  }, (batch) => {
    for (const { event: e, vector } of batch) {
      const scope = scopeKey(e.data.agent, e.data.user);
      if (e.type === 'MemoryStored' || e.type === 'MemoryUpdated') {
        if (vector) vectors.upsert(scope, e.data.memory_id, model, vector);
        else vectors.remove(scope, e.data.memory_id); // the provider refused this text: no (stale) vector
      } else if (e.type === 'MemoryDeleted') vectors.remove(scope, e.data.memory_id);
      else if (e.type === 'ScopeDeleted') vectors.dropScope(scope);
    }
  });
}

type Texted = RecordedEvent & (MemoryStored | MemoryUpdated);
type Log = Pick<EventStore, 'readStream' | 'headPosition'>;

/** How many scope streams' later changes are remembered while a runner or a rebuild is behind the head. */
const LOOKAHEAD_STREAMS = 64;

/**
 * Which texts are superseded by an event that follows them in the log: a later store, update or
 * deletion of the same memory, or the deletion of its scope. A projection behind the head (a rebuild
 * from position 0, a runner catching up) must not send those texts to the embeddings provider: they
 * would only be replaced, and a text the user deleted must not go to a third party again.
 */
class Lookahead {
  /**
   * Per scope stream: the revisions from which and up to which (`next`, exclusive) its later events were
   * read, and the last change of each memory and of the scope among them.
   */
  private readonly streams = new Map<string, Changes & { from: number; next: number }>();

  async superseded(candidates: Texted[], batch: RecordedEvent[], log: Log): Promise<Set<string>> {
    const out = new Set<string>();
    const within = changes(batch);
    for (const e of candidates) if (isSupersededBy(e, within)) out.add(e.id);
    const end = batch[batch.length - 1]!.position;
    if ((await log.headPosition()) <= end) {
      this.streams.clear(); // caught up: nothing follows the batch
      return out;
    }
    const current = new Set<string>();
    for (const e of candidates) {
      if (out.has(e.id)) continue;
      let later = this.streams.get(e.stream);
      if (!later || later.from > e.revision + 1) {
        const read = await readFrom(log, e.stream, e.revision + 1);
        later = { from: e.revision + 1, next: read.at(-1) ? read.at(-1)!.revision + 1 : e.revision + 1, ...changes(read) };
        this.streams.delete(e.stream);
        this.streams.set(e.stream, later);
        if (this.streams.size > LOOKAHEAD_STREAMS) this.streams.delete(this.streams.keys().next().value!);
      } else if (!current.has(e.stream)) {
        // Read at an earlier batch: the stream may have grown since (a deletion meanwhile must keep the
        // text from the provider just the same).
        const read = await readFrom(log, e.stream, later.next);
        if (read.length > 0) later.next = read.at(-1)!.revision + 1;
        const added = changes(read);
        for (const [key, position] of added.memory) later.memory.set(key, Math.max(position, later.memory.get(key) ?? -1));
        for (const [key, position] of added.scope) later.scope.set(key, Math.max(position, later.scope.get(key) ?? -1));
      }
      current.add(e.stream);
      if (isSupersededBy(e, later)) out.add(e.id);
    }
    return out;
  }
}

async function readFrom(log: Log, stream: string, fromRevision: number): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for (let from = fromRevision; ;) {
    const page = await log.readStream(stream, { fromRevision: from, limit: 1000 });
    out.push(...page);
    if (page.length < 1000) return out;
    from = page[page.length - 1]!.revision + 1;
  }
}

/** The last position at which each memory (scope + id), and each scope as a whole, changed. */
type Changes = { memory: Map<string, number>; scope: Map<string, number> };

/** Events that replace or delete a memory's text (a MemoryDeletionRefused names a memory the scope did not hold: no change). */
const CHANGES_MEMORY = new Set(['MemoryStored', 'MemoryUpdated', 'MemoryDeleted']);

function changes(events: RecordedEvent[]): Changes {
  const out: Changes = { memory: new Map(), scope: new Map() };
  for (const e of events) {
    const data = e.data as { agent: string; user: string; memory_id?: string };
    const scope = scopeKey(data.agent, data.user);
    if (e.type === 'ScopeDeleted') out.scope.set(scope, e.position);
    else if (CHANGES_MEMORY.has(e.type)) out.memory.set(`${scope}\u0000${data.memory_id}`, e.position);
  }
  return out;
}

function isSupersededBy(e: Texted, later: Changes): boolean {
  const scope = scopeKey(e.data.agent, e.data.user);
  return (later.memory.get(`${scope}\u0000${e.data.memory_id}`) ?? -1) > e.position || (later.scope.get(scope) ?? -1) > e.position;
}

/**
 * One embedding per live memory, with the model name and dimension. Embeddings are computed in
 * `prepare`, before the read store's transaction opens, so no provider call happens inside it. A provider
 * that fails for a while (network, 5xx, 429) fails the batch, and the runner retries it from its checkpoint
 * until the provider answers: until then reads that need vectors wait, then answer 503 (so does a wrong key or base URL,
 * which heals once fixed). A provider that refuses a batch's texts for good (isPermanentRefusal: a 400/413/422, e.g. a
 * text over the model's context length) is asked for each text on its own, and a text it still refuses gets no
 * vector (logged, and any older vector of the memory is dropped): one text must not stop the projection
 * for every scope. The memory stays in lexical search and export; rebuilding this projection re-embeds
 * every live memory from the log with the configured model. A text that a later event of the log
 * replaces or deletes is never sent to a provider elsewhere (see Lookahead; an in-process embedder, which sends no text
 * anywhere, embeds it instead, which costs less than reading ahead in the log). With a `sink`, committed batches (with their
 * vectors) also go to the vector index (see vectorsIndexSync).
 */
export function vectorsProjection(embedder: Embedder, sink?: IndexSink<Embedded[]>, log?: Logger): Projection {
  /**
   * Event id → its text's embedding, from `prepare` until the batch has been committed. null: refused by
   * the provider; 'superseded': a later event of the log replaces or deletes the text, so it was not embedded.
   */
  const prepared = new Map<string, Float32Array | null | 'superseded'>();
  const lookahead = new Lookahead();

  async function embedEach(events: Texted[], signal?: AbortSignal): Promise<void> {
    for (const e of events) {
      try {
        prepared.set(e.id, (await embedder.embed([e.data.text], signal))[0]!);
      } catch (error) {
        if (!isPermanentRefusal(error)) throw error;
        const { status, body } = error;
        log?.error({ provider: 'embeddings', status, upstream_reply: body, agent: e.data.agent, user: e.data.user, memory_id: e.data.memory_id, position: e.position },
          'embeddings: the provider refused this memory\'s text; it gets no vector (rebuild memory-vectors to try again)');
        prepared.set(e.id, null);
      }
    }
  }

  /**
   * Updates whose memory's vector was made by this model from this very text (a new session label, a store sent
   * with an Idempotency-Key that changed nothing) take that vector instead of a provider call, which a hosted
   * provider charges for; the others are returned to be embedded. A vector depends on its model and text only,
   * so the live documents are a safe source whatever generation is being written (a rebuild passes no reads: it
   * re-embeds everything, e.g. after a provider changed what a model name serves).
   */
  async function reuse(texts: Texted[], reads: Pick<ReadStore, 'find'>): Promise<Texted[]> {
    const updates = texts.filter((e) => e.type === 'MemoryUpdated');
    if (updates.length === 0) return texts;
    const ids = [...new Set(updates.map((e) => memoryDocId(e.data.agent, e.data.user, e.data.memory_id)))];
    const docs = await getMany<VectorDoc>(reads, VECTORS, ids);
    return texts.filter((e) => {
      const doc = e.type === 'MemoryUpdated' ? docs.get(memoryDocId(e.data.agent, e.data.user, e.data.memory_id)) : undefined;
      if (!doc || doc.model !== embedder.model || doc.text_key !== textKey(e.data.text)) return true;
      prepared.set(e.id, decodeVector(doc.vector, doc.dim));
      return false;
    });
  }

  return {
    name: VECTORS_PROJECTION,
    collections: [{ name: VECTORS, indexes: [['agent', 'user']] }],
    canHandle: ['MemoryStored', 'MemoryUpdated', 'MemoryDeleted', 'ScopeDeleted'],
    streams: [MEMORY_STREAM_PREFIX],
    async prepare(events, log, reads, signal) {
      const texts = events.filter((e) => e.type === 'MemoryStored' || e.type === 'MemoryUpdated') as unknown as Texted[];
      if (texts.length === 0) return;
      // Reuse first: an update that keeps the text keeps its vector even when a later event of the log changes
      // the memory again. Taken for superseded, it would delete the vector, and a later update that also keeps
      // the text (a second relabel) would find none to reuse and be sent to the provider.
      const candidates = reads ? await reuse(texts, reads) : texts;
      if (candidates.length === 0) return;
      const superseded = embedder.inProcess ? new Set<string>() : await lookahead.superseded(candidates, events, log);
      for (const id of superseded) prepared.set(id, 'superseded');
      const toEmbed = candidates.filter((e) => !superseded.has(e.id));
      if (toEmbed.length === 0) return;
      let vectors: Float32Array[];
      try {
        // The runner's or the rebuild's signal: a stop does not wait for a provider that does not answer.
        vectors = await embedder.embed(toEmbed.map((e) => e.data.text), signal);
      } catch (error) {
        if (!isPermanentRefusal(error)) throw error;
        await embedEach(toEmbed, signal);
        return;
      }
      toEmbed.forEach((e, i) => prepared.set(e.id, vectors[i]!));
    },
    async apply(event, writer) {
      const e = event as unknown as Handled;
      const { agent, user } = e.data;
      switch (e.type) {
        case 'MemoryStored':
        case 'MemoryUpdated': {
          let vector = prepared.get(event.id);
          if (vector === undefined) {
            // Only if the same projection object serves two runners at once; normally `prepare` did this.
            await embedEach([event as Texted]);
            vector = prepared.get(event.id)!;
          }
          if (vector === null || vector === 'superseded') {
            await writer.delete(VECTORS, memoryDocId(agent, user, e.data.memory_id), event.position);
            return;
          }
          await writer.put<VectorDoc>(VECTORS, {
            id: memoryDocId(agent, user, e.data.memory_id), agent, user, memory_id: e.data.memory_id,
            model: embedder.model, dim: vector.length, vector: encodeVector(vector), text_key: textKey(e.data.text),
          }, event.position);
          return;
        }
        case 'MemoryDeleted':
          await writer.delete(VECTORS, memoryDocId(agent, user, e.data.memory_id), event.position);
          return;
        case 'ScopeDeleted':
          await deleteScopeDocs(writer, VECTORS, agent, user, event.position);
          return;
      }
    },
    afterCommit(events, generation) {
      const batch = events.map((event) => {
        const vector = prepared.get(event.id);
        return { event: event as unknown as Handled, vector: vector instanceof Float32Array ? vector : undefined };
      });
      for (const event of events) prepared.delete(event.id);
      sink?.afterCommit(batch, generation);
    },
    async reset() {
      prepared.clear(); // embeddings of a batch that was never committed here
      await sink?.reset();
    },
    // The vectors that process computed are in the documents: read them rather than ask the provider again.
    async committedElsewhere(events, generation, reads) {
      const batch: Embedded[] = [];
      for (const event of events) {
        prepared.delete(event.id);
        const e = event as unknown as Handled;
        let vector: Float32Array | undefined;
        if (e.type === 'MemoryStored' || e.type === 'MemoryUpdated') {
          const doc = await reads.get<VectorDoc>(VECTORS, memoryDocId(e.data.agent, e.data.user, e.data.memory_id));
          // Made by another model (a node configured differently): left out of searches, as a reload would.
          if (doc && doc.model === embedder.model) vector = decodeVector(doc.vector, doc.dim);
        }
        batch.push({ event: e, vector });
      }
      sink?.afterCommit(batch, generation);
    },
  };
}

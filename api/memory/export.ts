import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from '../../infra/logger.js';
import { getMany, type ReadStore, type Stored } from '../../infra/readstore/port.js';
import { MEMORIES, type MemoryDoc } from '../../projections/memory/memories.js';
import { decodeVector, VECTORS, VECTORS_PROJECTION, type VectorDoc } from '../../projections/memory/vectors.js';
import { ClientGoneError } from '../http/routes.js';
import { toView, type Retrieval } from './retrieval.js';
import type { Scope } from './schemas.js';

/**
 * Memories read from the read model at a time: one page is read on the HTTP thread in one go, so it bounds how
 * long other requests wait (100k memories, bench/export.ts: probe max 60 ms with 1,000, 184 ms with 10,000, and
 * the export itself faster). The embedded store's pages sorted by `created_at` each start with an index range
 * at the cursor, so many small pages cost no more than few large ones.
 */
export const EXPORT_READ_PAGE = 1_000;

/**
 * Memories converted to JSON and written at a time (about 0.35 MB and 15-20 ms of the HTTP thread with local
 * vectors): between two chunks the export waits for the connection to take the last one and lets the other
 * requests of the process run.
 */
export const EXPORT_CHUNK = 250;

export interface ExportDeps {
  reads: ReadStore;
  retrieval: Retrieval;
  waitFor(projections: string[], position: number, signal?: AbortSignal): Promise<void>;
}

/**
 * GET /v1/export as JSON text in chunks: `{"scope":…,"personality":…,"memories":[` then the memories, oldest
 * first, EXPORT_CHUNK at a time, then `]}`: the same text JSON.stringify makes of the whole answer, without
 * ever holding it (or the scope's vectors) in memory, and without holding the HTTP thread for more than one
 * chunk.
 *
 * The export sees every write acknowledged before the request (it waits for the read models first). The
 * memories are read page by page while the answer is sent, so a change made after the request arrived may
 * or may not show, as in any export of more than one page; a memory appears at most once (one deleted and
 * stored again with the same id meanwhile is not repeated), and in one state: its text, session, times and
 * vector are of the same moment (see withVectors). What can fail with a problem response fails
 * before the answer begins: the wait, the personality and the first chunk. A later failure (the read store,
 * or a vector wait that times out) can only cut the connection: see Reply.stream.
 */
export async function exportScope(deps: ExportDeps, scope: Scope, caller: { readonly signal: AbortSignal; readonly log: Logger }): Promise<AsyncIterable<string>> {
  await deps.retrieval.consistent(deps.retrieval.allReadModels(), caller.signal);
  const personality = await deps.retrieval.personality(scope);
  const chunks = memoryChunks(deps, scope, caller);
  const first = await chunks.next();
  const head = `{"scope":${JSON.stringify({ agent: scope.agent, user: scope.user })},"personality":${JSON.stringify(personality?.personality ?? '')},"memories":[`;
  return (async function* text() {
    try {
      yield head;
      if (!first.done) {
        yield first.value;
        for await (const chunk of chunks) yield `,${chunk}`;
      }
      yield ']}';
    } catch (error) {
      if (!(error instanceof ClientGoneError)) caller.log.error({ err: error }, 'export failed after its answer began: the connection is cut, so the client sees an incomplete answer');
      throw error;
    }
  })();
}

/** The scope's live memories as JSON texts of at most EXPORT_CHUNK memories each (comma-separated), oldest first. */
async function* memoryChunks(deps: ExportDeps, { agent, user }: Scope, caller: { readonly signal: AbortSignal }): AsyncGenerator<string> {
  // Later pages are read after changes made during the export: a memory deleted and stored again with the
  // same id moves to the end (a new created_at) and would be listed twice. Ids only: about 80 bytes a memory.
  const sent = new Set<string>();
  for (let cursor: string | undefined; ;) {
    const page = await deps.reads.find<MemoryDoc>(MEMORIES, { where: { agent, user }, sort: { field: 'created_at', order: 'asc' }, limit: EXPORT_READ_PAGE, cursor });
    await nextTurn();
    const docs = page.items.filter((doc) => !sent.has(doc.memory_id));
    for (const doc of docs) sent.add(doc.memory_id);
    for (let at = 0; at < docs.length; at += EXPORT_CHUNK) {
      const memories = await withVectors(deps, docs.slice(at, at + EXPORT_CHUNK), caller.signal);
      yield memories.map((m) => JSON.stringify(m)).join(',');
      // Asked for the next chunk (the connection took this one): the requests waiting meanwhile go first.
      await nextTurn();
    }
    if (!page.next_cursor) return;
    cursor = page.next_cursor;
  }
}

/**
 * The memories as exported, each with the vector of its text. A vector belongs to the text it was computed
 * from: both documents carry the position of the event that set the text (or the session). A memory whose
 * vector does not match is read again: it may have changed or gone after its page was read (it is then
 * exported as it is now, or not at all), or be ahead in `memories` (which needs no provider call): its vector
 * is waited for. One still without a matching vector after that (a text the provider refused, or one changed
 * again and again meanwhile) is exported without a vector, never with another text's, and never as a memory
 * deleted meanwhile without the vector it had. One query per round (a MongoDB read store would pay a round
 * trip per memory for reads one by one).
 */
async function withVectors(deps: ExportDeps, page: Array<Stored<MemoryDoc>>, signal: AbortSignal) {
  const docs = new Map(page.map((doc) => [doc.id, doc]));
  const vectors = new Map<string, Stored<VectorDoc>>();
  let pending = page;
  for (let round = 0; deps.retrieval.hasVectors && pending.length > 0 && round < 3; round++) {
    if (round > 0) await deps.waitFor([VECTORS_PROJECTION], pending.reduce((max, doc) => Math.max(max, doc._position), 0), signal);
    const found = await getMany<VectorDoc>(deps.reads, VECTORS, pending.map((doc) => doc.id));
    const unmatched = pending.filter((doc) => {
      const v = found.get(doc.id);
      if (v?._position !== doc._position) return true;
      vectors.set(doc.id, v);
      return false;
    });
    if (unmatched.length === 0) break;
    const current = await getMany<MemoryDoc>(deps.reads, MEMORIES, unmatched.map((doc) => doc.id));
    pending = [];
    for (const { id } of unmatched) {
      const doc = current.get(id);
      if (!doc) {
        docs.delete(id);
        continue;
      }
      docs.set(id, doc);
      pending.push(doc);
    }
  }
  return [...docs.values()].map((doc) => {
    const v = vectors.get(doc.id);
    return { ...toView(doc), ...(v ? { vector: exportedVector(v), vector_model: v.model } : {}) };
  });
}

/** 9 significant digits, enough to give back every Float32 exactly; most local vector components are 0. */
const exportedVector = (v: VectorDoc) => Array.from(decodeVector(v.vector, v.dim), (x) => (x === 0 ? 0 : Number(x.toPrecision(9))));

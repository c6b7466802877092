import { MEMORY_STREAM_PREFIX, type MemoryDeleted, type MemoryStored, type MemoryUpdated, type ScopeDeleted } from '../../domain/memory/decider.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { findAll, type ProjectionWriter, type ReadStore } from '../../infra/readstore/port.js';
import type { LexicalIndex } from '../../infra/search/lexical.js';
import type { Projection } from '../projection.js';
import { IndexSync, type IndexSink } from './sync.js';

export const MEMORIES_PROJECTION = 'memories';
export const MEMORIES = 'memories';

export interface MemoryDoc {
  id: string;
  agent: string;
  user: string;
  memory_id: string;
  text: string;
  session: string | null;
  created_at: string;
  updated_at: string;
  [field: string]: unknown;
}

export const scopeKey = (agent: string, user: string) => `${agent}/${user}`;
export const memoryDocId = (agent: string, user: string, memoryId: string) => `${agent}/${user}/${memoryId}`;

type Handled = MemoryStored | MemoryUpdated | MemoryDeleted | ScopeDeleted;
const HANDLED = ['MemoryStored', 'MemoryUpdated', 'MemoryDeleted', 'ScopeDeleted'] as const;

/**
 * Pages are large on purpose: without planner statistics the embedded read store answers a page sorted
 * by id by scanning and sorting the matching rows, so the number of pages, not their size, is the cost.
 */
const PAGE = 10_000;

/** Deletes every live document of a scope (cursor-paged, so replaying a ScopeDeleted terminates). */
export async function deleteScopeDocs(writer: ProjectionWriter, collection: string, agent: string, user: string, position: number): Promise<void> {
  // Keyset paging by id: tombstoning the documents already seen does not move the cursor.
  for await (const doc of findAll(writer, collection, { where: { agent, user } }, PAGE)) await writer.delete(collection, doc.id, position);
}

/** Every live document of a collection, in pages (for reloading in-process indexes). */
export function allDocs<T extends { id: string; [field: string]: unknown }>(reads: ReadStore, collection: string): AsyncIterable<T> {
  return findAll<T>(reads, collection, {}, PAGE);
}

/** The BM25 index of every scope kept in step with the `memories` read model. */
export function memoriesIndexSync(reads: ReadStore, lexical: LexicalIndex): IndexSync<RecordedEvent[]> {
  return new IndexSync<RecordedEvent[]>(MEMORIES_PROJECTION, reads, async () => {
    lexical.clear();
    for await (const doc of allDocs<MemoryDoc>(reads, MEMORIES)) lexical.upsert(scopeKey(doc.agent, doc.user), doc.memory_id, doc.text);
  }, (events) => {
    for (const event of events) {
      const e = event as unknown as Handled;
      const scope = scopeKey(e.data.agent, e.data.user);
      if (e.type === 'MemoryStored' || e.type === 'MemoryUpdated') lexical.upsert(scope, e.data.memory_id, e.data.text);
      else if (e.type === 'MemoryDeleted') lexical.remove(scope, e.data.memory_id);
      else if (e.type === 'ScopeDeleted') lexical.dropScope(scope);
    }
  });
}

/** The live memories of every scope; with a `sink`, committed batches also go to the BM25 index (see memoriesIndexSync). */
export function memoriesProjection(sink?: IndexSink<RecordedEvent[]>): Projection {
  return {
    name: MEMORIES_PROJECTION,
    collections: [{ name: MEMORIES, indexes: [['agent', 'user', 'created_at']] }],
    canHandle: HANDLED,
    streams: [MEMORY_STREAM_PREFIX],
    async apply(event, writer) {
      const e = event as unknown as Handled;
      const { agent, user } = e.data;
      switch (e.type) {
        case 'MemoryStored':
        case 'MemoryUpdated': {
          const d = e.data;
          await writer.put<MemoryDoc>(MEMORIES, {
            id: memoryDocId(agent, user, d.memory_id), agent, user, memory_id: d.memory_id, text: d.text, session: d.session,
            created_at: d.created_at, updated_at: e.type === 'MemoryUpdated' ? e.data.updated_at : d.created_at,
          }, event.position);
          return;
        }
        case 'MemoryDeleted':
          await writer.delete(MEMORIES, memoryDocId(agent, user, e.data.memory_id), event.position);
          return;
        case 'ScopeDeleted':
          await deleteScopeDocs(writer, MEMORIES, agent, user, event.position);
          return;
      }
    },
    afterCommit: sink && ((events, generation) => sink.afterCommit(events, generation)),
    reset: sink && (() => sink.reset()),
    // The BM25 index follows the events themselves: another process's commit of them changes it as ours would.
    committedElsewhere: sink && (async (events, generation) => sink.afterCommit(events, generation)),
  };
}

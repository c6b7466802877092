import { randomUUID as uuid } from 'node:crypto';
import { memoryIdFor, memoryStream } from '../../domain/memory/decider.js';
import type { NewEvent } from '../../infra/eventstore/port.js';
import { MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { caughtUp, type TestCairn } from './cairn.js';

/** How long seedMemories waits for the read models: well inside tap's 300 s a file (package.json), far above what seeding takes. */
const SEED_WAIT_MS = 60_000;

export type Scope = { agent: string; user: string };
/** A memory as GET /v1/export shows it. */
export type Exported = { id: string; text: string; session: string | null; created_at: string; updated_at: string; vector?: number[]; vector_model?: string };

/** About 7 bytes a word (120 words: about 1 KB), so exports are much larger than what sockets buffer ahead of a paused client. */
export const textOf = (i: number, words = 120) => `memory ${i}: ${Array.from({ length: words }, (_, k) => `w${(i * 31 + k * 7) % 997}`).join(' ')}`;

/**
 * Appends `count` MemoryStored events to one scope (oldest first, one millisecond apart, an hour ago), 1,000 per
 * append, and waits for the read models: much faster than as many POST /v1/memories. Returns the memories as the
 * export shows them (without vectors).
 */
export async function seedMemories(app: TestCairn, scope: Scope, count: number, options: { words?: number; vectors?: boolean; text?: (i: number) => string } = {}): Promise<Exported[]> {
  const start = Date.now() - 3_600_000;
  const memories: Exported[] = [];
  for (let at = 0; at < count; at += 1000) {
    const batch: NewEvent[] = [];
    for (let i = at; i < Math.min(count, at + 1000); i++) {
      const text = options.text?.(i) ?? textOf(i, options.words);
      const created = new Date(start + i).toISOString();
      const session = i % 3 === 0 ? null : `chat-${i % 7}`;
      memories.push({ id: memoryIdFor(text), text, session, created_at: created, updated_at: created });
      batch.push({
        id: uuid(), type: 'MemoryStored',
        data: { ...scope, memory_id: memoryIdFor(text), text, session, created_at: created },
        metadata: { correlation_id: uuid(), causation_id: uuid(), actor: 'owner', occurred_at: created },
      });
    }
    await app.events.append(memoryStream(scope.agent, scope.user), batch, at === 0 ? 'no_stream' : at - 1);
  }
  // Not bounded by the app's CONSISTENCY_TIMEOUT_MS (5 s by default): with it, seeding failed in a full run on a loaded
  // machine ("read model memories has not reached position 3000 yet (at 0)" in ops-backup-progress, 4000 in memory-reembed).
  await caughtUp(app, options.vectors === false ? [MEMORIES_PROJECTION] : [MEMORIES_PROJECTION, VECTORS_PROJECTION], SEED_WAIT_MS);
  return memories;
}

import type { EventStore, RecordedEvent } from '../infra/eventstore/port.js';
import type { CheckpointInfo, ReadStore } from '../infra/readstore/port.js';
import { projectionAhead } from './ahead.js';
import { relevantTo, type Projection } from './projection.js';

const BATCH = 1000;

export interface RebuildProgress {
  /** Log position the new generation has reached. */
  position: number;
  /** Last known head of the log (grows if events arrive during the rebuild). */
  head: number;
  /** Events this projection handled so far. */
  applied: number;
}

export class RebuildSupersededError extends Error {
  override readonly name = 'RebuildSupersededError';
  constructor(readonly projection: string) {
    super(`rebuild of ${projection} was superseded: another rebuild of it started meanwhile`);
  }
}

/**
 * A rebuild stopped by an event its projection could not apply, or a batch it could not prepare (a text the embeddings
 * provider refuses): the error names them, as the live runner's log does, so an operator can look at that event
 * (`ops stream show STREAM`), and says the live generation is unchanged. The projection's own error is the `cause`.
 */
export class RebuildFailedError extends Error {
  override readonly name = 'RebuildFailedError';
  constructor(
    readonly projection: string,
    readonly at: { event: Pick<RecordedEvent, 'position' | 'id' | 'type' | 'stream'> } | { batch: { first: number; last: number } },
    cause: unknown,
  ) {
    const where = 'event' in at
      ? `at the event at position ${at.event.position} (${at.event.type} ${at.event.id} in stream ${at.event.stream})`
      : at.batch.first === at.batch.last ? `preparing the event at position ${at.batch.first}` : `preparing the events at positions ${at.batch.first}–${at.batch.last}`;
    super(`rebuild of ${projection} failed ${where}: ${cause instanceof Error ? cause.message : String(cause)}; the live generation is unchanged`, { cause });
  }
}

/**
 * Blue/green rebuild: writes a fresh generation from position 0 beside the live one, then swaps it in
 * once it has caught up with the head. Queries keep reading the old generation until the swap; a live
 * runner (in this process or another) sees its checkpoint moved and resumes from the new one.
 * A rebuild that fails or is aborted (`signal`) drops its unfinished generation: nothing looks in progress.
 */
export async function rebuildProjection(
  events: EventStore, reads: ReadStore, projection: Projection, onProgress?: (p: RebuildProgress) => void, signal?: AbortSignal,
): Promise<CheckpointInfo> {
  const { name } = projection;
  await reads.register(name, projection.collections);
  const start = await reads.startRebuild(name);
  try {
    return await rebuildFrom(events, reads, projection, start, onProgress, signal);
  } catch (error) {
    // A superseding rebuild owns the slot now; abandonRebuild leaves its generation alone anyway.
    await reads.abandonRebuild(name, start.generation).catch(() => undefined);
    throw error;
  }
}

async function rebuildFrom(
  events: EventStore, reads: ReadStore, projection: Projection, start: CheckpointInfo,
  onProgress?: (p: RebuildProgress) => void, signal?: AbortSignal,
): Promise<CheckpointInfo> {
  const { name } = projection;
  const generation = start.generation;
  let position = start.position;
  let applied = 0;
  let head = await events.headPosition();
  onProgress?.({ position, head, applied });
  for (;;) {
    // On the embedded stores every read and write here completes on microtasks: without a turn of the
    // event loop per batch, timers and signals (Ctrl-C, which aborts `signal`) wait until the rebuild ends.
    await new Promise((resolve) => setImmediate(resolve));
    signal?.throwIfAborted();
    const batch = await events.readAll(position, { limit: BATCH });
    if (batch.length === 0) {
      // A live checkpoint past the log's end was never this log's (see readModelsAhead): it does not hold the swap back.
      const stale = await projectionAhead(events, reads, name);
      // Only our generation: a rebuild started since our last batch (in another process, or this node's own) holds the slot now.
      const { swapped, live, superseded } = await reads.finishRebuild(name, { generation, ...(stale && { stale }) });
      if (superseded) throw new RebuildSupersededError(name);
      if (swapped) return live;
      // The live runner applied events past ours meanwhile (or stored a position past the last event this
      // log returns, e.g. after EventStoreDB system events): catch up with it, then swap.
      const more = await events.readAll(position, { limit: 1 });
      if (more.length === 0) {
        const ok = await reads.applyBatch(name, { position, generation }, live.position, async () => {}, { rebuild: true });
        if (!ok) throw new RebuildSupersededError(name);
        position = live.position;
      }
      continue;
    }
    const last = batch[batch.length - 1]!.position;
    const relevant = relevantTo(projection, batch);
    if (relevant.length > 0) {
      await projection.prepare?.(relevant, events, undefined, signal).catch((error: unknown) => {
        throw signal?.aborted ? error : new RebuildFailedError(name, { batch: { first: relevant[0]!.position, last: relevant[relevant.length - 1]!.position } }, error);
      });
    }
    const ok = await reads.applyBatch(name, { position, generation }, last, async (writer) => {
      for (const event of relevant) {
        try {
          await projection.apply(event, writer);
        } catch (error) {
          throw new RebuildFailedError(name, { event: { position: event.position, id: event.id, type: event.type, stream: event.stream } }, error);
        }
      }
    }, { rebuild: true });
    // Only another startRebuild moves the rebuild slot: it dropped our generation.
    if (!ok) throw new RebuildSupersededError(name);
    if (relevant.length > 0) projection.afterCommit?.(relevant, generation);
    position = last;
    applied += relevant.length;
    head = Math.max(head, position);
    onProgress?.({ position, head, applied });
  }
}

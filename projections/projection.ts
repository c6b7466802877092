import type { EventStore, RecordedEvent } from '../infra/eventstore/port.js';
import type { CollectionSpec, ProjectionWriter, ReadStore } from '../infra/readstore/port.js';

/**
 * A read model: the events it reads and how each one changes its documents.
 * `apply` must be idempotent given the position guard of the writer: feeding an event twice
 * leaves the documents as once.
 */
export interface Projection {
  name: string;
  collections: CollectionSpec[];
  canHandle: readonly string[];
  apply(event: RecordedEvent, writer: ProjectionWriter): Promise<void>;
  /**
   * Optional I/O done before the batch's unit of work opens (e.g. computing embeddings), so the
   * store's transaction never waits on the network. Its result is handed to `apply` via `prepared`.
   * `log` is the event store the batch comes from, for a look at what follows it. `reads` (given by the live
   * runner, not by a rebuild) has the live documents, for reusing what earlier batches computed. `signal` aborts when
   * the runner stops or pauses, or the rebuild is stopped: a provider call given it ends then (nothing of the batch
   * is written; it is prepared again when the runner next starts), instead of holding the stop until it answers.
   */
  prepare?(events: RecordedEvent[], log: Pick<EventStore, 'readStream' | 'headPosition'>, reads?: Pick<ReadStore, 'find'>, signal?: AbortSignal): Promise<void>;
  /** Called after a batch commits, for in-process indexes kept beside the documents. */
  afterCommit?(events: RecordedEvent[], generation: number): void;
  /** Called when the projection's documents were swapped (rebuild) or must be reloaded. */
  reset?(): Promise<void>;
  /**
   * Another process committed these events to this generation's documents first (it won the race for a batch:
   * several nodes project one log into one read store): bring in-process state in line with them, as afterCommit
   * would have. `reads` has the documents as that process left them (or later). Without it, the runner resets
   * (a full reload of every in-process index, for every batch lost).
   */
  committedElsewhere?(events: RecordedEvent[], generation: number, reads: ReadStore): Promise<void>;
}

import { matchesFilter, type EventStore, type RecordedEvent, type SubscriptionFilter } from '../infra/eventstore/port.js';
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
  /**
   * The beginnings of the names of the streams it reads: its aggregates' categories (`project-`). An event of one of its
   * types in another stream is not its: another service writing to the same EventStoreDB may name its events as Cairn
   * does (`ProjectCreated` in `crm-project-1`), and applied, it would stop the projection on a shape it cannot store or,
   * worse, fit and show another service's data as Cairn's. Absent: every stream (projections of tests).
   */
  streams?: readonly string[];
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

/** What `projection` reads of the log: its types, in its streams. */
export function projectionFilter(projection: Pick<Projection, 'canHandle' | 'streams'>): SubscriptionFilter {
  return { types: [...projection.canHandle], ...(projection.streams ? { streamPrefixes: [...projection.streams] } : {}) };
}

/** The events of `batch` that `projection` reads (see projectionFilter). */
export function relevantTo<E extends Pick<RecordedEvent, 'type' | 'stream'>>(projection: Pick<Projection, 'canHandle' | 'streams'>, batch: E[]): E[] {
  const filter = projectionFilter(projection);
  return batch.filter((event) => matchesFilter(event, filter));
}

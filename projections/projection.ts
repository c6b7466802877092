import type { EventStore, RecordedEvent } from '../infra/eventstore/port.js';
import type { CollectionSpec, ProjectionWriter } from '../infra/readstore/port.js';

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
   * `log` is the event store the batch comes from, for a look at what follows it.
   */
  prepare?(events: RecordedEvent[], log: Pick<EventStore, 'readStream' | 'headPosition'>): Promise<void>;
  /** Called after a batch commits, for in-process indexes kept beside the documents. */
  afterCommit?(events: RecordedEvent[], generation: number): void;
  /** Called when the projection's documents were swapped (rebuild) or must be reloaded. */
  reset?(): Promise<void>;
}

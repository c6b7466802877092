import type { ReadStore } from '../../infra/readstore/port.js';

/**
 * Keeps an in-process index (BM25, vectors) in step with one projection's read model.
 *
 * The index follows the batches the projection commits (`afterCommit`) for the generation it was
 * loaded from, and is reloaded from the read model when the projection is reset (start, or the runner
 * found a rebuilt generation swapped in) and when a query notices that the live generation is no
 * longer the one it was loaded from (a rebuild in another process swapped it in while no event arrived).
 * Batches committed while a reload is running are replayed on top of it, in order.
 */
/** Where a projection hands what it committed for an in-process index: an IndexSync, or a message to the thread that has one. */
export interface IndexSink<Batch> {
  afterCommit(batch: Batch, generation: number): void;
  /** The projection's documents were swapped or must be reloaded (start, rebuild). */
  reset(): Promise<void>;
}

export class IndexSync<Batch> implements IndexSink<Batch> {
  private generation: number | undefined;
  private loading: Promise<void> | undefined;
  private buffered: Array<{ batch: Batch; generation: number }> | undefined;

  constructor(
    private readonly projection: string,
    private readonly reads: ReadStore,
    /** Clears the index and fills it from the live read model. */
    private readonly load: () => Promise<void>,
    private readonly apply: (batch: Batch) => void,
  ) {}

  afterCommit(batch: Batch, generation: number): void {
    if (this.buffered) this.buffered.push({ batch, generation });
    else if (generation === this.generation) this.apply(batch);
  }

  reset(): Promise<void> {
    const previous = this.loading ?? Promise.resolve();
    const run = previous.catch(() => undefined).then(() => this.reload());
    this.loading = run;
    const clear = () => { if (this.loading === run) this.loading = undefined; };
    run.then(clear, clear);
    return run;
  }

  private async reload(): Promise<void> {
    this.buffered = [];
    try {
      const { generation } = await this.reads.checkpoint(this.projection);
      // `load` clears the index first: until it completes, the index holds no generation. A load that fails
      // (the read store briefly unreachable) leaves it so, and the next query reloads it, instead of
      // searching a half-filled index as if it were whole and missing memories until the next restart.
      this.generation = undefined;
      await this.load();
      this.generation = generation;
      for (const b of this.buffered) if (b.generation === generation) this.apply(b.batch);
    } finally {
      this.buffered = undefined;
    }
  }

  /** Before a query: waits for a running reload, and reloads if a rebuilt generation went live meanwhile. */
  async ready(): Promise<void> {
    for (;;) {
      if (this.loading) await this.loading;
      const { generation } = await this.reads.checkpoint(this.projection);
      if (generation === this.generation) return;
      // Queries that notice it at the same moment (while reading the checkpoint: a round trip to MongoDB) share
      // one reload of the whole index: the first starts it, the others wait for it rather than queue one each.
      if (!this.loading) return this.reset();
    }
  }
}

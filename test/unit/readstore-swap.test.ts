import { join } from 'node:path';
import t from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { putDocs, swapInThread } from '../support/generation-swapper.js';
import { tempDir } from '../support/temp.js';


/**
 * Reads of the live generation while another connection swaps rebuilt generations in and drops the old
 * ones (the projection thread finishing a rebuild while the HTTP thread answers queries): a read that
 * resolved the live table just before the swap must not fail with "no such table".
 */
t.test('get, find and count never fail while another connection swaps generations', async (t) => {
  const file = join(tempDir(t, 'cairn-swap-'), 'readmodels.db');
  const spec = { projection: 'p', collection: 'items', docs: 50 };
  const store = new EmbeddedReadStore(file, { checkpointer: false });
  t.teardown(() => store.close());
  await store.register('p', [{ name: 'items', indexes: [['n']] }]);
  await store.applyBatch('p', { position: 0, generation: 1 }, spec.docs, (w) => putDocs(w, spec));

  const swapper = await swapInThread(file, spec);
  const errors: string[] = [];
  let reads = 0;
  // Counted, not timed: enough rounds of reads with enough swaps seen from this connection between them,
  // however slowly a loaded machine runs either side (the deadline only stops a run that makes no progress).
  const generations = new Set<number>();
  const deadline = Date.now() + 60_000;
  while ((reads < 1000 || generations.size < 20) && Date.now() < deadline) {
    try {
      const got = await store.get<{ id: string; n: number }>('items', 'd7');
      const page = await store.find<{ id: string; n: number }>('items', { where: { n: 3 }, limit: 5 });
      const count = await store.count('items');
      if (got?.n !== 7 || page.items.length !== 1 || count !== spec.docs) errors.push(`wrong answer: ${got?.n} ${page.items.length} ${count}`);
      generations.add((await store.checkpoint('p')).generation);
    } catch (error) {
      errors.push((error as Error).message);
    }
    reads++;
  }
  const swaps = await swapper.stop();
  t.ok(generations.size >= 20, `reads saw ${generations.size} live generations (${swaps} swapped in by the other connection)`);
  t.ok(reads >= 1000, `${reads} rounds of reads`);
  t.strictSame([...new Set(errors)], [], `no read failed (${errors.length} of ${reads} did)`);
});

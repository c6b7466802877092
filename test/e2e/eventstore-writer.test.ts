import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { timed } from '../support/settling.js';

const meta = { correlation_id: 'c', causation_id: 'c', actor: 't', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = () => ({ id: randomUUID(), type: 'Written', data: {}, metadata: meta });

/**
 * The log's writer thread dies (here: it cannot open the file, its directory being away for a moment, as a volume
 * remounted or a directory renamed under a running server). The appends sent to it fail; the appends after them
 * must fail as well or succeed on a new writer, not be posted to the dead thread and wait for ever (and close()
 * with them).
 */
t.test('a writer thread that died fails its appends; later appends start another instead of waiting for ever', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'cairn-writer-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'data');
  const store = new EmbeddedEventStore(join(dir, 'events.db'), { appends: false }); // its writer starts with the first append
  renameSync(dir, `${dir}-away`);

  const first = await timed(store.append('s-1', [event()], 'no_stream'), 5000);
  t.equal(first.outcome, 'rejected', 'the append sent to the writer that could not start fails');
  t.match(String(first.error), /directory does not exist/);
  const second = await timed(store.append('s-2', [event()], 'no_stream'), 5000);
  t.equal(second.outcome, 'rejected', `an append after it fails too, rather than waiting for ever (${second.outcome})`);

  renameSync(`${dir}-away`, dir);
  const third = await timed(store.append('s-3', [event()], 'no_stream'), 5000);
  t.equal(third.outcome, 'resolved', `once the file is back, appends are written again (${String(third.error ?? '')})`);
  t.same((await store.readAll(0)).map((e) => [e.stream, e.position]), [['s-3', 1]], 'only that one is in the log');
  t.equal((await timed(store.close(), 5000)).outcome, 'resolved', 'close() ends');
});

/**
 * SQLite's in-memory and temporary databases belong to one connection: the writer thread's connection would hold the
 * appends, and this thread's reads another, empty database. An append was acknowledged (position 1) and then never
 * read back (readStream [], headPosition 0). Such a log is refused when it is opened.
 */
t.test('a log that is not a file (":memory:", "") is refused, rather than acknowledging appends no read sees', async (t) => {
  for (const file of [':memory:', '']) {
    t.throws(() => new EmbeddedEventStore(file), { name: 'TypeError', message: /needs a file/ }, JSON.stringify(file));
  }
});

/**
 * Two parts of a process closing the same log (a failed start's clean-up and the shutdown, a test's teardowns): the
 * second close() returned at once, while the first was still waiting for the appends in flight to be committed, so
 * its caller could exit or remove the directory under them.
 */
t.test('a second close() waits, as the first does, for the appends in flight', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'cairn-writer-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const store = new EmbeddedEventStore(join(root, 'events.db'));
  let settled = 0;
  const appends = Array.from({ length: 20 }, (_, i) => store.append(`s-${i}`, [event()], 'no_stream').finally(() => { settled++; }));
  const first = store.close();
  await store.close();
  t.equal(settled, appends.length, 'every append in flight had settled when the second close() returned');
  t.equal((await Promise.allSettled(appends)).filter((r) => r.status === 'fulfilled').length, appends.length, 'and was written');
  await first;
});

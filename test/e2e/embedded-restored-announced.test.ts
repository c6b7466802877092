import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { until } from '../support/logs.js';

/**
 * The projection thread's store follows the heads its process's writer announces (no query per commit). A log restored
 * from an older backup under the running process ends before the heads announced so far: the events appended after the
 * restore, at positions announced before, must still be announced to its subscriptions at once, not found by the
 * cross-process poll (200 ms) until the log has grown past its old head.
 */

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = () => ({ id: randomUUID(), type: 'Happened', data: {}, metadata });

t.test('after a restore under it, a reading store takes new commits from announcements again', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-restored-announced-'));
  const file = join(dir, 'events.db');
  const backup = join(dir, 'backup.db');
  const writer = new EmbeddedEventStore(file); // the HTTP thread's: it appends, and its writer thread announces
  const reader = new EmbeddedEventStore(file, { appends: false }); // the projection thread's: it never appends
  const abort = new AbortController();
  t.teardown(async () => {
    abort.abort();
    await reader.close();
    await writer.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const seen: RecordedEvent[] = [];
  let arrived: (() => void) | undefined;
  const follow = async (from: number, signal: AbortSignal) => {
    for await (const e of reader.subscribeToAll(from, { signal })) {
      seen.push(e);
      arrived?.();
    }
  };
  const first = new AbortController();
  const following = follow(0, AbortSignal.any([abort.signal, first.signal]));
  const next = () => new Promise<void>((resolve) => { arrived = resolve; });
  // From the commit (the append resolved) to the reader having the event: the append's own durable write is not
  // counted, whose fsync a busy disk stretches (78 and 131 ms seen in a full run, failing the check below before the restore).
  // Announced, an event comes within milliseconds of its commit (or before the append resolves: 0); found by the 200 ms
  // poll, whose timer starts when the reader has caught up with the event before (just before this append begins), it
  // comes nearly 200 ms after it: five of those are far past 150 ms.
  const latency = async (stream: string) => {
    const came = next().then(() => performance.now());
    await writer.append(stream, [event()], 'no_stream');
    const committed = performance.now();
    return Math.max(0, (await came) - committed);
  };

  for (let i = 0; i < 2; i++) await writer.append(`kept-${i}`, [event()], 'no_stream');
  const db = new Database(file, { readonly: true });
  db.exec(`VACUUM INTO '${backup.replaceAll("'", "''")}'`);
  db.close();
  const before: number[] = [];
  for (let i = 0; i < 20; i++) before.push(await latency(`lost-${i}`));
  await until('the reader followed every commit', () => seen.length === 22);
  const last5 = before.slice(-5);
  t.ok(last5.reduce((a, b) => a + b, 0) < 150, `before the restore, each came when announced (${last5.map((l) => Math.round(l)).join(', ')} ms)`);
  first.abort();
  await following;

  const source = new Database(backup, { readonly: true });
  await source.backup(file);
  source.close();
  t.equal(await reader.headPosition(), 2, 'the log is the backup\'s');

  // A subscription from the restored log's end (a runner resuming from a rebuilt checkpoint).
  seen.length = 0;
  void follow(2, abort.signal);
  const latencies: number[] = [];
  for (let i = 0; i < 5; i++) latencies.push(await latency(`after-${i}`));
  t.strictSame(seen.map((e) => e.stream), [0, 1, 2, 3, 4].map((i) => `after-${i}`), 'only the events written since the restore, in order');
  const total = latencies.reduce((a, b) => a + b, 0);
  t.ok(total < 150, `each came when announced, not by the 200 ms poll (${latencies.map((l) => Math.round(l)).join(', ')} ms)`);
});

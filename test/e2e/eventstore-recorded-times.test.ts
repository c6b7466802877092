import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { MAX_CLOCK_STEP_BACK_MS } from '../../infra/eventstore/embedded-appender.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { tempDir } from '../support/temp.js';

/**
 * The embedded log's times follow its positions (audits by time, `ops events tail --since/--until`, search by them):
 * a commit whose clock is behind the log's last time, by up to a minute (a clock set back), gets that time; a log
 * stamped further ahead (a clock that had jumped forward, since corrected) is not followed.
 */
const event = (n: number) => ({ id: randomUUID(), type: 'Ticked', data: { n }, metadata: { correlation_id: 'c', causation_id: 'c', actor: 'owner', occurred_at: new Date().toISOString() } });

async function afterLastStampedAt(t: Test, ahead: number): Promise<{ stamped: string; next: string }> {
  const file = join(tempDir(t, 'cairn-recorded-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  await store.append('clock', [event(0)], 'no_stream');
  // The log's last time, as a clock that was `ahead` ms fast wrote it.
  const stamped = new Date(Date.now() + ahead).toISOString();
  const other = new Database(file);
  other.prepare('UPDATE events SET recorded_at = ? WHERE position = 1').run(stamped);
  other.close();
  await store.append('clock', [event(1), event(2)], 0);
  const log = await store.readAll(0, { limit: 10 });
  t.equal(log.length, 3);
  t.equal(log[1]!.recorded_at, log[2]!.recorded_at, 'one commit, one time');
  return { stamped, next: log[1]!.recorded_at };
}

t.test('a clock a little behind the log: the commit gets the log\'s last time, never an earlier one', async (t) => {
  const { stamped, next } = await afterLastStampedAt(t, 10_000);
  t.equal(next, stamped);
});

t.test('a log stamped more than a minute ahead is not followed: the commit gets its own clock\'s time', async (t) => {
  const before = Date.now();
  const { stamped, next } = await afterLastStampedAt(t, MAX_CLOCK_STEP_BACK_MS + 60_000);
  t.ok(next < stamped);
  t.ok(Date.parse(next) >= before && Date.parse(next) <= Date.now(), 'now');
});

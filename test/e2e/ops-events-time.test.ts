import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { positionBefore, timeOption } from '../../ops/events.js';
import { startScript } from '../support/processes.js';

/**
 * `ops events tail --since/--until`: what happened during an incident, by the times the log recorded. Five commits
 * of three events each, some milliseconds apart, in a real embedded log; the real CLI reads it.
 */
t.setTimeout(300_000);
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-ops-time-'));
t.teardown(() => rm(dataDir, { recursive: true, force: true }));
const store = new EmbeddedEventStore(join(dataDir, 'events.db'));
for (let batch = 0; batch < 5; batch++) {
  const metadata = { correlation_id: `req-${batch}`, causation_id: `req-${batch}`, actor: 'owner', occurred_at: new Date().toISOString() };
  await store.append(`timeline-${batch}`, [0, 1, 2].map((i) => ({ id: randomUUID(), type: i === 0 ? 'First' : 'Other', data: { batch, i }, metadata })), 'no_stream');
  await new Promise((resolve) => setTimeout(resolve, 25));
}
const log: RecordedEvent[] = await store.readAll(0, { limit: 100 });
await store.close();
const times = [0, 1, 2, 3, 4].map((batch) => log[batch * 3]!.recorded_at);
t.equal(new Set(times).size, 5, 'five commits, five times');
t.ok(log.every((e, i) => e.recorded_at === times[Math.floor(i / 3)]), 'the events of a commit share its time');

const tail = async (...args: string[]) => startScript('ops/cli.ts', ['events', 'tail', ...args], { DATA_DIR: dataDir }).done;
const batches = (stdout: string) => [...new Set(stdout.split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { data: { batch: number } }).data.batch))];
const ms = (time: string, plus: number) => new Date(Date.parse(time) + plus).toISOString();

t.test('--since and --until are inclusive, to the millisecond, and a search of the history', async (t) => {
  const cases: Array<[string[], number[]]> = [
    [['--since', times[2]!], [2, 3, 4]],
    [['--since', ms(times[2]!, 1)], [3, 4]],
    [['--since', ms(times[2]!, -1)], [2, 3, 4]],
    [['--until', times[1]!], [0, 1]],
    [['--until', ms(times[1]!, -1)], [0]],
    [['--since', times[1]!, '--until', times[3]!], [1, 2, 3]],
    [['--since', times[4]!, '--until', times[4]!], [4]],
    [['--since', ms(times[4]!, 1)], []],
    [['--until', ms(times[0]!, -1)], []],
    // --from and --since: the later start wins.
    [['--since', times[1]!, '--from', String(log[11]!.position)], [4]],
    [['--since', times[3]!, '--from', '0'], [3, 4]],
    // With the other filters: what one request did in that window.
    [['--since', times[1]!, '--until', times[3]!, '--correlation', 'req-2,req-4'], [2]],
    [['--since', times[1]!, '--type', 'First', '--until-head'], [1, 2, 3, 4]],
  ];
  // Without --until, --since starts a tail that follows the log: --until-head ends it at the head.
  const runs = await Promise.all(cases.map(([args]) => tail(...args, ...(args.includes('--until') || args.includes('--until-head') ? [] : ['--until-head']), '--json')));
  runs.forEach((run, i) => {
    const [args, expected] = cases[i]!;
    t.same([run.code, run.stderr], [0, ''], `${args.join(' ')}: ${run.stderr}`);
    t.strictSame(batches(run.stdout), expected, args.join(' '));
  });
  const whole = await tail('--since', times[1]!, '--until', times[3]!, '--json');
  t.strictSame(whole.stdout.split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { position: number }).position), log.slice(3, 12).map((e) => e.position), 'every event of the window, once, in order');
});

t.test('a date is the whole day, UTC; a time with an offset is that instant', async (t) => {
  const day = times[0]!.slice(0, 10);
  const [sameDay, before, offset] = await Promise.all([
    tail('--since', day, '--until', day, '--json'),
    tail('--until', ms(`${day}T00:00:00Z`, -1).slice(0, 10), '--json'),
    // times[2] written in +05:30: the same instant.
    tail('--since', new Date(Date.parse(times[2]!) + 5.5 * 3_600_000).toISOString().replace('Z', '+05:30'), '--until-head', '--json'),
  ]);
  t.strictSame(batches(sameDay.stdout), times.every((time) => time.startsWith(day)) ? [0, 1, 2, 3, 4] : batches(sameDay.stdout), 'the day the log was written');
  t.strictSame(batches(before.stdout), [], 'the day before: nothing');
  t.strictSame(batches(offset.stdout), [2, 3, 4]);
});

t.test('a time that is not RFC 3339 with a zone is refused in one line', async (t) => {
  const refused = ['2026-11-24T14:02:00', '2026-02-30', '2026-11-24T24:00:00Z', 'yesterday', '11/24/2026', ''];
  const runs = await Promise.all(refused.map((value) => tail('--since', value, '--until-head')));
  runs.forEach((run, i) => {
    t.equal(run.code, 1, refused[i]!);
    t.equal(run.stdout, '');
    t.match(run.stderr, /^error: option '--since <time>' argument '.*' is invalid\. expected an RFC 3339 time with its zone, e\.g\. 2026-11-24T14:02:00Z[^\n]*\n\(add --help for usage\)\n$/);
  });
  t.equal(timeOption('2026-11-24', true), Date.parse('2026-11-25T00:00:00Z') - 1, '--until of a date: its last millisecond');
  t.equal(timeOption('2026-11-24T15:02:00.250+01:00'), Date.parse('2026-11-24T14:02:00.250Z'));
});

t.test('on the embedded log the start is found by a binary search, not by reading from the beginning', async (t) => {
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  t.teardown(() => events.close());
  const head = await events.headPosition();
  let reads = 0;
  const readAll = events.readAll.bind(events);
  events.readAll = (...args: Parameters<typeof readAll>) => { reads++; return readAll(...args); };
  for (const batch of [0, 1, 2, 3, 4]) {
    reads = 0;
    t.equal(await positionBefore(events, Date.parse(times[batch]!), 0, head), log[batch * 3]!.position - 1, `batch ${batch}: just before its first event`);
    t.ok(reads <= Math.ceil(Math.log2(head + 1)) + 1, `batch ${batch}: ${reads} single reads for ${head} events`);
  }
  t.equal(await positionBefore(events, Date.parse(times[4]!) + 1, 0, head), head, 'after the last event: the head');
  t.equal(await positionBefore(events, Date.parse(times[2]!), log[11]!.position, head), log[11]!.position, 'never before `from`');
});

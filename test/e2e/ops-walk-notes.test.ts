import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { startScript } from '../support/processes.js';

/**
 * `events tail --until TIME` ends at the head at the latest, as --until-head does (README: "--until stops after the last
 * event recorded at or before it, or at the head as --until-head does"). A filter that cannot match said "…yet;
 * waiting" there, and the command ended at once: the operator was told the opposite of what happened.
 */
const work = mkdtempSync(join(tmpdir(), 'cairn-ops-walk-notes-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const tail = (...args: string[]) => startScript('ops/cli.ts', ['events', 'tail', ...args], { DATA_DIR: work }).done;

t.test('events tail --until: a type or stream prefix that matches nothing is said without the promise to wait', async (t) => {
  const events = new EmbeddedEventStore(join(work, 'events.db'));
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  await events.append('agent-walk', [{ id: randomUUID(), type: 'AgentCreated', data: {}, metadata }], 'no_stream');
  await events.close();
  const until = new Date(Date.now() + 60_000).toISOString();
  const [unseenType, unseenPrefix, today] = await Promise.all([
    tail('--until', until, '--type', 'AgentCreate'),
    tail('--until', until, '--stream-prefix', 'agnet-'),
    tail('--until', until.slice(0, 10), '--type', 'AgentCreate', '--stream-prefix', 'agnet-'),
  ]);
  for (const run of [unseenType, unseenPrefix, today]) {
    t.equal(run.code, 0, 'it ends');
    t.equal(run.stdout, '');
    t.notMatch(run.stderr, /waiting/, `nor says it waits: ${run.stderr}`);
  }
  t.match(unseenType.stderr, /^note: no event of type "AgentCreate" in the log \(known types: .*AgentCreated.*\)\n$/);
  t.equal(unseenPrefix.stderr, 'note: no stream in the log starts with "agnet-"\n');
  t.match(today.stderr, /^note: no event of type "AgentCreate" in the log \(known types: [^\n]*\)\nnote: no stream in the log starts with "agnet-"\n$/);
});

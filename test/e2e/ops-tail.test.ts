import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { until } from '../support/logs.js';

/** `ops events tail` run as operators do, against an embedded log another process writes. */
const root = fileURLToPath(new URL('../..', import.meta.url));
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-ops-tail-'));
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

t.test('events tail --from past the log\'s head says on stderr that the events up to it will not be shown', async (t) => {
  const writer = new EmbeddedEventStore(join(dataDir, 'events.db'));
  t.teardown(() => writer.close());
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  const append = (revision: number | 'no_stream') => writer.append('ops-tail', [{ id: randomUUID(), type: 'MemoryStored', data: {}, metadata }], revision);
  await append('no_stream');

  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  delete env.EVENTSTORE_URL;
  delete env.MONGODB_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'ops/cli.ts', 'events', 'tail', '--from', '3', '--count', '1', '--json'],
    { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (d: Buffer) => { out.stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { out.stderr += d.toString(); });
  const done = new Promise<number | null>((resolve) => child.on('close', resolve));
  t.teardown(() => { child.kill('SIGKILL'); });

  // Bounded: a tail that says nothing would otherwise hold the test until the file's timeout.
  await until('the tail has written a line on stderr', () => out.stderr.includes('\n') || child.exitCode !== null, 15_000);
  const note = 'note: --from 3 is past the log\'s head (1); events up to position 3 will not be shown\n';
  t.equal(out.stderr, note);
  // It still follows the log from there: positions 2 and 3 are skipped, as the note said.
  for (let revision = 0; revision < 3; revision++) await append(revision);
  t.equal(await done, 0, out.stderr);
  t.strictSame(out.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line).position), [4], 'the one event counted, past --from');
  t.match(JSON.parse(out.stdout), { position: 4, revision: 3, stream: 'ops-tail', type: 'MemoryStored' });
  t.equal(out.stderr, note, 'the note, once');
  // (A tail from the head or below it says nothing: `events tail --type` in ops.test.ts checks its stderr is empty.)
});

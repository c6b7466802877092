import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { REPEATED_SIGNAL_MS } from '../../infra/signals.js';
import { startScript } from '../support/processes.js';
import { until } from '../support/logs.js';

const work = mkdtempSync(join(tmpdir(), 'cairn-ops-walk-signals-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

/**
 * Ctrl-C on `npm run ops -- events tail` (the README's command) reaches the tail twice: the terminal signals its whole
 * process group, npm included, and npm passes its own SIGINT on a few milliseconds later (tsx does the same). The
 * repeat is the same stop: the tail must end as the README says, exit code 0, not be killed by the second signal (130).
 */
t.test('events tail: a SIGINT repeated at once (npm passing on the Ctrl-C) is the same stop, exit code 0', async (t) => {
  const events = new EmbeddedEventStore(join(work, 'events.db'));
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  // About 1.5 MB to print: more than a pipe and our side of it take in while nobody reads.
  for (let s = 0; s < 5; s++) {
    await events.append(`walk-${s}`, Array.from({ length: 1000 }, (_, i) => ({ id: randomUUID(), type: 'WalkPinged', data: { i, text: 'x'.repeat(200) }, metadata })), 'no_stream');
  }
  await events.close();

  const tail = startScript('ops/cli.ts', ['events', 'tail', '--from', '0'], { DATA_DIR: work });
  t.teardown(() => { if (tail.child.exitCode === null && tail.child.signalCode === null) tail.child.kill('SIGKILL'); });
  // Our side is never read: it fills up, then the pipe does, and the tail holds output it cannot write yet (as under
  // `| less`). Stopped, it ends without waiting for that output, but not before the repeat has arrived.
  tail.child.stdout.removeAllListeners('data');
  tail.child.stdout.pause();
  await until('the tail has filled our side of its pipe', () => tail.child.stdout.readableLength >= tail.child.stdout.readableHighWaterMark, 30_000);
  // Then the pipe itself (64 KiB, a few hundred lines): from there the tail waits for its reader.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const exited = once(tail.child, 'exit');
  tail.child.kill('SIGINT');
  // Well within REPEATED_SIGNAL_MS of the first, as npm passes it on.
  await new Promise((resolve) => setTimeout(resolve, Math.min(50, REPEATED_SIGNAL_MS / 4)));
  // Else the repeat below would test nothing.
  t.strictSame({ code: tail.child.exitCode, signal: tail.child.signalCode }, { code: null, signal: null }, 'still running, its output held, when the repeat comes');
  tail.child.kill('SIGINT');
  const [code, signal] = await exited;
  t.strictSame({ code, signal }, { code: 0, signal: null }, `exit code 0, not ended by the repeated signal: ${tail.out.stderr}`);
  t.equal(tail.out.stderr, '', 'nothing on stderr');
});

import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { REPEATED_SIGNAL_MS } from '../../infra/signals.js';
import { startScript } from '../support/processes.js';
import { until } from '../support/logs.js';

const fixture = fileURLToPath(new URL('./fixtures/stop-signals.ts', import.meta.url));

/**
 * A long ops command (a rebuild, a backup, a key being created and printed) stops cleanly on the first stop signal,
 * and at once on another one. A repeat within REPEATED_SIGNAL_MS is the same stop delivered twice: `npm run ops`
 * under a service manager or job runner that signals the whole process group reaches both npm and the command, and
 * npm passes its own on. Taken as a second stop, it would end the command mid-way (a backup's partial files left, a
 * key created but never printed).
 */
t.test('a repeated stop signal is the same stop; a later one ends the command at once', async (t) => {
  const run = startScript(fixture, []);
  t.teardown(() => { if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL'); });
  await until('the fixture is ready', () => run.out.stdout.includes('ready'), 30_000);
  run.child.kill('SIGTERM');
  await until('the first signal aborts the command', () => run.out.stdout.includes('aborted 143'));
  run.child.kill('SIGTERM');
  run.child.kill('SIGINT');
  await new Promise((resolve) => setTimeout(resolve, REPEATED_SIGNAL_MS / 2));
  t.equal(run.child.signalCode, null, 'repeats at once do not end it');
  t.equal(run.out.stdout.match(/aborted/g)?.length, 1, 'nor abort it again');
  await new Promise((resolve) => setTimeout(resolve, REPEATED_SIGNAL_MS));
  const exited = once(run.child, 'exit');
  run.child.kill('SIGTERM');
  t.strictSame(await exited, [null, 'SIGTERM'], 'a stop signal after that ends it at once');
});

t.test('a repeat within REPEATED_SIGNAL_MS is the same stop also when the command released the signals at once', async (t) => {
  // The command's clean-up was quicker than npm passing the signal on: the repeat arrives after `release`, while the
  // command prints why it stopped and closes its stores. Taken as a second stop, it would end the process by the
  // signal there, before that (a backup's "interrupted; nothing of it is left" never printed).
  const run = startScript(fixture, ['release-on-abort']);
  t.teardown(() => { if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL'); });
  await until('the fixture is ready', () => run.out.stdout.includes('ready'), 30_000);
  run.child.kill('SIGTERM');
  await until('the first signal aborts the command, which releases the signals', () => run.out.stdout.includes('aborted 143, released'));
  run.child.kill('SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, REPEATED_SIGNAL_MS / 2));
  t.equal(run.child.signalCode, null, 'the repeat does not end it');
  await new Promise((resolve) => setTimeout(resolve, REPEATED_SIGNAL_MS));
  const exited = once(run.child, 'exit');
  run.child.kill('SIGTERM');
  t.strictSame(await exited, [null, 'SIGTERM'], 'released, a stop signal after that has its default action');
});

import { EventEmitter, getEventListeners } from 'node:events';
import t from 'tap';
import { ConsistencyTimeoutError, waitForPosition } from '../../projections/runner.js';

/** waitForPosition: every way a wait ends releases its progress listener, its timer and its abort listener. */

function setup(at = 0) {
  const progress = new EventEmitter();
  let position = at;
  const advance = (p: number) => { position = p; progress.emit('position', p); };
  return { progress, advance, current: () => position };
}
const abortListeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;
const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
/** Whether `promise` has settled once pending callbacks have run. */
const settled = async (promise: Promise<unknown>) => {
  let done = false;
  promise.then(() => { done = true; }, () => { done = true; });
  await new Promise((resolve) => setImmediate(resolve));
  return done;
};

t.test('reached: resolves and lets go of everything', async (t) => {
  const { progress, advance, current } = setup();
  const controller = new AbortController();
  const before = timers();
  const wait = waitForPosition(progress, 'position', current, 'p', 5, 60_000, controller.signal);
  t.equal(progress.listenerCount('position'), 1);
  t.equal(timers(), before + 1, 'a timer while waiting');
  advance(4);
  t.notOk(await settled(wait), 'position 4 is not 5: still waiting');
  advance(5);
  t.ok(await settled(wait), 'position 5: reached');
  await wait;
  t.equal(progress.listenerCount('position'), 0);
  t.equal(abortListeners(controller.signal), 0, 'the abort listener is removed');
  t.equal(timers(), before, 'its timer is cleared');
  controller.abort(new Error('late'));
});

t.test('aborted: rejects with the signal\'s reason at once and lets go of everything', async (t) => {
  const { progress, current } = setup();
  const controller = new AbortController();
  const before = timers();
  const wait = waitForPosition(progress, 'position', current, 'p', 5, 60_000, controller.signal);
  t.equal(timers(), before + 1, 'a timer while waiting');
  const reason = new Error('client gone');
  controller.abort(reason);
  await t.rejects(wait, reason);
  t.equal(progress.listenerCount('position'), 0);
  t.equal(abortListeners(controller.signal), 0, 'the abort listener is removed');
  t.equal(timers(), before, 'its timer is cleared');
});

t.test('already aborted: rejects without registering anything; already reached: resolves whatever the signal says', async (t) => {
  const { progress, current } = setup(5);
  const controller = new AbortController();
  controller.abort(new Error('gone'));
  const before = timers();
  const reached = waitForPosition(progress, 'position', current, 'p', 5, 60_000, controller.signal);
  const refused = waitForPosition(progress, 'position', current, 'p', 6, 60_000, controller.signal);
  t.equal(progress.listenerCount('position'), 0, 'no progress listener registered');
  t.equal(abortListeners(controller.signal), 0, 'no abort listener registered');
  t.equal(timers(), before, 'no timer started');
  await t.resolves(reached, 'nothing to wait for');
  await t.rejects(refused, { message: 'gone' });
});

t.test('timed out: ConsistencyTimeoutError, and the abort listener is removed', async (t) => {
  const { progress, current } = setup(2);
  const controller = new AbortController();
  await t.rejects(waitForPosition(progress, 'position', current, 'p', 5, 10, controller.signal), ConsistencyTimeoutError);
  t.equal(progress.listenerCount('position'), 0);
  t.equal(abortListeners(controller.signal), 0);
});

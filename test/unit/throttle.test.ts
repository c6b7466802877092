import t from 'tap';
import { Throttle } from '../../infra/throttle.js';

t.test('one pass per key per interval', async (t) => {
  const throttle = new Throttle(60_000);
  t.ok(throttle.pass('a', 1_000));
  t.notOk(throttle.pass('a', 1_000 + 59_999), 'one millisecond before the interval ends');
  t.ok(throttle.pass('a', 1_000 + 60_000), 'exactly one interval later');
  t.ok(throttle.pass('b', 1_000 + 60_000), 'keys are independent');
});

t.test('only keys that passed within the last interval are remembered', async (t) => {
  const throttle = new Throttle(60_000);
  for (let i = 0; i < 10_000; i++) throttle.pass(`key-${i}`, i);
  t.equal(throttle.size, 10_000, 'all within one interval');
  t.ok(throttle.pass('late', 10_000 + 60_000));
  t.equal(throttle.size, 1, 'a pass one interval after the others forgets them');
  t.notOk(throttle.pass('late', 10_000 + 60_001), 'and still holds back the key that passed');
  t.ok(throttle.pass('key-0', 10_000 + 60_001), 'a forgotten key passes again, as it would have');
});

t.test('a clock that steps back does not hold keys back until it catches up', async (t) => {
  const throttle = new Throttle(60_000);
  const hour = 3_600_000;
  t.ok(throttle.pass('a', 10 * hour));
  t.ok(throttle.pass('b', 10 * hour + 1));
  // The wall clock is set back an hour (NTP step): 'a' passed "in the future", and passes again now.
  t.ok(throttle.pass('a', 9 * hour), 'a key whose pass lies ahead of the clock passes');
  t.notOk(throttle.pass('a', 9 * hour + 59_999), 'and is then held back for one interval of the new clock');
  t.ok(throttle.pass('a', 9 * hour + 60_000));
  t.equal(throttle.size, 1, 'passes ahead of the clock are forgotten, as they would pass anyway');
  t.ok(throttle.pass('b', 9 * hour + 60_000), 'including the forgotten one');
});

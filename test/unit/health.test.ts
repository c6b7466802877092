import t from 'tap';
import {
  describeError, HEARTBEAT_TIMEOUT_MS, HealthBoard, readiness, READY_LAG_COUNT_LIMIT, threadState, type HostHealth,
} from '../../projections/health.js';

t.test('describeError: class and first line, credentials redacted, bounded', async (t) => {
  class ProviderError extends Error { override readonly name = 'ProviderError'; }
  t.equal(describeError(new ProviderError('embeddings provider answered 503')), 'ProviderError: embeddings provider answered 503');
  t.equal(describeError(new Error('plain')), 'plain', 'a plain Error needs no class name');
  t.equal(describeError(new Error('first line\n    at stack (file.ts:1:1)\nbody: {"secret": 1}')), 'first line', 'no stack, no multi-line bodies');
  t.equal(describeError(new Error('connect to mongodb://admin:s3cret@db.internal:27017/cairn failed')), 'connect to mongodb://[redacted]@db.internal:27017/cairn failed');
  t.equal(describeError(new Error('GET https://api.example/v1/embeddings?api-key=abc&x=1 failed')), 'GET https://api.example/v1/embeddings?[redacted] failed');
  t.equal(describeError(new Error('sent Authorization: Bearer eyJhbGciOi.x.y')), 'sent Authorization: Bearer [redacted]');
  t.equal(describeError(new Error('key sk-proj-abcdef123456 refused')), 'key [redacted] refused');
  t.equal(describeError(new Error('login failed: password=hunter2, token: t0k3n')), 'login failed: password=[redacted], token: [redacted]');
  t.equal(describeError(new Error('tab\there')), 'tab here', 'control characters become spaces');
  const long = describeError(new Error('x'.repeat(1000)));
  t.equal(long.length, 300);
  t.ok(long.endsWith('…'));
  t.equal(describeError(new Error('x'.repeat(300))).length, 300, 'exactly 300 characters are kept whole');
  t.equal(describeError(new Error('x'.repeat(300))).endsWith('…'), false);
  t.equal(describeError('a string'), 'a string');
  t.equal(describeError({ secret: 'object' }), 'a value that is not an Error was thrown');
  t.equal(describeError(new Error('')), 'unknown error');
  t.equal(describeError(new ProviderError('')), 'ProviderError');
});

t.test('threadState: silent for exactly the timeout is still running, a millisecond more is unresponsive', async (t) => {
  t.equal(threadState(true, 1_000, 1_000 + HEARTBEAT_TIMEOUT_MS), 'running');
  t.equal(threadState(true, 1_000, 1_000 + HEARTBEAT_TIMEOUT_MS + 1), 'unresponsive');
  t.equal(threadState(false, 1_000, 1_000), 'restarting', 'no thread running, whatever was heard last');
});

t.test('HealthBoard: the first position is where a projection starts; moving forward after it is progress', async (t) => {
  let now = Date.parse('2026-01-01T00:00:00.000Z');
  const board = new HealthBoard(['a', 'b'], () => now);
  board.moved('a', 10);
  t.same(board.list()[0], { projection: 'a', position: 10, progress_at: null, failing: null });
  now += 1000;
  board.moved('a', 12);
  t.equal(board.list()[0]!.progress_at, '2026-01-01T00:00:01.000Z');
  now += 1000;
  board.moved('a', 5); // reloaded from a stored checkpoint
  t.match(board.list()[0], { position: 5, progress_at: '2026-01-01T00:00:01.000Z' }, 'moving back is not progress');
  const failure = { message: 'm', since: 's', count: 1, last_at: 'l' };
  board.failed('b', failure);
  t.same(board.list()[1]!.failing, failure);
  board.failed('b', null);
  t.equal(board.list()[1]!.failing, null);
  board.moved('unknown', 1);
  t.equal(board.list().length, 2, 'names it does not host are ignored');
  t.equal(board.positionOf('a'), 5);
});

t.test('readiness: failing or a thread not running is not ready; lag only past READY_MAX_LAG, at its edge', async (t) => {
  const health = (over: Partial<HostHealth> = {}): { health(): HostHealth } => ({
    health: () => ({
      thread: { mode: 'thread', state: 'running', heartbeat_at: null, restarts: 0 },
      projections: [{ projection: 'a', position: 90, progress_at: null, failing: null }, { projection: 'b', position: 100, progress_at: null, failing: null }],
      ...over,
    }),
  });
  const counted: number[] = [];
  // A dense log up to 100, as the embedded one is.
  const events = { headPosition: async () => 100, countAfter: async (p: number, max: number) => { counted.push(max); return Math.min(100 - p, max); } };
  const plain = await readiness(health(), events);
  t.match(plain, { ready: true, reasons: [], head: 100, max_lag: null });
  t.match(plain.projections, [{ projection: 'a', lag: 10, ready: true }, { projection: 'b', lag: 0, ready: true }], 'lagging alone is ready by default');
  t.same(counted, [READY_LAG_COUNT_LIMIT], 'counted up to the probe\'s limit; nothing counted when at the head');

  t.match(await readiness(health(), events, 10), { ready: true, max_lag: 10 }, 'exactly READY_MAX_LAG behind: ready');
  const past = await readiness(health(), events, 9);
  t.match(past, { ready: false, reasons: ['a is 10 events behind the log (READY_MAX_LAG 9)'] });
  t.match(past.projections[0], { ready: false, failing: null });

  const farEvents = { headPosition: async () => 100_000_000, countAfter: async (_p: number, max: number) => max };
  const far = await readiness(health(), farEvents);
  t.match(far.projections[0], { lag: READY_LAG_COUNT_LIMIT, lag_at_least: true });
  t.match((await readiness(health(), farEvents, 5000)).reasons[0], /^a is 5001\+ events behind the log/, 'counted just past the bound');

  const failure = { message: 'ProviderError: embeddings provider answered 503', since: '2026-01-01T00:00:00.000Z', count: 1, last_at: '2026-01-01T00:00:00.000Z' };
  const failing = await readiness(health({
    thread: { mode: 'thread', state: 'unresponsive', heartbeat_at: '2026-01-01T00:00:00.000Z', restarts: 2 },
    projections: [{ projection: 'a', position: 100, progress_at: null, failing: failure }],
  }), events);
  t.same(failing.reasons, [
    'the projection thread is unresponsive',
    'a is failing (1 failed attempt since 2026-01-01T00:00:00.000Z): ProviderError: embeddings provider answered 503',
  ]);
  t.match(failing.projections[0], { lag: 0, ready: false, failing: failure });
});

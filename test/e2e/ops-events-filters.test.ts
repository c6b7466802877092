import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { bearer, projectWithKey, sessionToken, startTestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';
import { startScript } from '../support/processes.js';

/**
 * `ops events tail` as an auditor uses it: what did request X do, what did key or user Y do, in which streams, up to
 * the log's head and no further. Real requests against the real app write the log; the real CLI reads its DATA_DIR.
 */
// Many CLI processes, each compiling its TypeScript with tsx (see ops.test.ts).
t.setTimeout(600_000);
const OWNER = 'owner-token-of-the-filters-test';
const app = await startTestCairn({ MEMORY_OWNER_TOKEN: OWNER });
t.teardown(() => app.stop());
const scratch = await mkdtemp(join(tmpdir(), 'cairn-ops-filters-'));
t.teardown(() => rm(scratch, { recursive: true, force: true }));

const ops = (args: string[], env: NodeJS.ProcessEnv = {}) => startScript('ops/cli.ts', args, { DATA_DIR: app.dataDir, ...env });
const tail = async (...args: string[]) => ops(['events', 'tail', ...args]).done;
const parsed = (stdout: string) => stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as RecordedEvent & { correlation_id: string; actor: string });
const metadata = (correlation: string, actor: string) => ({ correlation_id: correlation, causation_id: correlation, actor, occurred_at: new Date().toISOString() });

// The requests an auditor asks about: a key creates an agent, the memory owner stores a memory, and a user whose
// identity provider puts commas in `sub` creates a project.
const { key, keyId } = await projectWithKey(app, 'tenant-filters');
const agent = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), 'X-Request-Id': 'req-agent' }, json: { name: 'Auditee' } });
if (agent.status !== 200) throw new Error(`create agent: ${agent.status} ${await agent.text()}`);
const memory = await app.memory('/v1/memories', { method: 'POST', headers: { ...bearer(OWNER), 'X-Request-Id': 'req-memory' }, json: { scope: { agent: 'auditee', user: 'u1' }, text: 'likes tea' } });
if (memory.status !== 200) throw new Error(`store memory: ${memory.status} ${await memory.text()}`);
const ann = 'CN=Ann,OU=Audit';
const annProject = await app.platform('/projects', { method: 'POST', headers: { ...bearer(await sessionToken({ sub: ann, tenant_id: 'tenant-ann' })), 'X-Request-Id': 'req-ann' }, json: { name: 'Ann' } });
if (annProject.status !== 200) throw new Error(`create project: ${annProject.status} ${await annProject.text()}`);
// The key's use is recorded off the request path: the log is complete once it is in.
let log: RecordedEvent[] = [];
for (let deadline = Date.now() + 10_000; Date.now() < deadline && !log.some((e) => e.type === 'ApiKeyUsed'); await new Promise((r) => setTimeout(r, 20))) {
  log = await app.events.readAll(0, { limit: 100_000 });
}
if (!log.some((e) => e.type === 'ApiKeyUsed')) throw new Error('the key\'s use was not recorded');
const positions = (events: Array<{ position: number }>) => events.map((e) => e.position);
const where = (test: (e: RecordedEvent) => boolean) => positions(log.filter(test));

t.test('--correlation: what one request did, across its streams; several ids are alternatives', async (t) => {
  const [one, two, repeated] = await Promise.all([
    tail('--from', '0', '--until-head', '--correlation', 'req-agent', '--json'),
    tail('--from', '0', '--until-head', '--correlation', 'req-agent,req-memory', '--json'),
    tail('--until-head', '--correlation', 'req-memory', '--correlation', ' req-ann ', '--json'),
  ]);
  for (const run of [one, two, repeated]) t.same([run.code, run.stderr], [0, ''], run.stderr);
  const agentEvents = parsed(one.stdout);
  t.strictSame(positions(agentEvents), where((e) => e.metadata.correlation_id === 'req-agent'));
  // The agent, its name's reservation and the key's use (recorded in the request's name), each in its own stream.
  t.strictSame(agentEvents.map((e) => e.type).sort(), ['AgentCreated', 'AgentNameReserved', 'ApiKeyUsed']);
  t.ok(agentEvents.every((e) => e.correlation_id === 'req-agent' && e.actor === `key:${keyId}`));
  t.strictSame(positions(parsed(two.stdout)), where((e) => ['req-agent', 'req-memory'].includes(e.metadata.correlation_id)));
  t.strictSame(positions(parsed(repeated.stdout)), where((e) => ['req-memory', 'req-ann'].includes(e.metadata.correlation_id)), 'without --from, --until-head reads from the start');
  t.strictSame(parsed(repeated.stdout).map((e) => e.type), ['MemoryStored', 'ProjectCreated']);
  // The JSON lines keep the shape of every other tail: envelope, correlation_id and actor, metadata, data.
  t.strictSame(Object.keys(agentEvents[0]!), ['position', 'stream', 'revision', 'id', 'type', 'recorded_at', 'correlation_id', 'actor', 'metadata', 'data']);
  t.strictSame(agentEvents, log.filter((e) => e.metadata.correlation_id === 'req-agent').map((e) => ({
    position: e.position, stream: e.stream, revision: e.revision, id: e.id, type: e.type, recorded_at: e.recorded_at,
    correlation_id: e.metadata.correlation_id, actor: e.metadata.actor, metadata: e.metadata, data: e.data,
  })));
});

t.test('--actor: what a key, the owner or a user did; a subject with commas is one actor', async (t) => {
  const [keyAndOwner, annOnly, annAndKey, bare] = await Promise.all([
    tail('--from', '0', '--until-head', '--actor', `key:${keyId},owner`, '--json'),
    tail('--from', '0', '--until-head', '--actor', `user:${ann}`, '--json'),
    tail('--from', '0', '--until-head', '--actor', `user:${ann},key:${keyId}`, '--json'),
    tail('--from', '0', '--until-head', '--actor', keyId),
  ]);
  for (const run of [keyAndOwner, annOnly, annAndKey]) t.same([run.code, run.stderr], [0, ''], run.stderr);
  t.strictSame(positions(parsed(keyAndOwner.stdout)), where((e) => [`key:${keyId}`, 'owner'].includes(e.metadata.actor)));
  t.ok(parsed(keyAndOwner.stdout).some((e) => e.actor === 'owner') && parsed(keyAndOwner.stdout).some((e) => e.actor === `key:${keyId}`), 'both actors');
  t.strictSame(parsed(annOnly.stdout).map((e) => [e.type, e.actor]), [['ProjectCreated', `user:${ann}`]]);
  t.strictSame(positions(parsed(annAndKey.stdout)), where((e) => [`user:${ann}`, `key:${keyId}`].includes(e.metadata.actor)));
  // A key id pasted without `key:` matches nothing: the auditor is told why, rather than left with an empty answer.
  t.equal(bare.code, 0);
  t.equal(bare.stdout, '');
  t.equal(bare.stderr, `note: Cairn writes no actor "${keyId}"; its actors are key:<key id>, user:<session subject>, owner, anonymous and ops:<login>@<host>\n`);
});

t.test('--stream-prefix, and filters combined: every filter must pass, any of its values', async (t) => {
  const [agents, twoPrefixes, combined, typed, human] = await Promise.all([
    tail('--from', '0', '--until-head', '--stream-prefix', 'agent-', '--json'),
    tail('--from', '0', '--until-head', '--stream-prefix', 'memory-', '--stream-prefix', 'project-', '--json'),
    tail('--from', '0', '--until-head', '--stream-prefix', 'memory-', '--correlation', 'req-agent,req-memory', '--actor', 'owner,anonymous', '--json'),
    tail('--from', '0', '--until-head', '--type', 'AgentCreated,ProjectCreated', '--actor', `key:${keyId}`, '--json'),
    tail('--from', '0', '--until-head', '--correlation', 'req-memory'),
  ]);
  for (const run of [agents, twoPrefixes, combined, typed, human]) t.same([run.code, run.stderr], [0, ''], run.stderr);
  // agentname-… streams do not start with agent-.
  t.strictSame(positions(parsed(agents.stdout)), where((e) => e.stream.startsWith('agent-')));
  t.strictSame(parsed(agents.stdout).map((e) => e.type), ['AgentCreated']);
  t.strictSame(positions(parsed(twoPrefixes.stdout)), where((e) => e.stream.startsWith('memory-') || e.stream.startsWith('project-')));
  t.ok(parsed(twoPrefixes.stdout).length >= 3, 'memories and both projects');
  t.strictSame(parsed(combined.stdout).map((e) => [e.type, e.correlation_id, e.actor]), [['MemoryStored', 'req-memory', 'owner']]);
  t.strictSame(parsed(typed.stdout).map((e) => [e.type, e.correlation_id]), [['AgentCreated', 'req-agent']]);
  // The human line, as the live tail prints it.
  const stored = log.find((e) => e.metadata.correlation_id === 'req-memory')!;
  t.equal(human.stdout, `${stored.position}  ${stored.recorded_at}  ${stored.stream}@${stored.revision}  MemoryStored  req-memory  owner  ${JSON.stringify(stored.data)}\n`);
});

t.test('--until-head with nothing to show: a filter matching nothing, an empty log, --from at or past the head', async (t) => {
  const empty = join(scratch, 'empty');
  await new EmbeddedEventStore(join(empty, 'events.db')).close();
  const head = log.at(-1)!.position;
  const [nothing, emptyLog, emptyFiltered, atHead, pastHead, unseenType, unseenPrefix] = await Promise.all([
    tail('--from', '0', '--until-head', '--correlation', 'no-such-request', '--actor', 'owner'),
    ops(['events', 'tail', '--until-head'], { DATA_DIR: empty }).done,
    ops(['events', 'tail', '--from', '0', '--until-head', '--stream-prefix', 'agent-', '--json'], { DATA_DIR: empty }).done,
    tail('--from', String(head), '--until-head', '--json'),
    tail('--from', String(head + 5), '--until-head', '--json'),
    tail('--until-head', '--type', 'AgentCreate'),
    tail('--until-head', '--stream-prefix', 'agnet-', '--stream-prefix', 'memroy-'),
  ]);
  for (const run of [nothing, emptyLog, atHead]) t.strictSame(run, { code: 0, stdout: '', stderr: '' });
  t.strictSame(emptyFiltered, { code: 0, stdout: '', stderr: 'note: no stream in the log starts with "agent-"\n' });
  // A mistyped prefix: said, as a mistyped type is.
  t.strictSame(unseenPrefix, { code: 0, stdout: '', stderr: 'note: no stream in the log starts with "agnet-" or "memroy-"\n' });
  t.strictSame(pastHead, { code: 0, stdout: '', stderr: `note: --from ${head + 5} is past the log's head (${head}); there is nothing to show\n` });
  // A typo in --type: said as in the live tail, without the promise to wait.
  t.equal(unseenType.code, 0);
  t.equal(unseenType.stdout, '');
  t.match(unseenType.stderr, /^note: no event of type "AgentCreate" in the log \(known types: .*AgentCreated/);
  t.notMatch(unseenType.stderr, /waiting/);
});

t.test('a filter value that names nothing, or a bad position, is refused in one line before anything is read', async (t) => {
  const refused = [
    [['--correlation', ''], /--correlation <id\.\.\.>' argument '' is invalid\. expected one or more names, comma-separated/],
    [['--correlation', ' , '], /--correlation <id\.\.\.>' argument ' , ' is invalid\. expected one or more names/],
    [['--actor', ','], /--actor <actor\.\.\.>' argument ',' is invalid\. expected one or more actors, comma-separated/],
    [['--stream-prefix', ''], /--stream-prefix <prefix>' argument '' is invalid\. expected the start of a stream name/],
    [['--from', '-1'], /--from <position>' argument '-1' is invalid\. expected a non-negative integer/],
    [['--from', '1.5'], /--from <position>' argument '1\.5' is invalid\. expected a non-negative integer/],
  ] as const;
  const runs = await Promise.all(refused.map(([args]) => tail('--until-head', ...args, '--json')));
  runs.forEach((run, i) => {
    t.equal(run.code, 1, refused[i]![0].join(' '));
    t.equal(run.stdout, '');
    t.match(run.stderr, refused[i]![1]);
    t.match(run.stderr, /^error: [^\n]*\n\(add --help for usage\)\n$/, 'one line, and the pointer to --help');
  });
  const help = await tail('--help');
  t.equal(help.code, 0);
  for (const option of ['--correlation <id...>', '--actor <actor...>', '--stream-prefix <prefix>', '--until-head', 'events tail --until-head --correlation X']) {
    t.match(help.stdout, option);
  }
});

t.test('--until-head stops at the head as it was when it started: events appended while it reads are not shown', async (t) => {
  const dir = join(scratch, 'history');
  const writer = new EmbeddedEventStore(join(dir, 'events.db'));
  t.teardown(() => writer.close());
  // More than a pipe holds, so that the tail is still printing (waiting for its reader) when the appends below come.
  await writer.append('history-a', Array.from({ length: 2000 }, (_, i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i, pad: 'x'.repeat(200) }, metadata: metadata('old', 'key:k') })), 'no_stream');
  // The event at the head is not one the filtered tail below selects: it must stop all the same, at the events past it.
  const { position: head } = await writer.append('other-head', [{ id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata: metadata('old', 'key:k') }], 'no_stream');
  // Unfiltered (read page by page) and with a stream prefix (selected by SQLite up to the log's current head).
  const runs = [['--json'], ['--stream-prefix', 'history-', '--actor', 'key:k', '--json']].map((args) => ops(['events', 'tail', '--until-head', ...args], { DATA_DIR: dir }));
  for (const run of runs) run.child.stdout.pause();
  // Each has read the head and printed its first page: it waits for this test to read.
  await until('both tails have printed', () => runs.every((run) => run.child.stdout.readableLength > 0), 60_000);
  await writer.append('history-a', Array.from({ length: 600 }, () => ({ id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata: metadata('new', 'key:k') })), 1999);
  await writer.append('history-b', [{ id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata: metadata('new', 'key:k') }], 'no_stream');
  for (const run of runs) run.child.stdout.resume();
  const [all, filtered] = await Promise.all(runs.map((r) => r.done));
  for (const run of [all!, filtered!]) t.equal(run.code, 0, run.stderr);
  t.strictSame(positions(parsed(all!.stdout)), Array.from({ length: head }, (_, i) => i + 1), 'every event up to the head, and none after it');
  t.strictSame(positions(parsed(filtered!.stdout)), Array.from({ length: head - 1 }, (_, i) => i + 1), 'every match up to the head, and none after it');
  t.ok(parsed(filtered!.stdout).every((e) => e.correlation_id === 'old'), 'none appended after the start');
});

t.test('long output into a pipe whose reader is slow is all written before the command ends', async (t) => {
  const dir = join(scratch, 'slow-reader');
  const expected = 2000;
  const writer = new EmbeddedEventStore(join(dir, 'events.db'));
  await writer.append('history-a', Array.from({ length: expected + 5 }, (_, i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i, pad: 'x'.repeat(200) }, metadata: metadata('old', 'key:k') })), 'no_stream');
  await writer.close();
  // The reader takes nothing for longer than the 2 s the CLI gives a finished command (cli.ts), then everything.
  const runs = [['stream', 'show', 'history-a', '--limit', String(expected), '--json'], ['events', 'tail', '--from', '0', '--until-head', '--count', String(expected), '--json']]
    .map((args) => ops(args, { DATA_DIR: dir }));
  for (const run of runs) run.child.stdout.pause();
  await until('both have printed', () => runs.every((run) => run.child.stdout.readableLength > 0), 60_000);
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  for (const run of runs) run.child.stdout.resume();
  const [shown, tailed] = await Promise.all(runs.map((r) => r.done));
  for (const run of [shown!, tailed!]) t.equal(run.code, 0, run.stderr);
  t.equal((JSON.parse(shown!.stdout) as unknown[]).length, expected, 'stream show: the whole page');
  t.equal(parsed(tailed!.stdout).length, expected, 'events tail: every line');
});

t.test('a search through a large log that finds little: both ends found, each through the index; Ctrl-C on a live one', async (t) => {
  const dir = join(scratch, 'large');
  const writer = new EmbeddedEventStore(join(dir, 'events.db'));
  await writer.append('large-first', [{ id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata: metadata('wanted', 'key:k') }], 'no_stream');
  for (let s = 0; s < 50; s++) {
    await writer.append(`large-${s}`, Array.from({ length: 2000 }, (_, i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i }, metadata: metadata('other', 'key:k') })), 'no_stream');
  }
  await writer.append('large-last', [{ id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata: metadata('wanted', 'key:k') }], 'no_stream');
  await writer.close();
  const search = (...args: string[]) => ops(['events', 'tail', ...args], { DATA_DIR: dir }).done;
  const runs = await Promise.all([
    search('--until-head', '--correlation', 'wanted', '--json'),
    search('--until-head', '--correlation', 'wanted,nobody', '--type', 'OpsTestPinged', '--json'),
  ]);
  for (const run of runs) {
    t.equal(run.code, 0, run.stderr);
    t.strictSame(parsed(run.stdout).map((e) => e.stream), ['large-first', 'large-last'], 'the first and the last of 100,002 events');
  }
  // Following the log for a request's events: both are printed, then the tail waits, and Ctrl-C ends it cleanly.
  const live = ops(['events', 'tail', '--from', '0', '--correlation', 'wanted', '--json'], { DATA_DIR: dir });
  t.teardown(() => { if (live.child.exitCode === null && live.child.signalCode === null) live.child.kill('SIGKILL'); });
  await until('the live tail has printed both', () => live.out.stdout.split('\n').filter(Boolean).length === 2, 60_000);
  live.child.kill('SIGINT');
  const run = await live.done;
  t.equal(run.code, 0, run.stderr);
  t.strictSame(parsed(run.stdout).map((e) => e.stream), ['large-first', 'large-last']);
});

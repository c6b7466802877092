import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { EVENT_TYPES } from '../../domain/event-types.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { loadConfig } from '../../infra/config.js';
import { allProjections } from '../../projections/index.js';
import { projectsProjection } from '../../projections/projects/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';

/** Runs the real CLI as operators do, against embedded stores in a temp DATA_DIR. */
// Many CLI processes, each compiling its TypeScript with tsx (~1.3 s alone, several seconds on a loaded machine):
// 110-265 s alone on this VM in its slow windows, and over 300 s once while two other jobs shared its two cores,
// too close to the suite's 120 s per file (package.json), so this file asks for 600 s.
t.setTimeout(600_000);
const root = fileURLToPath(new URL('../..', import.meta.url));
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-ops-'));
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
delete env.EVENTSTORE_URL;
delete env.MONGODB_URL;

interface Run { code: number | null; stdout: string; stderr: string }

function start(args: string[], extraEnv: NodeJS.ProcessEnv = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'ops/cli.ts', ...args], { cwd: root, env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (d: Buffer) => { out.stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { out.stderr += d.toString(); });
  const done = new Promise<Run>((resolve) => child.on('close', (code) => resolve({ code, ...out })));
  return { child, out, done };
}

const ops = (...args: string[]) => start(args).done;

async function opsJson<T>(...args: string[]): Promise<T> {
  const run = await ops(...args);
  if (run.code !== 0) throw new Error(`ops ${args.join(' ')} exited ${run.code}: ${run.stderr}`);
  return JSON.parse(run.stdout) as T;
}

async function liveDocs(collection: string) {
  const reads = new EmbeddedReadStore(join(dataDir, 'readmodels.db'));
  try {
    return (await reads.find(collection, { limit: 1000 })).items;
  } finally {
    await reads.close();
  }
}

interface Status { projection: string; position: number; head: number; lag: number; generation: number }

/** A process's main thread, from /proc (Linux): its state and its CPU time so far (user + system, in clock ticks). */
function mainThread(pid: number): { state: string; ticks: number } {
  const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
  // Fields from the third on (state, ppid, …), after the command name, which may hold spaces; utime and stime are 14 and 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0]!, ticks: Number(fields[11]) + Number(fields[12]) };
}

t.test('--help works for every command', async (t) => {
  const commands = [[], ['streams', 'list'], ['stream', 'show'], ['events', 'tail'], ['projections', 'status'],
    ['projections', 'rebuild'], ['projects', 'create'], ['keys', 'create'], ['backup']];
  const runs = await Promise.all(commands.map((c) => ops(...c, '--help')));
  runs.forEach((run, i) => {
    t.equal(run.code, 0, `${commands[i]!.join(' ')} --help exits 0`);
    t.match(run.stdout, `Usage: ops ${commands[i]!.join(' ')}`.trim());
  });
  const version = await ops('--version');
  t.strictSame([version.code, version.stdout], [0, `${JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version}\n`], '--version prints package.json\'s');
  // A broken server setting must not take --help down with it.
  const broken = await start(['projections', 'rebuild', '--help'], { PORT: 'abc', EMBEDDINGS_PROVIDER: 'nope' }).done;
  t.equal(broken.code, 0, broken.stderr);
  const failing = await start(['projections', 'status'], { EMBEDDINGS_PROVIDER: 'nope' }).done;
  t.equal(failing.code, 1, 'a command that needs the setting fails with its message');
  t.match(failing.stderr, /EMBEDDINGS_PROVIDER must be local, openai or none/);
});

t.test('a DATA_DIR without an event log (a mistyped path) is refused, and left as it was', async (t) => {
  const missing = join(dataDir, 'typo');
  for (const args of [['streams', 'list'], ['events', 'tail', '--count', '1'], ['projections', 'status'], ['keys', 'create', '--project', randomUUID()]]) {
    const run = await start(args, { DATA_DIR: missing }).done;
    t.equal(run.code, 1, args.join(' '));
    t.match(run.stderr, /^error: no event log in .*typo \(set DATA_DIR/);
    t.equal(run.stderr.split('\n').length, 2, 'one line');
  }
  t.notOk(existsSync(missing), 'nothing was created');
  // projects create makes a log where there is none, but not for a name it refuses.
  const refused = await start(['projects', 'create', '--name', 'Ac\u200Bme', '--tenant', 'acme'], { DATA_DIR: missing }).done;
  t.equal(refused.code, 1);
  t.match(refused.stderr, /^error: --name: must not contain invisible/);
  t.notOk(existsSync(missing), 'a refused name creates no log');
  // Accepted, it makes one, and says so: with DATA_DIR unset or mistyped, no server would see the project.
  const created = await start(['projects', 'create', '--name', 'Acme', '--tenant', 'acme'], { DATA_DIR: missing }).done;
  t.equal(created.code, 0);
  t.match(created.stderr, /^note: no event log in .*typo; creating a new one \(set DATA_DIR to the server's data directory unless this is a new deployment\)\n$/);
  t.ok(existsSync(join(missing, 'events.db')));
  const again = await start(['projects', 'create', '--name', 'Acme 2', '--tenant', 'acme'], { DATA_DIR: missing }).done;
  t.equal(again.code, 0);
  t.equal(again.stderr, '', 'into an existing log: no note');
});

t.test('Ctrl-C on a large log: events tail stops while catching up and while its reader stalls, a rebuild stops (SIGTERM and SIGHUP too) and leaves nothing behind', async (t) => {
  const bigDir = join(dataDir, 'big');
  const total = 100_000;
  const writer = new EmbeddedEventStore(join(bigDir, 'events.db'));
  const meta = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  for (let s = 0; s < total / 2000; s++) {
    await writer.append(`ops-big-${s}`, Array.from({ length: 2000 }, (_, i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i }, metadata: meta })), 'no_stream');
  }
  await writer.close();
  const big = { DATA_DIR: bigDir };

  const tail = start(['events', 'tail', '--from', '0', '--json'], big);
  tail.child.stdout.once('data', () => tail.child.kill('SIGINT'));
  const tailed = await tail.done;
  t.equal(tailed.code, 0, tailed.stderr);
  const lines = tailed.stdout.split('\n').filter(Boolean).length;
  t.ok(lines < total / 2, `stopped after ${lines} of ${total} events`);

  // A reader that stopped reading (`| less` left at its first page): the tail waits for the pipe to drain, and one
  // Ctrl-C must end that wait too. (Node writes a pipe asynchronously on Linux, so the tail's handler can run.)
  const stalled = spawn(process.execPath, ['--import', 'tsx', 'ops/cli.ts', 'events', 'tail', '--from', '0', '--json'],
    { cwd: root, env: { ...env, ...big }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { stalled.kill('SIGKILL'); });
  let stalledErr = '';
  stalled.stderr.on('data', (d: Buffer) => { stalledErr += d.toString(); });
  const exited = new Promise<number | null>((resolve) => stalled.on('close', resolve));
  // Never read: our side of the pipe takes in its high-water mark by itself, then leaves the rest in the pipe.
  await new Promise<void>((resolve) => {
    const poll = setInterval(() => {
      if (stalled.stdout.readableLength < stalled.stdout.readableHighWaterMark && stalled.exitCode === null) return;
      clearInterval(poll);
      resolve();
    }, 10);
  });
  // The tail fills the pipe (64 KiB) and its own buffer from there (25 MB of events to print), then waits for the pipe
  // to drain: its main thread sleeps (in epoll) and gains no CPU time. While it still prints it runs, or on a loaded
  // machine waits to run (state R): 10 samples in a row asleep and without a tick are the wait, not a pause in printing.
  const deadline = Date.now() + 60_000;
  for (let quiet = 0, last = mainThread(stalled.pid!); quiet < 10;) {
    if (Date.now() > deadline) throw new Error(`the tail did not come to wait for its reader: ${JSON.stringify(mainThread(stalled.pid!))}`);
    await sleep(20);
    const now = mainThread(stalled.pid!);
    quiet = now.state === 'S' && now.ticks === last.ticks ? quiet + 1 : 0;
    last = now;
  }
  stalled.kill('SIGINT');
  const code = await Promise.race([exited, sleep(30_000, undefined, { ref: false }).then(() => 'still running 30 s after Ctrl-C')]);
  t.equal(code, 0, stalledErr);
  t.equal(stalledErr, '');

  const reads = new EmbeddedReadStore(join(bigDir, 'readmodels.db'));
  t.teardown(() => reads.close());
  // Ctrl-C, SIGTERM as `timeout`, systemd or a job runner send it, and SIGHUP from a dropped ssh session, with the
  // exit code a shell shows for each.
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) {
    const rebuild = start(['projections', 'rebuild', 'projects', '--json'], big);
    // Once, as an operator presses Ctrl-C: a second one ends the process at once.
    const poll = setInterval(() => {
      reads.rebuildCheckpoint('projects').then((slot) => {
        if (slot && slot.position > 0 && poll.hasRef()) {
          poll.unref();
          rebuild.child.kill(signal);
        }
      }, () => undefined);
    }, 2);
    const rebuilt = await rebuild.done;
    clearInterval(poll);
    t.equal(rebuilt.code, code, `${signal}: ${rebuilt.stderr}`);
    t.equal(rebuilt.stdout, '');
    t.match(rebuilt.stderr, /^error: rebuild of projects interrupted; the live generation is unchanged\n$/);
    t.equal(await reads.rebuildCheckpoint('projects'), undefined, 'no rebuild looks in progress');
    t.match(await reads.checkpoint('projects'), { position: 0, generation: 1 }, 'the live generation is untouched');
  }
});

t.test('a mistyped option value fails before anything runs, naming what is expected', async (t) => {
  const [huge, ...runs] = await Promise.all([
    ops('stream', 'show', 'project-x', '--from', '99999999999999999'),
    ops('streams', 'list', '--limit', '-1'),
    ops('stream', 'show', 'project-x', '--limit', '-5'),
    ops('events', 'tail', '--count', '-1'),
  ]);
  for (const run of runs) {
    t.equal(run.code, 1);
    t.equal(run.stdout, '');
    // Not "a non-negative integer": 0 is refused too.
    t.match(run.stderr, /argument '-\d' is invalid\. expected a positive integer\n/);
  }
  // It is a non-negative integer: the message says what is wrong with it instead.
  t.equal(huge.code, 1);
  t.match(huge.stderr, /^error: option '--from <revision>' argument '99999999999999999' is invalid\. expected at most 9007199254740991\n/);
  // An unset shell variable or a stray comma names nothing: `events tail` must not follow every event instead.
  const lists = [['events', 'tail', '--type', '', '--from', '0', '--count', '1'], ['events', 'tail', '--type', ' , ', '--from', '0', '--count', '1'],
    ['keys', 'create', '--project', randomUUID(), '--scopes', '']];
  // On the large log of the test above, where following every event would print some.
  for (const run of await Promise.all(lists.map((args) => start(args, { DATA_DIR: join(dataDir, 'big') }).done))) {
    t.equal(run.code, 1);
    t.equal(run.stdout, '');
    t.match(run.stderr, /^error: option '--(type|scopes) .*' argument '.*' is invalid\. expected one or more names, comma-separated\n/);
  }
});

t.test('event data cannot send control sequences to the terminal of an operator reading the log', async (t) => {
  const controls = { DATA_DIR: join(dataDir, 'controls') };
  // What a client may store in a memory's text: C1 (U+009B is CSI; VTE and screen act on it), DEL and ESC.
  const text = 'ok\u009b2J\u009b1Ahidden\u007f\u001b[31mred';
  const writer = new EmbeddedEventStore(join(controls.DATA_DIR, 'events.db'));
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  await writer.append('ops-controls', [{ id: randomUUID(), type: 'OpsTestPinged', data: { text }, metadata }, { id: randomUUID(), type: 'OpsTestPinged', data: {}, metadata }], 'no_stream');
  await writer.close();
  const page = await start(['stream', 'show', 'ops-controls', '--limit', '1'], controls).done;
  t.equal(page.stderr, '1 more event: --from 1\n', 'the rest of the stream, counted');

  const [table, tail, json] = await Promise.all([['stream', 'show', 'ops-controls'], ['events', 'tail', '--from', '0', '--count', '1'],
    ['stream', 'show', 'ops-controls', '--json']].map((args) => start(args, controls).done));
  for (const run of [table, tail]) {
    t.equal(run.code, 0, run.stderr);
    t.notMatch(run.stdout, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/, 'no control character but line ends');
    t.match(run.stdout, String.raw`ok\u009b2J\u009b1Ahidden\u007f\u001b[31mred`, 'each shown as its escape');
  }
  t.equal(JSON.parse(json.stdout)[0].data.text, text, '--json keeps the data exactly');
});

t.test('commands that only read or append events work while the read store cannot be opened', async (t) => {
  // A damaged readmodels.db, as a MongoDB outage would be: the log is what an operator looks at then.
  const dir = { DATA_DIR: join(dataDir, 'reads-down') };
  await mkdir(dir.DATA_DIR);
  await writeFile(join(dir.DATA_DIR, 'readmodels.db'), 'not a database '.repeat(100));
  const created = await start(['projects', 'create', '--name', 'Down', '--tenant', 't', '--json'], dir).done;
  t.equal(created.code, 0, created.stderr);
  const { project_id: projectId } = JSON.parse(created.stdout) as { project_id: string };
  const key = await start(['keys', 'create', '--project', projectId], dir).done;
  t.equal(key.code, 0, key.stderr);
  t.match(key.stdout, /^sk_/);
  const [streams, shown, tailed] = await Promise.all([['streams', 'list', '--json'], ['stream', 'show', `project-${projectId}`, '--json'],
    ['events', 'tail', '--from', '0', '--count', '1', '--json']].map((args) => start(args, dir).done));
  for (const run of [streams, shown, tailed]) t.equal(run!.code, 0, run!.stderr);
  t.equal((JSON.parse(streams!.stdout) as unknown[]).length, 2, 'the project and its key');
  // (t.match([a]) would pass for [a, b] too.)
  t.strictSame((JSON.parse(shown!.stdout) as Array<{ type: string }>).map((e) => e.type), ['ProjectCreated'], 'the project\'s one event');
  t.match(JSON.parse(tailed!.stdout), { position: 1, type: 'ProjectCreated' });
  // The log says which operator account made them, as the API's events name their key or user.
  const actor = `ops:${userInfo().username}@${hostname()}`;
  t.equal(JSON.parse(shown!.stdout)[0].actor, actor);
  const keyEvents = JSON.parse((await start(['events', 'tail', '--from', '0', '--count', '2', '--json'], dir).done).stdout.trim().split('\n')[1]!);
  t.match(keyEvents, { type: 'ApiKeyCreated', actor });
  // What needs the read models still says why it cannot run.
  const status = await start(['projections', 'status'], dir).done;
  t.equal(status.code, 1);
  t.equal(status.stderr, `error: ${join(dir.DATA_DIR, 'readmodels.db')}: file is not a database\n`, 'naming the file');
});

t.test('events tail --type: a type no event has shown yet (a typo) is named once on stderr, and the tail waits for it', async (t) => {
  const dir = { DATA_DIR: join(dataDir, 'tail-types') };
  const writer = new EmbeddedEventStore(join(dir.DATA_DIR, 'events.db'));
  t.teardown(() => writer.close());
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  await writer.append('ops-types', [{ id: randomUUID(), type: 'MemoryStored', data: {}, metadata }], 'no_stream');
  // Bounded: a tail that says nothing would otherwise hold the test until the file's timeout.
  const firstLine = (run: ReturnType<typeof start>, on: 'stdout' | 'stderr') => Promise.race([sleep(15_000, undefined, { ref: false }), new Promise<void>((resolve) => {
    const check = () => { if (run.out[on].includes('\n')) { run.child[on].off('data', check); resolve(); } };
    run.child[on].on('data', check);
    check();
  })]);
  // A typo, and a type Cairn writes that this log has not seen yet (a new deployment waits for its first one).
  const [typo, fresh] = [['MemoryStore'], ['AgentCreated,ApiKeyCreated']].map((types) => start(['events', 'tail', '--type', ...types, '--from', '0', '--json'], dir));
  const present = await start(['events', 'tail', '--type', 'MemoryStore,MemoryStored', '--from', '0', '--count', '1', '--json'], dir).done;
  t.equal(present.code, 0, present.stderr);
  t.equal(present.stderr, '', 'nothing to say when one of the types has appeared');
  t.match(JSON.parse(present.stdout), { type: 'MemoryStored' });

  await Promise.all([firstLine(typo!, 'stderr'), firstLine(fresh!, 'stderr')]);
  t.equal(typo!.out.stderr, `note: no event of type "MemoryStore" in the log yet; waiting (known types: ${EVENT_TYPES.join(', ')})\n`);
  t.match(typo!.out.stderr, /[ (]MemoryStored,/, 'the near-miss is in the list');
  t.equal(fresh!.out.stderr, 'note: no event of type "AgentCreated" or "ApiKeyCreated" in the log yet; waiting\n', 'no list: both are known');
  // It still waits, and says nothing more.
  const appended = await writer.append('ops-types', [{ id: randomUUID(), type: 'MemoryStore', data: {}, metadata }], 0);
  await firstLine(typo!, 'stdout');
  for (const run of [typo!, fresh!]) run.child.kill('SIGINT');
  const [typed, waited] = await Promise.all([typo!.done, fresh!.done]);
  t.equal(typed.code, 0);
  t.match(JSON.parse(typed.stdout), { position: appended.position, type: 'MemoryStore' });
  t.equal(typed.stderr.split('\n').length, 2, 'the note, once');
  t.strictSame([waited.code, waited.stdout], [0, '']);
});

t.test('projections rebuild: the progress bar counts to the log\'s head from its first frame', async (t) => {
  const dir = join(dataDir, 'progress');
  const writer = new EmbeddedEventStore(join(dir, 'events.db'));
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  await writer.append('ops-progress', Array.from({ length: 5 }, (_, i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i }, metadata })), 'no_stream');
  await writer.close();
  // The bar is drawn on a terminal only: `script` (util-linux) gives the CLI one.
  const run = spawnSync('script', ['-qec', `'${process.execPath}' --import tsx ops/cli.ts projections rebuild projects`, '/dev/null'],
    { cwd: root, env: { ...env, DATA_DIR: dir }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  t.equal(run.status, 0, JSON.stringify(run.stdout + run.stderr));
  const frames = [...run.stdout.matchAll(/(\d+)\/(\d+) positions/g)].map((m) => `${m[1]}/${m[2]}`);
  t.equal(frames[0], '0/5', 'the first frame: nothing done of the whole log, not a full 0/0 bar');
  t.equal(frames.at(-1), '5/5');
});

t.test('a page says on stderr that more follow, with --json too, and names the next stream so that it can be pasted', async (t) => {
  const dir = { DATA_DIR: join(dataDir, 'odd-names') };
  const writer = new EmbeddedEventStore(join(dir.DATA_DIR, 'events.db'));
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() };
  // Names other writers of an EventStoreDB may use: a shell would split, expand or act on them, a terminal on the ESC.
  const names = ["a$b c'd", 'b\u001b[2J', 'c-plain/1.2', 'd-last'];
  for (const name of names) {
    await writer.append(name, [0, 1].map((i) => ({ id: randomUUID(), type: 'OpsTestPinged', data: { i }, metadata })), 'no_stream');
  }
  await writer.close();
  const pages = await Promise.all([...names.map((_, i) => ['streams', 'list', '--limit', '1', ...(i > 0 ? ['--after', names[i - 1]!] : [])]),
    ['streams', 'list', '--limit', '1', '--json'], ['stream', 'show', names[0]!, '--limit', '1', '--json'], ['stream', 'show', '']]
    .map((args) => start(args, dir).done));
  const hints = pages.slice(0, names.length).map((run) => run.stderr.match(/^more follow: --after (.*)\n$/)?.[1]);
  t.strictSame(hints.slice(0, 2), [`'a$b c'\\''d'`, String.raw`$'b\u001b[2J'`], 'quoted for a shell; the ESC as an escape');
  t.equal(hints[2], 'c-plain/1.2', 'a plain name as it is');
  t.equal(pages[3]!.stderr, '', 'the last page, full as it is, says nothing: nothing follows');
  for (const [i, hint] of hints.slice(0, 3).entries()) {
    t.equal(spawnSync('bash', ['-c', `printf %s ${hint}`], { encoding: 'utf8' }).stdout, names[i], `${hint} pastes as the name`);
  }
  const [streams, events, missing] = pages.slice(names.length);
  t.equal(JSON.parse(streams!.stdout).length, 1, 'stdout holds the page as JSON');
  t.equal(streams!.stderr, `more follow: --after ${hints[0]}\n`);
  t.equal(JSON.parse(events!.stdout).length, 1);
  t.equal(events!.stderr, '1 more event: --from 1\n');
  t.equal(missing!.code, 1);
  t.equal(missing!.stderr, 'error: stream "" not found\n', 'an empty name shows');
});

t.test('operator workflow on one data dir', async (t) => {
  const project = await opsJson<{ project_id: string; tenant_id: string; name: string; position: number }>(
    'projects', 'create', '--name', 'Demo', '--tenant', 'tenant-1', '--json');
  t.match(project, { tenant_id: 'tenant-1', name: 'Demo', position: 1 });
  const stream = `project-${project.project_id}`;

  await t.test('projections status: never-run projections lag by the whole log', async (t) => {
    const status = await opsJson<Status[]>('projections', 'status', '--json');
    t.strictSame(status.map((s) => s.projection).sort(), allProjections(loadConfig({})).map((p) => p.name).sort());
    for (const s of status) t.match(s, { position: 0, head: 1, lag: 1, generation: 1 }, s.projection);
  });

  await t.test('keys create prints the key once; the log holds only its hash', async (t) => {
    // The name is stored as the API stores names: trimmed and NFC-normalised.
    const run = await ops('keys', 'create', '--project', project.project_id, '--name', ' Zoe\u0308 ', '--scopes', 'agents:read,agents:write');
    t.equal(run.code, 0, run.stderr);
    const key = run.stdout.trim();
    t.match(key, /^sk_[0-9A-Za-z]{43}_[0-9A-Za-z]{6}$/);
    t.match(run.stderr, /cannot be shown again/);
    t.notMatch(run.stderr, key, 'the key is not repeated on stderr');

    const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
    try {
      const keyStreams = await events.listStreams({ prefix: 'apikey-' });
      t.equal(keyStreams.length, 1);
      const recorded = await events.readStream(keyStreams[0]!.stream);
      t.equal(recorded.length, 1, 'one event');
      t.match(recorded, [{ type: 'ApiKeyCreated', data: {
        project_id: project.project_id, tenant_id: 'tenant-1', name: 'Zo\u00EB', expires_at: null,
        key_hash: createHash('sha256').update(key).digest('hex'),
      } }]);
      // Exactly these scopes (an array in t.match's pattern would allow more).
      t.strictSame((recorded[0]!.data as { scopes: unknown }).scopes, ['agents:read', 'agents:write'], 'the scopes asked for, no more');
      const everything = JSON.stringify(await events.readAll(0, { limit: 1000 }));
      t.notOk(everything.includes(key), 'the key is nowhere in the log');
      t.notOk(everything.includes(key.slice(3, 46)), 'nor its random part');
    } finally {
      await events.close();
    }
  });

  await t.test('keys create --json with an expiry', async (t) => {
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const created = await opsJson<{ key: string; scopes: string[]; expires_at: string }>(
      'keys', 'create', '--project', project.project_id, '--name', 'deploy', '--expires-at', expires, '--json');
    // The same facts as projects create --json (and the API's creation answer): whose key, under which name.
    t.strictSame(created.scopes, ['*'], 'all scopes by default');
    t.match(created, { key: /^sk_/, expires_at: expires, name: 'deploy', project_id: project.project_id, tenant_id: project.tenant_id });
  });

  await t.test('keys create and projects create take only what the API would', async (t) => {
    const scopes = await ops('keys', 'create', '--project', project.project_id, '--scopes', 'root,agents:read');
    t.equal(scopes.code, 1);
    t.equal(scopes.stderr, 'error: --scopes: must be one of "*", "agents:read", "agents:write", "config:read", "config:write", "projects:read"\n', 'once, naming every scope');
    const name = await ops('keys', 'create', '--project', project.project_id, '--name', 'k'.repeat(101));
    t.equal(name.code, 1);
    t.match(name.stderr, /--name/);
    // The API's RFC 3339 date-time: no local time (an offset is required), no year past 9999.
    for (const expires of ['2030-01-01T00:00', 'Jan 1 2030', '+010000-01-01T00:00:00Z']) {
      const expiry = await ops('keys', 'create', '--project', project.project_id, '--expires-at', expires);
      t.equal(expiry.code, 1, expires);
      t.equal(expiry.stdout, '', 'no key');
      t.match(expiry.stderr, /--expires-at .* expected an RFC 3339 date-time with its offset/);
    }
    const longProject = await ops('projects', 'create', '--name', 'p'.repeat(201), '--tenant', 'acme');
    t.equal(longProject.code, 1);
    t.match(longProject.stderr, /--name/);
    // Names follow agent names' rules, with the API's messages: nothing invisible or controlling the terminal.
    const hidden = await ops('projects', 'create', '--name', 'Ac\u200Bme', '--tenant', 'acme');
    t.equal(hidden.code, 1);
    t.equal(hidden.stderr, 'error: --name: must not contain invisible (default-ignorable) characters such as zero-width spaces (U+200B at UTF-16 offset 2)\n');
    const control = await ops('keys', 'create', '--project', project.project_id, '--name', 'ci\u001B[2J');
    t.equal(control.code, 1);
    t.equal(control.stdout, '', 'no key');
    t.equal(control.stderr, 'error: --name: must not contain control characters (C0, DEL, C1) (U+001B at UTF-16 offset 2)\n');
    t.equal((await opsJson<unknown[]>('streams', 'list', '--prefix', 'project-', '--json')).length, 1, 'no project was created');
  });

  await t.test('keys create for an unknown project fails', async (t) => {
    const run = await ops('keys', 'create', '--project', randomUUID());
    t.equal(run.code, 1);
    t.equal(run.stdout, '');
    t.match(run.stderr, /^error: project .* not found\n$/);
  });

  await t.test('streams list and stream show', async (t) => {
    const streams = await opsJson<Array<{ stream: string; revision: number }>>('streams', 'list', '--prefix', 'project-', '--json');
    t.strictSame(streams.map((s) => [s.stream, s.revision]), [[stream, 0]], 'the one project stream, at revision 0');

    const shown = await opsJson<unknown[]>('stream', 'show', stream, '--json');
    t.equal(shown.length, 1, 'the stream\'s one event');
    t.match(shown, [{ position: 1, revision: 0, type: 'ProjectCreated', actor: 'ops', correlation_id: /^[0-9a-f-]{36}$/,
      data: { project_id: project.project_id, name: 'Demo' } }]);
    // For audits: the event's id and the whole of its metadata, as stored.
    const log = new EmbeddedEventStore(join(dataDir, 'events.db'));
    const [stored] = await log.readStream(stream, { limit: 1 });
    await log.close();
    t.equal((shown as Array<{ id: string; metadata: unknown }>)[0]!.id, stored!.id, 'the event id');
    t.strictSame((shown as Array<{ id: string; metadata: unknown }>)[0]!.metadata, stored!.metadata, 'the whole metadata');
    t.match(stored!.metadata, { causation_id: /./, project_id: project.project_id, occurred_at: /./ });
    const table = await ops('stream', 'show', stream);
    t.equal(table.code, 0);
    t.match(table.stdout, /POSITION\s+REVISION\s+TYPE/);
    t.match(table.stdout, 'ProjectCreated');

    const missing = await ops('stream', 'show', 'project-nope');
    t.equal(missing.code, 1);
  });

  await t.test('events tail', async (t) => {
    const run = await ops('events', 'tail', '--count', '2', '--from', '0', '--json');
    t.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split('\n').map((l) => JSON.parse(l));
    t.strictSame(lines.map((l: { position: number; type: string }) => [l.position, l.type]), [[1, 'ProjectCreated'], [2, 'ApiKeyCreated']], 'the first two events, and no more');

    const typed = await ops('events', 'tail', '--type', 'ApiKeyCreated', '--from', '0', '--count', '2', '--json');
    t.equal(typed.code, 0, typed.stderr);
    t.strictSame(typed.stdout.trim().split('\n').map((l) => JSON.parse(l)).map((e: { position: number; type: string }) => [e.position, e.type]),
      [[2, 'ApiKeyCreated'], [3, 'ApiKeyCreated']], 'only keys');
  });

  await t.test('events tail follows until SIGINT, then exits cleanly', async (t) => {
    const tail = start(['events', 'tail', '--from', '0', '--json']);
    const lines = (n: number) => new Promise<void>((resolve) => {
      const check = () => { if (tail.out.stdout.split('\n').length > n) { tail.child.stdout.off('data', check); resolve(); } };
      tail.child.stdout.on('data', check);
      check();
    });
    await lines(3);
    // Appended by another process while the tail waits: it must arrive live.
    const writer = new EmbeddedEventStore(join(dataDir, 'events.db'));
    const appended = await writer.append('ops-test-live', [{ id: randomUUID(), type: 'OpsTestPinged', data: { n: 1 }, metadata: { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: new Date().toISOString() } }], 'no_stream');
    await writer.close();
    await lines(4);
    tail.child.kill('SIGINT');
    const run = await tail.done;
    t.equal(run.code, 0, run.stderr);
    const printed = run.stdout.trim().split('\n').map((l) => JSON.parse(l));
    t.equal(printed.length, 4);
    t.match(printed[3], { position: appended.position, type: 'OpsTestPinged', stream: 'ops-test-live' });
  });

  await t.test('output into a pipe closed by its reader (`| head`) ends quietly', async (t) => {
    for (const args of [['streams', 'list'], ['stream', 'show', stream, '--json'], ['events', 'tail', '--from', '0']]) {
      const run = start(args);
      run.child.stdout.destroy();
      const { code, stderr } = await run.done;
      t.equal(code, 0, `${args.join(' ')} exits 0`);
      t.equal(stderr, '', 'no stack trace');
    }
  });

  await t.test('projections rebuild', async (t) => {
    const run = await ops('projections', 'rebuild', 'projects');
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, /rebuilt projects: generation 2 is live at position 4/);

    const status = await opsJson<Status[]>('projections', 'status', '--json');
    t.match(status.find((s) => s.projection === 'projects'), { position: 4, head: 4, lag: 0, generation: 2 });
    t.match(status.find((s) => s.projection === 'api-keys'), { lag: 4 }, 'other projections untouched');

    const first = await liveDocs('projects');
    t.equal(first.length, 1, 'the one project');
    t.match(first, [{ id: project.project_id, tenant_id: 'tenant-1', name: 'Demo', _position: 1 }]);

    const again = await opsJson<{ generation: number; position: number }>('projections', 'rebuild', 'projects', '--json');
    t.match(again, { generation: 3, position: 4 });
    t.strictSame(await liveDocs('projects'), first, 'rebuilding twice gives the same documents');
  });

  await t.test('rebuilding an unknown projection fails with the valid names', async (t) => {
    const run = await ops('projections', 'rebuild', 'nope');
    t.equal(run.code, 1);
    t.match(run.stderr, /unknown projection "nope".*projects/);
  });

  await t.test('a live runner in another process follows the swap by itself', async (t) => {
    const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
    const reads = new EmbeddedReadStore(join(dataDir, 'readmodels.db'));
    const runner = new ProjectionRunner(projectsProjection, events, reads);
    t.teardown(async () => {
      await runner.stop();
      await Promise.all([events.close(), reads.close()]);
    });
    await runner.start();
    const before = await reads.checkpoint('projects');

    const rebuilt = await opsJson<{ generation: number; position: number }>('projections', 'rebuild', 'projects', '--json');
    t.equal(rebuilt.generation, before.generation + 1);
    const second = await opsJson<{ project_id: string; position: number }>('projects', 'create', '--name', 'Second', '--tenant', 'tenant-2', '--json');
    // A bound only to fail rather than hang (a loaded machine may take seconds); the checkpoint below is the check.
    await runner.waitFor(second.position, 30_000);

    t.match(await reads.checkpoint('projects'), { generation: rebuilt.generation, position: second.position });
    t.strictSame((await liveDocs('projects')).map((d) => d.name).sort(), ['Demo', 'Second']);
  });
  // Last: the subtests above count the log's events.
  await t.test('keys create whose output is lost (broken pipe) fails and names the key to revoke', async (t) => {
    for (const json of [[], ['--json']]) {
      const run = start(['keys', 'create', '--project', project.project_id, '--name', 'lost', ...json]);
      run.child.stdout.destroy();
      const { code, stderr } = await run.done;
      t.equal(code, 1, `not a success${json.length ? ' (--json)' : ''}`);
      t.match(stderr, /error: key [0-9a-f-]{36} was created for project .* but could not be printed.*revoke it/);
      t.notMatch(stderr, /sk_/, 'the key is not sent to stderr instead');
    }
  });

  await t.test('keys create takes the project id in any case, as the API does', async (t) => {
    const created = await opsJson<{ project_id: string }>('keys', 'create', '--project', project.project_id.toUpperCase(), '--json');
    t.equal(created.project_id, project.project_id, 'stored lower-case');
  });
});

t.test('projections status: a rebuild left in its slot (its process killed) shows when it last moved', async (t) => {
  const dir = join(dataDir, 'killed-rebuild');
  const created = await start(['projects', 'create', '--name', 'Demo', '--tenant', 't'], { DATA_DIR: dir }).done;
  t.equal(created.code, 0, created.stderr);
  // What `projections rebuild projects` leaves behind when kill -9 ends it before its first batch.
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  await reads.register(projectsProjection.name, projectsProjection.collections);
  const slot = await reads.startRebuild(projectsProjection.name);
  await reads.close();
  t.match(slot.updated_at, /^\d{4}-\d\d-\d\dT/);
  const json = await start(['projections', 'status', '--json'], { DATA_DIR: dir }).done;
  const row = (JSON.parse(json.stdout) as Array<{ projection: string; rebuilding: unknown }>).find((r) => r.projection === projectsProjection.name);
  t.strictSame(row?.rebuilding, { position: 0, generation: slot.generation, updated_at: slot.updated_at });
  const table = await start(['projections', 'status'], { DATA_DIR: dir }).done;
  t.match(table.stdout, `g${slot.generation} at 0 (${slot.updated_at})`);
});

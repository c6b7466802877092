import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { seedMemories } from '../support/memory-seed.js';
import { ROOT, startScript } from '../support/processes.js';

/**
 * `ops backup` on a terminal shows a progress bar of the copy on stderr, as `projections rebuild` does; in a pipe (a
 * script, cron, a log) and with --json it shows none. The terminal is a real pseudo-terminal: util-linux `script`.
 */
t.setTimeout(300_000);
const hasScript = spawnSync('script', ['--version']).status === 0;
const dataDir = mkdtempSync(join(tmpdir(), 'cairn-backup-progress-'));
const out = mkdtempSync(join(tmpdir(), 'cairn-backup-progress-out-'));
t.teardown(() => {
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(out, { recursive: true, force: true });
});
const app = await startTestCairn({}, { dataDir });
await seedMemories(app, { agent: 'a', user: 'u' }, 3000, { vectors: false });
await app.stop();

t.test('on a terminal: a bar that ends at 100%, then the usual report', { skip: !hasScript && 'util-linux `script` is not installed' }, async (t) => {
  const target = join(out, 'tty');
  const command = `${JSON.stringify(process.execPath)} --import tsx ops/cli.ts backup ${JSON.stringify(target)}`;
  const run = spawnSync('script', ['-qec', command, '/dev/null'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir }, encoding: 'utf8' });
  t.equal(run.status, 0, run.stdout);
  // eslint-disable-next-line no-control-regex
  const screen = run.stdout.replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g, '');
  t.match(screen, /copying \[[=-]+\] \d+% \| \d+\.\d MB of about \d+\.\d MB/, 'the bar, with the sizes');
  t.match(screen, /copying \[=+\] 100% \| (\d+\.\d) MB of about \1 MB/, 'ending full, at what the originals hold');
  t.match(screen, /backup in .*: the event log up to position \d+ \(3000 events\), copied in/);
  t.ok(existsSync(join(target, 'backup-manifest.json')), 'a finished backup');
});

t.test('in a pipe, and with --json: no bar', async (t) => {
  const [piped, json] = await Promise.all([
    startScript('ops/cli.ts', ['backup', join(out, 'pipe')], { DATA_DIR: dataDir }).done,
    startScript('ops/cli.ts', ['backup', join(out, 'json'), '--json'], { DATA_DIR: dataDir }).done,
  ]);
  t.same([piped.code, piped.stderr], [0, '']);
  t.same([json.code, json.stderr], [0, '']);
  t.match(JSON.parse(json.stdout), { head: Number, files: [{ file: 'events.db' }] });
});

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { seedEventLog } from '../support/event-log.js';
import { startScript } from '../support/processes.js';

/**
 * An auditor reads a backup with the operator tools, DATA_DIR pointed at it (the README: "the backup is itself a
 * DATA_DIR"). Opening its log, even to read it, switched events.db to SQLite's WAL mode: the file changed, and
 * `ops verify-backup` then called the backup "not the file backed up", as if it had been tampered with. The tools
 * refuse such a backup instead, saying how to read it: from a copy without its manifest.
 */
t.setTimeout(180_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-ops-walk-inspect-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const ops = (dataDir: string, args: string[]) => startScript('ops/cli.ts', args, { DATA_DIR: dataDir }).done;
const contents = (dir: string) => readdirSync(dir).sort().map((name) => [name, createHash('sha256').update(readFileSync(join(dir, name))).digest('hex')]);

t.test('the tools do not change a backup they are pointed at; read from a copy without its manifest, it shows its events', async (t) => {
  const dataDir = join(work, 'data');
  await seedEventLog(dataDir, 'walk-audit');
  const backup = join(work, 'backup');
  t.equal((await ops(dataDir, ['backup', backup, '--json'])).code, 0);
  const taken = contents(backup);

  const reads = [['streams', 'list'], ['stream', 'show', 'walk-audit'], ['events', 'tail', '--until-head', '--correlation', 'walk-audit'], ['projections', 'status']];
  const runs = await Promise.all(reads.map((args) => ops(backup, args)));
  runs.forEach((run, i) => {
    t.equal(run.code, 1, `${reads[i]!.join(' ')}: refused`);
    t.equal(run.stdout, '');
    t.equal(run.stderr, `error: ${backup} holds a backup as \`ops backup\` wrote it (backup-manifest.json), not opened since: opening its log, even to read it, `
      + 'changes events.db (SQLite switches it to WAL mode), and `ops verify-backup` would no longer pass it. Use a copy without the manifest, '
      + `which a DATA_DIR does not need (cp -a ${backup} NEW && rm NEW/backup-manifest.json; DATA_DIR=NEW)\n`);
  });
  t.strictSame(contents(backup), taken, 'the backup is as it was taken');
  const verified = await ops(dataDir, ['verify-backup', backup]);
  t.equal(verified.code, 0, `and still passes verify-backup: ${verified.stderr}`);

  // As the message says.
  const copy = join(work, 'NEW');
  execFileSync('sh', ['-c', `cp -a ${backup} NEW && rm NEW/backup-manifest.json`], { cwd: work });
  const read = await ops(copy, ['events', 'tail', '--until-head', '--correlation', 'walk-audit', '--json']);
  t.equal(read.code, 0, read.stderr);
  t.strictSame(read.stdout.trim().split('\n').map((line) => (JSON.parse(line) as { data: { i: number } }).data.i), [1, 2, 3]);

  // A copy restored with its manifest and served since (its log in WAL mode) is a DATA_DIR like any other.
  const restored = join(work, 'restored');
  execFileSync('cp', ['-a', backup, restored]);
  const server = await startTestCairn({}, { dataDir: restored });
  await server.stop({ keepData: true });
  const served = await ops(restored, ['stream', 'show', 'walk-audit', '--json']);
  t.equal(served.code, 0, served.stderr);
  t.equal((JSON.parse(served.stdout) as unknown[]).length, 3);
});

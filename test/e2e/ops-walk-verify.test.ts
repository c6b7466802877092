import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { seedEventLog } from '../support/event-log.js';
import { startScript } from '../support/processes.js';

/**
 * `ops verify-backup` given a directory without backup-manifest.json (as a backup of an earlier version is) whose
 * stores a server has open: the live DATA_DIR typed for a backup's, or a copy of it. That is no backup (`ops backup`
 * writes each store as one file, never a -wal or -shm beside it), and "restorable", exit code 0, would tell the
 * operator that one exists.
 */
t.setTimeout(180_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-ops-walk-verify-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const ops = (args: string[]) => startScript('ops/cli.ts', args, { DATA_DIR: join(work, 'data') }).done;

interface Verified { restorable: boolean; manifest: unknown; problems: string[] }

t.test('verify-backup of a live DATA_DIR (no manifest, its stores open in place) is not restorable, exit code 3', async (t) => {
  const dataDir = join(work, 'data');
  await seedEventLog(dataDir, 'walk-verify');
  // A backup as an earlier version left it: its stores, no manifest. It still passes, saying what it could not check.
  const old = join(work, 'old-backup');
  t.equal((await ops(['backup', old, '--json'])).code, 0);
  rmSync(join(old, 'backup-manifest.json'));

  const server = await startTestCairn({}, { dataDir });
  t.teardown(() => server.stop({ keepData: true }));
  const open = readdirSync(dataDir).filter((name) => /-(wal|shm)$/.test(name)).sort();
  t.ok(open.includes('events.db-wal'), `the server has its stores open in DATA_DIR: ${readdirSync(dataDir).join(', ')}`);

  const [live, liveJson, oldRun] = await Promise.all([ops(['verify-backup', dataDir]), ops(['verify-backup', dataDir, '--json']), ops(['verify-backup', old])]);
  t.equal(oldRun.code, 0, `a backup without a manifest and without such files still passes: ${oldRun.stderr}`);
  t.equal(live.code, 3, `the live DATA_DIR is not a restorable backup: ${live.stdout}`);
  t.notMatch(live.stdout, /restorable;/, 'and is not called one');
  const problem = `${open.map((name) => `"${name}"`).join(', ')} are not part of a backup: its stores were opened in place `
    + `(a server runs or ran on ${dataDir}, or it is a copy of a live DATA_DIR); restore from a directory \`ops backup\` wrote`;
  t.match(live.stderr, `not restorable: ${problem}\n`);
  t.match(live.stderr, /^no checksums: the backup has no backup-manifest\.json/, 'the note on the missing manifest stays');
  t.equal(liveJson.code, 3);
  t.match(JSON.parse(liveJson.stdout) as Verified, { restorable: false, manifest: null, problems: [problem] });
});

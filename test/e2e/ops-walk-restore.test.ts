import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { seedEventLog } from '../support/event-log.js';
import { startScript } from '../support/processes.js';

/**
 * The restore `ops backup --help` describes, followed as written, as the README's: check the backup, copy it, point
 * DATA_DIR at the copy. A server run on the backup itself changes its files, and it no longer passes verify-backup
 * (the README: "restore from a copy to keep the backup verifiable"); the help said to point DATA_DIR at the backup,
 * or to move its files.
 */
t.setTimeout(180_000);
const work = mkdtempSync(join(tmpdir(), 'cairn-ops-walk-restore-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const ops = (dataDir: string, args: string[]) => startScript('ops/cli.ts', args, { DATA_DIR: dataDir }).done;

t.test('backup --help restores from a copy, as the README does, and the backup stays verifiable', async (t) => {
  const dataDir = join(work, 'data');
  await seedEventLog(dataDir, 'walk-restore');
  const backup = join(work, 'backup');
  const [taken, help] = await Promise.all([ops(dataDir, ['backup', backup, '--json']), ops(dataDir, ['backup', '--help'])]);
  t.equal(taken.code, 0, taken.stderr);

  const restore = /To restore: ([\s\S]*?), and start it\./.exec(help.stdout)?.[1]?.replace(/\s+/g, ' ');
  t.ok(restore, 'the help says how to restore');
  t.match(restore, /check it with `ops verify-backup DIR`, stop the server, copy it \(`cp -a DIR NEW`[^)]*\), point DATA_DIR at the copy/,
    'copy the backup, and run the server on the copy');
  t.notMatch(restore, /point DATA_DIR at the backup|move its files/, 'never the backup itself');

  // As the help says: verified, copied, a server run on the copy; the backup is still the one taken.
  t.equal((await ops(dataDir, ['verify-backup', backup])).code, 0);
  const copy = join(work, 'restored');
  execFileSync('cp', ['-a', backup, copy]);
  const onCopy = await startTestCairn({}, { dataDir: copy });
  await onCopy.stop({ keepData: true });
  const after = await ops(dataDir, ['verify-backup', backup]);
  t.equal(after.code, 0, `the backup still passes: ${after.stderr}`);

  // What the help said before: a server run on the backup itself. It is no longer the backup that was taken.
  const onBackup = await startTestCairn({}, { dataDir: backup });
  await onBackup.stop({ keepData: true });
  const changed = await ops(dataDir, ['verify-backup', backup]);
  t.equal(changed.code, 3, 'run on, the backup no longer passes');
  t.match(changed.stderr, /not restorable: .*(is not the file backed up|is not part of the backup)/);
});

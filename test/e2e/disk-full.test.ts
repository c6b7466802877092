import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestCairn } from '../support/cairn.js';
import { capturingLogger } from '../support/logs.js';

/**
 * The event log's disk fills up: a real, small filesystem (tmpfs) under DATA_DIR, filled with a file. Writes
 * are refused with 507 `storage-full`, and nothing of them is written; once the file is removed, writes succeed
 * again, and the read models (on the same disk, stalled meanwhile) catch up with exactly the acknowledged writes. Mounting needs root (or CAP_SYS_ADMIN): without it the
 * test says so and skips.
 */
const mountPoint = mkdtempSync(join(tmpdir(), 'cairn-full-'));
const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mountPoint], { encoding: 'utf8' });
t.teardown(() => {
  if (mounted.status === 0) spawnSync('umount', ['-l', mountPoint]);
  rmSync(mountPoint, { recursive: true, force: true });
});

t.test('a full disk: 507 with nothing written; once space is freed, writes resume and the read models catch up', { skip: mounted.status === 0 ? false : `cannot mount a tmpfs here (${(mounted.stderr || mounted.error?.message || '').trim()})` }, async (t) => {
  const { lines, log } = capturingLogger();
  const app = await startTestCairn({}, { dataDir: join(mountPoint, 'data'), log });
  t.teardown(() => app.stop());
  const scope = { agent: 'disk', user: 'full' };
  const store = async (text: string) => {
    const res = await app.memory('/v1/memories', { method: 'POST', json: { scope, text } });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  t.equal((await store('before the disk filled up')).status, 200);

  // Fill what is left but a little, then write until the log cannot grow.
  const free = () => Number(spawnSync('df', ['-k', '--output=avail', mountPoint], { encoding: 'utf8' }).stdout.split('\n')[1]) * 1024;
  const filler = join(mountPoint, 'filler');
  writeFileSync(filler, Buffer.alloc(Math.max(0, free() - 256 * 1024)));
  const padding = 'x'.repeat(2000);
  // Each write is checked on its own: a refused one moved the head not at all. (Once the disk is full, a few
  // more writes may still fit now and then, as SQLite and the checkpointer free pages of their own.)
  const refusals: Array<Awaited<ReturnType<typeof store>>> = [];
  let stored = 1;
  let unchanged = true;
  for (let i = 0; i < 2000 && refusals.length < 3; i++) {
    const head = await app.events.headPosition();
    const res = await store(`memory ${i} ${padding}`);
    if (res.status === 200) stored++;
    else {
      refusals.push(res);
      unchanged &&= (await app.events.headPosition()) === head;
    }
  }
  t.equal(refusals.length, 3, 'writes are refused before 2,000 of them fit in 256 KiB');
  for (const refused of refusals) {
    t.match(refused, { status: 507, body: { type: 'https://cairn.dev/problems/storage-full', status: 507, detail: /nothing of this request was written/ } });
  }
  t.ok(unchanged, 'nothing of a refused write was appended');
  t.ok(lines.some((l) => l.msg === 'request failed: storage full' && l.level === 50), 'logged as an error');

  rmSync(filler);
  const resumed = await store('after space was freed');
  t.equal(resumed.status, 200, 'writes succeed again');
  // The read models (on the same disk) catch up: every acknowledged write is there, and only those.
  const exported = await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`);
  t.equal(exported.status, 200);
  t.equal(((await exported.json()) as { memories: unknown[] }).memories.length, stored + 1, 'every acknowledged write, and only those');
  const found = (await (await app.memory('/v1/search', { method: 'POST', json: { scope, query: 'freed' } })).json()) as { results: Array<{ text: string }> };
  t.equal(found.results[0]?.text, 'after space was freed', 'and are read back');
});

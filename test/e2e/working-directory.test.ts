import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TEST_JWT_SECRET } from '../support/cairn.js';
import { freePort } from '../support/net.js';

const root = new URL('../..', import.meta.url).pathname;

/**
 * The server started from a directory that is not the checkout (as a service manager may run it):
 * its worker threads (log writer, checkpointers, projections) find their TypeScript loader too, and
 * the default DATA_DIR is ./data under the working directory.
 */
t.test('started from another working directory, the server runs its threads and keeps data in ./data there', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'cairn-cwd-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const [port, memoryPort] = [await freePort(), await freePort()];
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), MEMORY_PORT: String(memoryPort), AUTH_JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info' };
  delete env.DATA_DIR;
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(root, 'api/main.ts')], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { child.kill('SIGKILL'); });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
  child.stderr!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', () => { if (out.includes('cairn started')) resolve(); });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
  });
  // Ready means the projection thread reports and both stores answer; give the thread its first report.
  let ready: Response | undefined;
  for (let i = 0; i < 100; i++) {
    ready = await fetch(`http://127.0.0.1:${memoryPort}/readyz`);
    if (ready.status === 200) break;
    await ready.body?.cancel();
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.equal(ready!.status, 200, 'ready');
  t.match(await ready!.json(), { status: 'ready', thread: { mode: 'thread', state: 'running' }, stores: { events: 'ok', reads: 'ok' } });
  const stored = await fetch(`http://127.0.0.1:${memoryPort}/v1/memories`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: { agent: 'a', user: 'u' }, text: 'from elsewhere' }),
  });
  t.equal(stored.status, 200, 'a memory is stored');
  const found = await fetch(`http://127.0.0.1:${memoryPort}/v1/search`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: { agent: 'a', user: 'u' }, query: 'elsewhere' }),
  });
  t.match(await found.json(), { results: [{ text: 'from elsewhere' }] }, 'and found through the projections');
  t.ok(existsSync(join(cwd, 'data', 'events.db')), 'the log is in ./data of the working directory');
  t.notMatch(out, /ERR_MODULE_NOT_FOUND|thread failed/, 'no thread failed to start');
});

t.test('a setting it cannot run with: one line on stderr naming it, exit code 1, no stack trace', async (t) => {
  const parent = mkdtempSync(join(tmpdir(), 'cairn-config-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = join(parent, 'data');
  for (const [name, value, message] of [
    ['PORT', 'abc', 'PORT must be an integer from 0 to 65535, written in decimal digits, got "abc"'],
    ['PORT', '70000', 'PORT must be an integer from 0 to 65535, got "70000"'],
    ['LOG_LEVEL', 'verbose', 'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"'],
  ]) {
    const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(root, 'api/main.ts')], {
      cwd: root, env: { ...process.env, [name!]: value, DATA_DIR: dataDir }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    const [code] = await once(child, 'exit');
    t.equal(code, 1, `${name}=${value}: exit code 1`);
    t.equal(stderr, `cairn: configuration error: ${message}\n`, `${name}=${value}: one line`);
  }
  t.notOk(existsSync(dataDir), 'nothing was created');
});

import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/net.js';

const root = new URL('../..', import.meta.url).pathname;

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** `npm start` on a fresh DATA_DIR and free ports; resolves once the server says it started, with its pid. */
async function startNpm(t: Test, env: NodeJS.ProcessEnv, options: { detached?: boolean } = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-npm-start-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const [port, memoryPort] = [await freePort(), await freePort()];
  const npm = spawn('npm', ['start'], {
    cwd: root, detached: options.detached, stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), MEMORY_PORT: String(memoryPort), LOG_LEVEL: 'info', ...env },
  });
  const output = { text: '' };
  npm.stdout!.on('data', (chunk: Buffer) => { output.text += chunk.toString(); });
  npm.stderr!.on('data', (chunk: Buffer) => { output.text += chunk.toString(); });
  const started = await new Promise<{ pid: number }>((resolve, reject) => {
    npm.stdout!.on('data', () => {
      const line = output.text.split('\n').find((l) => l.includes('"cairn started"'));
      if (line) resolve(JSON.parse(line) as { pid: number });
    });
    npm.once('exit', (code) => reject(new Error(`npm start exited with ${code}: ${output.text}`)));
  });
  t.teardown(() => { if (alive(started.pid)) process.kill(started.pid, 'SIGKILL'); });
  return { npm, output, pid: started.pid, memoryPort };
}

/**
 * `npm start` as a service manager or a container runtime runs it: stopping it is a SIGTERM to npm, which
 * passes it on to its child only. The server must be that child (not a shell or a tsx launcher in between,
 * which would be killed while the server carried on, orphaned, holding its ports and the data directory).
 */
t.test('npm start: a SIGTERM to npm stops the server gracefully', async (t) => {
  const { npm, output, pid, memoryPort } = await startNpm(t, {});
  t.equal((await fetch(`http://127.0.0.1:${memoryPort}/healthz`)).status, 200, 'serving');

  npm.kill('SIGTERM');
  const deadline = Date.now() + 15_000;
  while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  t.notOk(alive(pid), 'the server process has exited');
  t.match(output.text, /"signal":"SIGTERM","msg":"stopping"/, 'after stopping on the signal, as on Ctrl-C');
  t.notMatch(output.text, /error while stopping/, 'and closing without an error');
  // npm exits with its script's exit code: 0 once the server closed cleanly (1 after an error while stopping).
  const npmExit = npm.exitCode !== null || npm.signalCode !== null ? [npm.exitCode, npm.signalCode] : await new Promise((resolve) => npm.once('exit', (...a) => resolve(a)));
  t.strictSame(npmExit, [0, null], 'npm start exits 0');
  await t.rejects(fetch(`http://127.0.0.1:${memoryPort}/healthz`), 'its port is closed');
});

/**
 * systemd's default (`KillMode=control-group`) and `kill -- -PGID` signal every process of the service: npm and the
 * server each get the SIGTERM, and npm passes its own on, so the server gets two at once. That is one stop: the
 * request in flight is answered, not cut as a second stop would cut it.
 */
t.test('npm start: a SIGTERM to its whole process group stops the server gracefully too', async (t) => {
  // A process group of its own (detached), as a service's control group.
  const { npm, output, memoryPort } = await startNpm(t, { CONSISTENCY_TIMEOUT_MS: '1500' }, { detached: true });
  // A read waiting for a position the log will not reach: answered 503 when CONSISTENCY_TIMEOUT_MS is up, if not cut.
  const held = fetch(`http://127.0.0.1:${memoryPort}/v1/search?min_position=999999999`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ scope: { agent: 'a', user: 'u' }, query: 'x' }),
  }).then((res) => `answered ${res.status}`, (error: Error) => `cut: ${error.message}`);
  t.equal((await fetch(`http://127.0.0.1:${memoryPort}/healthz`)).status, 200, 'serving');

  process.kill(-npm.pid!, 'SIGTERM');
  t.equal(await held, 'answered 503', 'the request in flight is answered');
  const npmExit = npm.exitCode !== null || npm.signalCode !== null ? [npm.exitCode, npm.signalCode] : await new Promise((resolve) => npm.once('exit', (...a) => resolve(a)));
  t.strictSame(npmExit, [0, null], 'npm start exits 0: the server stopped gracefully');
  // (The two deliveries can also merge into one, when npm passes its signal on before the server's handler ran.)
  t.notMatch(output.text, /stopping now/, 'a second delivery, if any, was taken as the same stop');
});

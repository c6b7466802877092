import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { REPEATED_SIGNAL_MS } from '../../infra/signals.js';
import { freePort } from '../support/net.js';

const main = fileURLToPath(new URL('../../api/main.ts', import.meta.url));

/**
 * A graceful stop waits for the requests in flight, up to CONSISTENCY_TIMEOUT_MS + 5 s. An operator who presses
 * Ctrl-C again, or a service manager that sends SIGTERM again, does not want to wait that long: the second signal
 * stops the server at once, with the signal's exit code (128 + its number), as a kill would (every acknowledged
 * write is on disk already). A repeat within REPEATED_SIGNAL_MS of the first is the same stop delivered twice.
 */
for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
  t.test(`a second ${signal} while stopping stops at once, exit code ${code}`, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-second-signal-'));
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    const [port, memoryPort] = [await freePort(), await freePort()];
    const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), main], {
      env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), MEMORY_PORT: String(memoryPort), LOG_LEVEL: 'info', CONSISTENCY_TIMEOUT_MS: '600000' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); });
    let out = '';
    const seen = (pattern: RegExp) => new Promise<void>((resolve, reject) => {
      const check = () => { if (pattern.test(out)) resolve(); };
      child.stdout!.on('data', check);
      child.once('exit', (c) => reject(new Error(`the server exited (${c}) before ${pattern}: ${out}`)));
      check();
    });
    child.stdout!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
    child.stderr!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
    await seen(/"cairn started"/);

    // A query waiting for a position the log will not reach for the whole timeout (10 minutes) holds the graceful stop.
    const held = request({ host: '127.0.0.1', port: memoryPort, method: 'POST', path: '/v1/search?min_position=999999999', headers: { 'Content-Type': 'application/json' } });
    const cut = new Promise<string>((resolve) => {
      held.on('response', (res) => resolve(`answered ${res.statusCode}`));
      held.on('error', (error) => resolve((error as NodeJS.ErrnoException).code ?? error.message));
    });
    held.end(JSON.stringify({ scope: { agent: 'a', user: 'u' }, query: 'anything' }));
    const health = await fetch(`http://127.0.0.1:${memoryPort}/healthz`);
    t.equal(health.status, 200, 'serving');

    child.kill(signal);
    await seen(/"msg":"stopping"/);
    t.equal(child.exitCode, null, 'the first signal waits for the request in flight');
    // The same signal again at once: the same stop delivered twice (a service manager signalling npm and the server).
    child.kill(signal);
    await seen(/"msg":"stop signal repeated at once/);
    t.equal(child.exitCode, null, 'a repeat within REPEATED_SIGNAL_MS is the same stop');
    await new Promise((resolve) => setTimeout(resolve, REPEATED_SIGNAL_MS + 100));
    t.equal(child.exitCode, null, 'still stopping gracefully');
    const exited = once(child, 'exit');
    child.kill(signal);
    const [exitCode, signalCode] = (await exited) as [number | null, string | null];
    t.strictSame([exitCode, signalCode], [code, null], `exit code ${code}`);
    t.match(out, /"msg":"stopping now, without waiting for requests in flight"/, 'the log says why');
    t.equal(await cut, 'ECONNRESET', 'the request in flight is cut, not answered');
  });
}

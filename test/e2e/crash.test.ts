import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configStream } from '../../domain/config/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { bearer, sessionToken, TEST_JWT_SECRET } from '../support/cairn.js';
import { freePort } from '../support/net.js';

const root = new URL('../..', import.meta.url).pathname;

/** Starts `npm start`'s entry point as a real process and resolves once it logged that it started. */
function startServer(dataDir: string, port: number, memoryPort: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'api/main.ts'], {
    cwd: root,
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), MEMORY_PORT: String(memoryPort), AUTH_JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('cairn started')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`server exited early with ${code}: ${out}`)));
  });
}

t.test('SIGKILL during a stream of writes loses no acknowledged write; projections catch up on restart', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-crash-'));
  const [port, memoryPort] = [await freePort(), await freePort()];
  let server = await startServer(dataDir, port, memoryPort);
  t.teardown(() => { server.kill('SIGKILL'); rmSync(dataDir, { recursive: true, force: true }); });
  const base = `http://127.0.0.1:${port}/api/v1`;
  const session = await sessionToken();
  const project = (await (await fetch(`${base}/projects`, { method: 'POST', headers: { ...bearer(session), 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'crash' }) })).json()) as { project_id: string };
  const created = (await (await fetch(`${base}/projects/${project.project_id}/keys`, { method: 'POST', headers: { ...bearer(session), 'Content-Type': 'application/json' }, body: '{}' })).json()) as { key: string };
  const headers = { ...bearer(created.key), 'Content-Type': 'application/json' };

  // 8 writers keep writing distinct config keys; the server is killed while they are in flight.
  const acknowledged = new Map<string, { value: number; position: number }>();
  let stop = false;
  let killed = false;
  let failures = 0;
  const refusedBeforeKill: string[] = [];
  const writers = Array.from({ length: 8 }, async (_, w) => {
    for (let i = 0; !stop; i++) {
      const key = `w${w}-${i}`;
      try {
        const res = await fetch(`${base}/projects/${project.project_id}/config/${key}`, { method: 'PUT', headers, body: JSON.stringify(i) });
        if (res.status === 200) acknowledged.set(key, { value: i, position: Number(res.headers.get('x-event-position')) });
        else failures++;
      } catch (error) {
        // Connection refused/reset: the server is gone, if it was killed; before that, a failed write.
        if (!killed) refusedBeforeKill.push(String(error));
        return;
      }
    }
  });
  while (acknowledged.size < 400) await new Promise((r) => setTimeout(r, 5));
  killed = true;
  server.kill('SIGKILL');
  stop = true;
  await Promise.all(writers);
  t.equal(failures, 0, 'no write failed before the kill');
  t.strictSame(refusedBeforeKill, [], 'no connection failed before the kill');
  t.ok(acknowledged.size >= 400, `${acknowledged.size} writes were acknowledged before the kill`);

  // Every acknowledged write is in the log, at the position the response named.
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  const logged = new Map((await events.readStream(configStream(project.project_id))).map((e) => [(e.data as { key: string }).key, e]));
  await events.close();
  const lost = [...acknowledged].filter(([key, ack]) => logged.get(key)?.position !== ack.position);
  t.same(lost, [], 'no acknowledged write is missing from the log');

  // Restart: the projection catches up to the log and serves every acknowledged value.
  server = await startServer(dataDir, port, memoryPort);
  const maxPosition = Math.max(...[...acknowledged.values()].map((a) => a.position));
  const config = await fetch(`${base}/projects/${project.project_id}/config`, { headers: { ...bearer(created.key), 'X-Min-Position': String(maxPosition) } });
  t.equal(config.status, 200);
  const values = (await config.json()) as Record<string, number>;
  const missing = [...acknowledged].filter(([key, ack]) => values[key] !== ack.value);
  t.same(missing, [], 'the read model has every acknowledged write after restart');
  t.ok(Object.keys(values).length >= acknowledged.size, 'writes committed but not yet acknowledged may also be there');
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
});

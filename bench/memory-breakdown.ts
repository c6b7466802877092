/**
 * Where the time of a durable POST /v1/memories goes: the same memory routes and stores with no
 * projection runners (all in the HTTP thread, as with PROJECTIONS_THREAD=false), with only the platform runners, with only the memory runners (with and without
 * the vector projection), and with all of them (what the real app runs). 3 s per run, HTTP client in a
 * worker thread. Run: `npx tsx bench/memory-breakdown.ts` (all variants, one process each, ~40 s).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { AddressInfo } from 'node:net';
import { CommandBus } from '../commands/bus.js';
import { createMemoryApp } from '../api/memory/app.js';
import { createMemoryModule } from '../api/memory/module.js';
import { loadConfig } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { openStores } from '../infra/stores.js';
import { allProjections, platformProjections } from '../projections/index.js';
import { ProjectionRunner } from '../projections/runner.js';

const VARIANTS = ['none', 'platform', 'novec', 'memory', 'full'];
const variant = process.argv[2];
if (!variant) {
  for (const v of VARIANTS) {
    spawnSync(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, v], { stdio: 'inherit' });
  }
  process.exit(0);
}
if (!VARIANTS.includes(variant)) throw new Error(`variant must be one of ${VARIANTS.join(', ')}`);
const dataDir = mkdtempSync(join(tmpdir(), 'cairn-var-'));
const config = loadConfig({ DATA_DIR: dataDir, EMBEDDINGS_PROVIDER: variant === 'novec' ? 'none' : 'local' });
const log = createLogger('silent');
const { events, reads } = await openStores(config);
const bus = new CommandBus(events);
const runners = new Map<string, ProjectionRunner>();
const waitFor = async (names: string[], p: number) => { await Promise.all(names.map((n) => runners.get(n)?.waitFor(p, 5000))); };
const memory = await createMemoryModule({ bus, events, reads, config, log, waitFor });
const platformNames = platformProjections.map((p) => p.name);
const projections = allProjections(config, memory.sinks).filter((p) => variant === 'full'
  || (variant === 'platform' && platformNames.includes(p.name))
  || ((variant === 'memory' || variant === 'novec') && !platformNames.includes(p.name)));
for (const p of projections) runners.set(p.name, new ProjectionRunner(p, events, reads, log));
for (const r of runners.values()) await r.start();
const app = createMemoryApp(memory.routes, { authenticate: async () => ({ kind: 'owner', verified: true }), waitFor }, config, log);
const server = createServer(app.callback());
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const port = (server.address() as AddressInfo).port;
const w = new Worker(`
const { parentPort, workerData } = require('node:worker_threads'); const http = require('node:http');
const agent = new http.Agent({ keepAlive: true });
const send = (body) => new Promise((resolve, reject) => { const payload = JSON.stringify(body);
  const req = http.request({ host: '127.0.0.1', port: workerData.port, path: '/v1/memories', method: 'POST', agent, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
  req.on('error', reject); req.end(payload); });
(async () => { for (const clients of [1, 8]) { const deadline = Date.now() + 3000; let n = 0; const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async (_, c) => { for (let i = 0; Date.now() < deadline; i++) { await send({ scope: { agent: 'b', user: 'u' + c + '-' + clients }, text: 'memory ' + i + ' of ' + c + ' lorem ipsum dolor sit amet' }); n++; } }));
  parentPort.postMessage(clients + ' clients: ' + Math.round(n / ((performance.now() - t0) / 1000)) + ' req/s'); } parentPort.postMessage('done'); })();
`, { eval: true, workerData: { port } });
const LABELS: Record<string, string> = {
  none: 'no projection runners', platform: 'platform runners only (4)', novec: 'memories + memory-personality runners',
  memory: 'memory runners (3, with memory-vectors)', full: 'all 7 runners (the real app)',
};
await new Promise<void>((resolve) => w.on('message', (m) => { if (m === 'done') resolve(); else console.log(`${LABELS[variant]}: ${m}`); }));
await w.terminate();
server.close();
for (const r of runners.values()) await r.stop();
await events.close(); await reads.close();
rmSync(dataDir, { recursive: true, force: true });
process.exit(0);

/**
 * Foundation benchmark: durable appends through the embedded store directly vs POST /agents over HTTP
 * (1 and 8 concurrent clients), readAll replay rate, and projection lag under a paced 1k commands/s load.
 * Run: npm run bench:foundation   (about a minute on 2 cores)
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { startCairn } from '../api/app.js';
import { EmbeddedEventStore } from '../infra/eventstore/embedded.js';
import { loadConfig } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { closedLoop, fmt, jsonClient, latencySummary, percentile } from './lib.js';

const SECRET = 'bench-secret-for-hs256-at-least-32-bytes';
const root = new URL('..', import.meta.url).pathname;
const N1 = Number(process.env.BENCH_N1 ?? 2000);
const N8 = Number(process.env.BENCH_N8 ?? 20000);

const freePort = () => new Promise<number>((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address() as { port: number };
    s.close(() => resolve(port));
  });
});

const meta = { correlation_id: 'bench', causation_id: 'bench', actor: 'bench', occurred_at: new Date().toISOString() };
const agentData = (i: number) => ({ agent_id: randomUUID(), name: `agent ${i}`, big5: { openness: 0.5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 }, language: 'en' });

async function rawAppends(dir: string) {
  const store = new EmbeddedEventStore(join(dir, 'raw-events.db'));
  const out: Record<number, number> = {};
  for (const [clients, total] of [[1, N1], [8, N8]] as const) {
    const { rate } = await closedLoop(clients, total, async (i) => {
      await store.append(`agent-${randomUUID()}`, [{ id: randomUUID(), type: 'AgentCreated', data: agentData(i), metadata: meta }], 'no_stream');
    });
    out[clients] = rate;
  }
  // Replay: read the whole log in pages, as a projection rebuild does.
  const started = performance.now();
  let count = 0;
  for (let position = 0; ;) {
    const page = await store.readAll(position, { limit: 1000 });
    if (page.length === 0) break;
    count += page.length;
    position = page[page.length - 1]!.position;
  }
  const replay = count / ((performance.now() - started) / 1000);
  await store.close();
  return { appends: out, replay, replayed: count };
}

async function sessionFor(tenant: string) {
  return new SignJWT({ tenant_id: tenant }).setProtectedHeader({ alg: 'HS256' }).setSubject('bench').setExpirationTime('1h').sign(new TextEncoder().encode(SECRET));
}

async function bootstrap(baseUrl: string) {
  const client = jsonClient(baseUrl, 1);
  const session = await sessionFor('bench');
  const project = JSON.parse((await client.request('POST', '/projects', { name: 'bench' }, { Authorization: `Bearer ${session}` })).body);
  const key = JSON.parse((await client.request('POST', `/projects/${project.project_id}/keys`, {}, { Authorization: `Bearer ${session}` })).body);
  client.close();
  return key.key as string;
}

async function httpCommands(dir: string) {
  const [port, memoryPort] = [await freePort(), await freePort()];
  const server = spawn(process.execPath, ['--import', 'tsx', 'api/main.ts'], {
    cwd: root, stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, DATA_DIR: join(dir, 'server'), PORT: String(port), MEMORY_PORT: String(memoryPort), AUTH_JWT_SECRET: SECRET, LOG_LEVEL: 'warn' },
  });
  await new Promise<void>((resolve, reject) => {
    const poll = setInterval(() => fetch(`http://127.0.0.1:${port}/healthz`).then(() => { clearInterval(poll); resolve(); }, () => undefined), 100);
    server.once('exit', (code) => { clearInterval(poll); reject(new Error(`server exited ${code}`)); });
  });
  const base = `http://127.0.0.1:${port}/api/v1`;
  const key = await bootstrap(base);
  const out: Record<number, { rate: number; latencies: number[] }> = {};
  let failures = 0;
  for (const [clients, total] of [[1, N1], [8, N8]] as const) {
    const client = jsonClient(base, clients);
    const run = `${clients}c-${Date.now()}`;
    // Warm-up (JIT, caches), not counted.
    await closedLoop(clients, 300, async (i) => { await client.request('POST', '/agents', { name: `warm ${run} ${i}` }, { Authorization: `Bearer ${key}` }); });
    out[clients] = await closedLoop(clients, total, async (i) => {
      const res = await client.request('POST', '/agents', { name: `bench ${run} ${i}` }, { Authorization: `Bearer ${key}` });
      if (res.status !== 200) failures++;
    });
    client.close();
  }
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  return { out, failures };
}

async function projectionLag(dir: string, rate = 1000, seconds = 5) {
  const config = loadConfig({ DATA_DIR: join(dir, 'lag'), PORT: '0', MEMORY_PORT: '0', AUTH_JWT_SECRET: SECRET });
  const cairn = await startCairn({ config, log: createLogger('warn') });
  const key = await bootstrap(`${cairn.platformUrl}/api/v1`);
  const client = jsonClient(`${cairn.platformUrl}/api/v1`, 64);
  const runner = cairn.runners.get('agents')!;
  const lags: number[] = [];
  const pending: Promise<void>[] = [];
  const total = rate * seconds;
  const started = performance.now();
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(client.request('POST', '/agents', { name: `lag ${i}` }, { Authorization: `Bearer ${key}` }).then(async (res) => {
      const acked = performance.now();
      await runner.waitFor(Number(res.headers['x-event-position']), 10_000);
      lags.push(performance.now() - acked);
    }));
  }
  await Promise.all(pending);
  const achieved = total / ((performance.now() - started) / 1000);
  client.close();
  await cairn.close();
  return { lags, achieved };
}

const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-'));
try {
  console.log(`Cairn foundation benchmark — node ${process.version}, ${new Date().toISOString()}`);
  const raw = await rawAppends(dir);
  const http = await httpCommands(dir);
  const lag = await projectionLag(dir);
  console.log('\n| measurement | 1 client | 8 clients |');
  console.log('|---|---|---|');
  console.log(`| embedded store, durable appends/s (1 event each) | ${fmt(raw.appends[1]!)} | ${fmt(raw.appends[8]!)} |`);
  console.log(`| POST /agents over HTTP, requests/s (2 durable appends each: name reservation + agent) | ${fmt(http.out[1]!.rate)} | ${fmt(http.out[8]!.rate)} |`);
  console.log(`| POST /agents latency | ${latencySummary(http.out[1]!.latencies)} | ${latencySummary(http.out[8]!.latencies)} |`);
  console.log(`| HTTP requests/s ÷ raw appends/s | ${fmt(http.out[1]!.rate / raw.appends[1]!, 2)} | ${fmt(http.out[8]!.rate / raw.appends[8]!, 2)} |`);
  console.log(`\nreadAll replay: ${fmt(raw.replay)} events/s over ${fmt(raw.replayed)} events`);
  console.log(`projection lag (agents read model) at ${fmt(lag.achieved)} commands/s: ${latencySummary(lag.lags)} (max ${fmt(percentile(lag.lags, 100), 2)} ms, n=${lag.lags.length})`);
  console.log(`HTTP failures: ${http.failures}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

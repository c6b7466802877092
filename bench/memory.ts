/**
 * Memory service benchmark, on the embedded default stores (SQLite event log with synchronous=FULL,
 * SQLite read models, local embedder). Run: `npx tsx bench/memory.ts` (about 2-4 minutes on 2 cores).
 *
 * 1. Durable store throughput: POST /v1/memories over HTTP with 1 and 8 concurrent keep-alive clients
 *    (each response comes after the event is fsynced), against raw appends of the same events to the
 *    same kind of event store with the same concurrency. The HTTP clients run in a worker thread.
 * 2. Search latency p50/p95/p99 for lexical, semantic and hybrid at 1k, 10k and 100k memories in one
 *    scope: over HTTP (worker thread client, sequential requests) and in-process (the same retrieval
 *    the route calls, including the consistency wait), to separate the HTTP overhead. The scope is
 *    seeded by appending MemoryStored events to the event store directly, then the projections catch up.
 *
 * Options (env): BENCH_SECONDS (per throughput run, default 5), BENCH_QUERIES (per mode and size, default 300),
 * BENCH_SIZES (default 1000,10000,100000).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { hasWrk, percentile, seedMemories, storedEvent, syntheticCorpus, wrk } from './lib.js';
import { startCairn } from '../api/app.js';
import { createMemoryModule } from '../api/memory/module.js';
import type { SearchMode } from '../api/memory/retrieval.js';
import { memoryStream } from '../domain/memory/decider.js';
import { loadConfig } from '../infra/config.js';
import { EmbeddedEventStore } from '../infra/eventstore/embedded.js';
import { createLogger } from '../infra/logger.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 300);
const SIZES = (process.env.BENCH_SIZES ?? '1000,10000,100000').split(',').map(Number);
const out = (line = '') => process.stdout.write(`${line}\n`);

// ---------------------------------------------------------------- synthetic text

const { random, vocabulary: VOCABULARY, zipfWord, sentence } = syntheticCorpus();
const query = () => Array.from({ length: 2 + Math.floor(random() * 3) }, zipfWord).join(' ');

// ---------------------------------------------------------------- figures

const ms = (x: number) => x.toFixed(x < 10 ? 2 : 1);
function latencies(samples: number[]) {
  return { p50: percentile(samples, 50), p95: percentile(samples, 95), p99: percentile(samples, 99) };
}

// ---------------------------------------------------------------- HTTP load generator (worker thread)

const CLIENT = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { url, token } = workerData;
const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function send(method, path, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = payload ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {};
    const req = http.request({ host: target.hostname, port: target.port, path, method, agent, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}
parentPort.on('message', async (job) => {
  if (job.kind === 'stores') {
    // job.clients concurrent clients, each storing unique texts into its own scope for job.seconds.
    const deadline = Date.now() + job.seconds * 1000;
    let ok = 0, failed = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: job.clients }, async (_, c) => {
      const scope = { agent: 'bench', user: job.prefix + '-' + c };
      for (let i = 0; Date.now() < deadline; i++) {
        const text = 'memory ' + i + ' of client ' + c + ' ' + job.words[(i * 7 + c) % job.words.length];
        const res = await send('POST', '/v1/memories', { scope, text, session: 'bench' });
        if (res.status === 200) ok++; else { failed++; if (failed < 3) console.error(res.status, res.body); }
      }
    }));
    parentPort.postMessage({ ok, failed, seconds: (performance.now() - started) / 1000 });
  } else if (job.kind === 'searches') {
    const samples = [];
    let failed = 0, results = 0;
    for (const q of job.queries) {
      const t0 = performance.now();
      const res = await send('POST', '/v1/search', { scope: job.scope, query: q, mode: job.mode, limit: job.limit });
      samples.push(performance.now() - t0);
      if (res.status !== 200) failed++; else results += JSON.parse(res.body).results.length;
    }
    parentPort.postMessage({ samples, failed, results });
  }
});
`;

class Client {
  private readonly worker: Worker;
  constructor(url: string) {
    this.worker = new Worker(CLIENT, { eval: true, workerData: { url } });
  }
  run<T>(job: Record<string, unknown>): Promise<T> {
    return new Promise((resolve, reject) => {
      const onError = (error: unknown) => reject(error);
      this.worker.once('error', onError);
      this.worker.once('message', (message) => {
        this.worker.off('error', onError);
        resolve(message as T);
      });
      this.worker.postMessage(job);
    });
  }
  close() { return this.worker.terminate(); }
}

// ---------------------------------------------------------------- 1. store throughput

async function rawAppendRate(concurrency: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-raw-'));
  const store = new EmbeddedEventStore(join(dir, 'events.db'));
  try {
    let count = 0;
    const deadline = Date.now() + SECONDS * 1000;
    const started = performance.now();
    await Promise.all(Array.from({ length: concurrency }, async (_, c) => {
      const scope = { agent: 'bench', user: `raw-${c}` };
      for (let revision = -1; Date.now() < deadline; revision++) {
        const text = `memory ${revision + 1} of client ${c} ${VOCABULARY[(revision * 7 + c + 7) % VOCABULARY.length]}`;
        await store.append(memoryStream(scope.agent, scope.user), [storedEvent(scope, text)], revision < 0 ? 'no_stream' : revision);
        count++;
      }
    }));
    return count / ((performance.now() - started) / 1000);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- main

const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-memory-'));
const config = loadConfig({ DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', CONSISTENCY_TIMEOUT_MS: '60000' });
const cairn = await startCairn({ config, log: createLogger('silent') });
const client = new Client(cairn.memoryUrl);
const benchStarted = performance.now();
out(`# Memory service benchmark (${new Date().toISOString()})`);
out(`node ${process.version}, ${(await import('node:os')).cpus().length} CPUs, embedded stores in ${tmpdir()}, local embedder, ${SECONDS}s per throughput run`);
out();
out('## Durable stores (POST /v1/memories) vs raw event-store appends');
out('| clients | HTTP stores/s | raw appends/s (same concurrency) | HTTP / raw | failed |');
out('|---|---|---|---|---|');
const words = VOCABULARY.slice(0, 1000);
// Warm-up (JIT, SQLite caches), not measured.
await client.run({ kind: 'stores', clients: 8, seconds: 2, prefix: 'warm', words });
const rows: Array<{ clients: number; http: number; raw: number }> = [];
for (const clients of [1, 8]) {
  const raw = await rawAppendRate(clients);
  const result = await client.run<{ ok: number; failed: number; seconds: number }>({ kind: 'stores', clients, seconds: SECONDS, prefix: `c${clients}`, words });
  const http = result.ok / result.seconds;
  rows.push({ clients, http, raw });
  out(`| ${clients} | ${http.toFixed(0)} | ${raw.toFixed(0)} | ${(http / raw).toFixed(2)} | ${result.failed} |`);
}
let wrkEight: number | undefined;
if (hasWrk()) {
  // The same stores driven by wrk (C) instead of the Node client thread above, which competes with the
  // server for the 2 cores: closer to what the server can take from separate client machines.
  out();
  out('Same stores, load generated by wrk (one C thread; 8 scopes):');
  out('| clients | HTTP stores/s | p50 ms | p99 ms | failed |');
  out('|---|---|---|---|---|');
  const wrkDir = mkdtempSync(join(tmpdir(), 'cairn-bench-wrk-'));
  for (const clients of [1, 8]) {
    const body = `'{"scope":{"agent":"bench","user":"wrk${clients}-' .. (n % 8) .. '"},"text":"wrk memory ' .. n .. ' ${words[3]} ${words[9]}"}'`;
    const r = await wrk(cairn.memoryUrl, clients, SECONDS, `return wrk.format("POST", "/v1/memories", {["Content-Type"] = "application/json"}, ${body})`, wrkDir);
    if (clients === 8) wrkEight = r.rate;
    out(`| ${clients} | ${r.rate.toFixed(0)} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.failures} |`);
  }
  rmSync(wrkDir, { recursive: true, force: true });
}
const catchUp = performance.now();
await cairn.waitFor(['memories', 'memory-vectors', 'memory-personality'], await cairn.events.headPosition());
out(`(projections caught up ${ms(performance.now() - catchUp)} ms after the last store was acknowledged)`);

out();
out('## Search latency, one scope, limit 5 (ms)');
out('| memories | mode | HTTP p50 | HTTP p95 | HTTP p99 | in-process p50 | in-process p95 | in-process p99 | avg results |');
out('|---|---|---|---|---|---|---|---|---|');

// The same retrieval the routes use, on the running app's stores and indexes.
const memory = await createMemoryModule({ bus: cairn.bus, events: cairn.events, reads: cairn.reads, config, log: createLogger('silent'), waitFor: cairn.waitFor });
const scope = { agent: 'bench', user: 'search' };
let seeded = 0;
const seedTimes: string[] = [];
const hybridP95 = new Map<number, number>();
const seen = new Set<string>();
for (const size of SIZES) {
  const t0 = performance.now();
  await seedMemories(cairn.events, scope, seeded, size, sentence, seen);
  seeded = size;
  const appended = performance.now();
  await cairn.waitFor(['memories', 'memory-vectors'], await cairn.events.headPosition());
  const projected = performance.now();
  // The second module's indexes load from the read models (what a restart does), timed too.
  await Promise.all([memory.sinks.memories.reset(), memory.sinks.vectors?.reset()]);
  const loaded = performance.now();
  seedTimes.push(`${size}: appended in ${ms(appended - t0)} ms, projected in ${ms(projected - appended)} ms, indexes loaded from the read models in ${ms(loaded - projected)} ms`);

  for (const mode of ['lexical', 'semantic', 'hybrid'] as SearchMode[]) {
    const queries = Array.from({ length: QUERIES }, query);
    // Warm-up (JIT, caches), not measured.
    await client.run({ kind: 'searches', scope, mode, limit: 5, queries: queries.slice(0, 30) });
    const http = await client.run<{ samples: number[]; failed: number; results: number }>({ kind: 'searches', scope, mode, limit: 5, queries });
    if (http.failed > 0) out(`!! ${http.failed} HTTP searches failed`);
    const inProcess: number[] = [];
    for (const q of queries) {
      const s = performance.now();
      await memory.retrieval.consistent(memory.retrieval.readModels(mode));
      await memory.retrieval.search(scope, q, mode, 5);
      inProcess.push(performance.now() - s);
    }
    const h = latencies(http.samples), p = latencies(inProcess);
    if (mode === 'hybrid') hybridP95.set(size, h.p95);
    out(`| ${size.toLocaleString('en-US')} | ${mode} | ${ms(h.p50)} | ${ms(h.p95)} | ${ms(h.p99)} | ${ms(p.p50)} | ${ms(p.p95)} | ${ms(p.p99)} | ${(http.results / queries.length).toFixed(1)} |`);
  }
}
out();
out('Seeding (event store appends of 1,000 MemoryStored events each, then the live projections):');
for (const line of seedTimes) out(`- ${line}`);

out();
// With wrk installed, the targets are judged on its figure (the server's capacity, not the Node client's).
const nodeEight = rows.find((r) => r.clients === 8)!;
const eight = { http: wrkEight ?? nodeEight.http, raw: nodeEight.raw };
out('## Targets');
out(`- >= 5,000 durable stores/s over HTTP with 8 clients: ${eight.http.toFixed(0)}/s ${eight.http >= 5000 ? 'MET' : 'NOT MET'}`);
out(`- HTTP with 8 clients >= half the raw append rate at the same concurrency: ${(eight.http / eight.raw).toFixed(2)} ${eight.http >= eight.raw / 2 ? 'MET' : 'NOT MET'}`);
for (const [size, target] of [[10_000, 5], [100_000, 25]] as const) {
  const p95 = hybridP95.get(size);
  if (p95 !== undefined) out(`- hybrid p95 over HTTP <= ${target} ms at ${size.toLocaleString('en-US')} memories: ${ms(p95)} ms ${p95 <= target ? 'MET' : 'NOT MET'}`);
}
out(`total time ${((performance.now() - benchStarted) / 1000).toFixed(0)} s`);

await client.close();
await cairn.close();
rmSync(dataDir, { recursive: true, force: true });

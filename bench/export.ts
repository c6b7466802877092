/**
 * Export benchmark: what GET /v1/export of a large scope costs the process that serves it, on the embedded
 * default stores with the local embedder (vectors included). Run: `npx tsx bench/export.ts` (about a minute
 * on 2 cores).
 *
 * One scope is seeded with 10k, then 100k memories (MemoryStored events appended to the event store directly
 * in batches of 1,000, then the projections catch up, as bench/memory.ts seeds). For each size, one export over
 * HTTP, measured by a client in a child process (so its buffers are not counted in the server's memory):
 * wall time to the last byte, time to the first byte, response size; in the server process, the peak RSS
 * growth and JS heap + external (Buffer) growth, sampled every 5 ms from a collected heap (garbage included:
 * V8 collects when it sees fit), and the event-loop delay; and the latency of a probe (GET /healthz every
 * 10 ms on its own connection) while the export runs, against the same probe with no export running, in the
 * same run. Then the same export again with a full collection every 250 ms: the memory the export holds; and once
 * more asked for with `Accept-Encoding: gzip` (size on the wire, time, and the probe while it compresses).
 *
 * Options (env): BENCH_SIZES (default 10000,100000), BENCH_BASELINE_SECONDS (default 3).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { startCairn } from '../api/app.js';
import { loadConfig } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { fmt, percentile, seedMemories, syntheticCorpus } from './lib.js';

const SIZES = (process.env.BENCH_SIZES ?? '10000,100000').split(',').map(Number);
const BASELINE_SECONDS = Number(process.env.BENCH_BASELINE_SECONDS ?? 3);
const out = (line = '') => process.stdout.write(`${line}\n`);

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// ---------------------------------------------------------------- synthetic text (as bench/memory.ts)

const { sentence } = syntheticCorpus();

// ---------------------------------------------------------------- client (child process)

/** Export and probe client: its own process, so the response it receives is not in the server's RSS. */
const CLIENT = `
const http = require('node:http');
const target = new URL(process.argv[1]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function probeLoop(state) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const samples = [];
  const one = () => new Promise((resolve, reject) => {
    const t0 = performance.now();
    http.get({ host: target.hostname, port: target.port, path: '/healthz', agent }, (res) => {
      res.resume();
      res.on('end', () => { samples.push(performance.now() - t0); resolve(res.statusCode); });
    }).on('error', reject);
  });
  const done = (async () => {
    while (!state.stop) {
      const t0 = performance.now();
      if (await one() !== 200) throw new Error('probe failed');
      await sleep(Math.max(0, 10 - (performance.now() - t0)));
    }
    agent.destroy();
  })();
  return { samples, done };
}
function exportOnce(path, gzip) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first, bytes = 0;
    const chunks = [];
    http.get({ host: target.hostname, port: target.port, path, headers: gzip ? { 'Accept-Encoding': 'gzip' } : {} }, (res) => {
      res.on('data', (c) => { first ??= performance.now() - t0; bytes += c.length; chunks.push(c); });
      res.on('end', () => resolve({ status: res.statusCode, ms: performance.now() - t0, first, bytes, chunks, chunked: res.headers['transfer-encoding'] === 'chunked', encoding: res.headers['content-encoding'] }));
      res.on('error', reject);
    }).on('error', reject);
  });
}
/** Checked once the probe has stopped: parsing here would stall this process's probe, not the server. */
function count(chunks, encoding) {
  try {
    const bytes = Buffer.concat(chunks);
    const body = JSON.parse((encoding === 'gzip' ? require('node:zlib').gunzipSync(bytes) : bytes).toString());
    return { memories: body.memories.length, vectors: body.memories.filter((m) => Array.isArray(m.vector)).length };
  } catch {
    return { memories: -1, vectors: -1 };
  }
}
process.on('message', async (job) => {
  const state = { stop: false };
  const probe = probeLoop(state);
  let result = {};
  if (job.kind === 'baseline') await sleep(job.seconds * 1000);
  else { await sleep(200); result = await exportOnce(job.path, job.gzip); }
  state.stop = true;
  await probe.done;
  const { chunks, ...figures } = result;
  process.send({ ...figures, ...(chunks ? count(chunks, figures.encoding) : {}), probes: probe.samples });
});
`;

class Client {
  private readonly child: ChildProcess;
  constructor(url: string) {
    this.child = spawn(process.execPath, ['-e', CLIENT, url], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  }
  run<T>(job: Record<string, unknown>): Promise<T> {
    return new Promise((resolve) => {
      this.child.once('message', (message) => resolve(message as T));
      this.child.send(job);
    });
  }
  close() { this.child.kill(); }
}

interface ExportResult { status: number; ms: number; first: number; bytes: number; memories: number; vectors: number; chunked: boolean; encoding?: string; probes: number[] }

/**
 * Runs `job` on the client while sampling this (the server's) process every 5 ms: peak RSS, JS heap + external
 * (Buffer) memory, garbage included, and the event-loop delay. `collect`: a full collection every 250 ms first,
 * so the peak is what the export holds, not what V8 left to collect (it perturbs the latencies: a run of its own).
 */
async function measured<T>(client: Client, job: Record<string, unknown>, collect = false): Promise<T & { rssMb: number; heapMb: number; loopMaxMs: number }> {
  gc();
  const before = process.memoryUsage();
  const peak = { rss: before.rss, heap: before.heapUsed + before.external };
  const sample = () => {
    const now = process.memoryUsage();
    peak.rss = Math.max(peak.rss, now.rss);
    peak.heap = Math.max(peak.heap, now.heapUsed + now.external);
  };
  const sampler = setInterval(sample, 5);
  const collector = collect ? setInterval(() => { gc(); sample(); }, 250) : undefined;
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const result = await client.run<T>(job);
  loop.disable();
  clearInterval(sampler);
  clearInterval(collector);
  sample();
  return { ...result, rssMb: (peak.rss - before.rss) / 2 ** 20, heapMb: (peak.heap - before.heapUsed - before.external) / 2 ** 20, loopMaxMs: loop.max / 1e6 };
}

// ---------------------------------------------------------------- main

const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-export-'));
const config = loadConfig({ DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', CONSISTENCY_TIMEOUT_MS: '60000' });
const cairn = await startCairn({ config, log: createLogger('silent') });
const client = new Client(cairn.memoryUrl);
const started = performance.now();
const ms = (x: number) => fmt(x, x < 10 ? 2 : 1);
out(`# Export benchmark (${new Date().toISOString()})`);
out(`node ${process.version}, ${cpus().length} CPUs, embedded stores, local embedder (vectors included); probe: GET /healthz every 10 ms`);
out();

const scope = { agent: 'bench', user: 'export' };
const path = `/v1/export?agent=${scope.agent}&user=${scope.user}`;
let seeded = 0;
const rows: string[] = [];
const seeding: string[] = [];
const baseline = await measured<{ probes: number[] }>(client, { kind: 'baseline', seconds: BASELINE_SECONDS });
rows.push(`| none (baseline, ${BASELINE_SECONDS} s) | | | | | ${baseline.probes.length} | ${ms(percentile(baseline.probes, 50))} | ${ms(percentile(baseline.probes, 99))} | ${ms(Math.max(...baseline.probes))} | ${ms(baseline.loopMaxMs)} | ${fmt(baseline.rssMb, 1)} | ${fmt(baseline.heapMb, 1)} | |`);
const seen = new Set<string>();
for (const size of SIZES) {
  const t0 = performance.now();
  await seedMemories(cairn.events, scope, seeded, size, sentence, seen);
  seeded = size;
  await cairn.waitFor(['memories', 'memory-vectors', 'memory-personality'], await cairn.events.headPosition());
  seeding.push(`${fmt(size)}: seeded and projected in ${ms(performance.now() - t0)} ms`);
  const r = await measured<ExportResult>(client, { kind: 'export', path });
  const held = await measured<ExportResult>(client, { kind: 'export', path }, true);
  // The same export asked for with Accept-Encoding: gzip (compressed on libuv's threads).
  const zipped = await measured<ExportResult>(client, { kind: 'export', path, gzip: true });
  const zippedHeld = await measured<ExportResult>(client, { kind: 'export', path, gzip: true }, true);
  for (const x of [r, held, zipped, zippedHeld]) {
    if (x.status !== 200 || x.memories !== size || x.vectors !== size) out(`!! export of ${size}: status ${x.status}, ${x.memories} memories, ${x.vectors} vectors`);
  }
  if (zipped.encoding !== 'gzip') out(`!! export of ${size} asked for gzip came as ${zipped.encoding ?? 'identity'}`);
  for (const [label, x, heldMb] of [['', r, fmt(held.heapMb, 1)], [', gzip', zipped, fmt(zippedHeld.heapMb, 1)]] as const) {
    rows.push(`| ${fmt(size)} memories${label} | ${ms(x.ms)} | ${ms(x.first)} | ${fmt(x.bytes / 2 ** 20, 1)} MiB | ${x.chunked ? 'chunked' : 'length'} | ${x.probes.length} | ${ms(percentile(x.probes, 50))} | ${ms(percentile(x.probes, 99))} | ${ms(Math.max(...x.probes))} | ${ms(x.loopMaxMs)} | ${fmt(x.rssMb, 1)} | ${fmt(x.heapMb, 1)} | ${heldMb} |`);
  }
}
out('| export | wall ms (last byte) | first byte ms | size | framing | probes | probe p50 ms | probe p99 ms | probe max ms | event-loop max delay ms | peak RSS growth MiB | peak heap + external growth MiB | held by the export MiB (GC every 250 ms) |');
out('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const row of rows) out(row);
out();
for (const line of seeding) out(`- ${line}`);
out(`total time ${((performance.now() - started) / 1000).toFixed(0)} s`);

client.close();
await cairn.close();
rmSync(dataDir, { recursive: true, force: true });

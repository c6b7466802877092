import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { memoryIdFor, memoryStream } from '../domain/memory/decider.js';
import type { EventStore, NewEvent } from '../infra/eventstore/port.js';

/** Percentile of a sorted copy (nearest-rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function latencySummary(ms: number[]): string {
  return `p50 ${fmt(percentile(ms, 50), 2)} ms, p95 ${fmt(percentile(ms, 95), 2)} ms, p99 ${fmt(percentile(ms, 99), 2)} ms`;
}

/** A minimal keep-alive JSON client on node:http (less client overhead than fetch, so the server is what is measured). */
export function jsonClient(baseUrl: string, maxSockets: number) {
  const url = new URL(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  return {
    request(method: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      return new Promise((resolve, reject) => {
        const req = http.request({
          host: url.hostname, port: url.port, method, path: url.pathname.replace(/\/$/, '') + path, agent,
          headers: { ...headers, ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': payload.length } : {}) },
        }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
        });
        req.on('error', reject);
        req.end(payload);
      });
    },
    close() { agent.destroy(); },
  };
}

/** Runs `worker` on `clients` concurrent loops until `total` calls were made; returns calls/s and latencies. */
export async function closedLoop(clients: number, total: number, worker: (i: number) => Promise<void>): Promise<{ rate: number; latencies: number[] }> {
  let next = 0;
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    for (let i = next++; i < total; i = next++) {
      const t0 = performance.now();
      await worker(i);
      latencies.push(performance.now() - t0);
    }
  }));
  return { rate: total / ((performance.now() - started) / 1000), latencies };
}

export interface WrkResult { rate: number; p50: number; p99: number; failures: number }

export const hasWrk = (): boolean => spawnSync('wrk', ['--version']).error === undefined;

/**
 * Runs wrk (one thread, `clients` connections) with a Lua `request()` body that may use a counter `n`.
 * wrk is written in C, so the load generator takes little of a small machine's CPU from the server.
 */
export async function wrk(baseUrl: string, clients: number, seconds: number, requestLua: string, dir: string): Promise<WrkResult> {
  const script = join(dir, `wrk-${Date.now()}-${Math.random().toString(36).slice(2)}.lua`);
  writeFileSync(script, `n = 0\nrequest = function()\n  n = n + 1\n  ${requestLua}\nend\n`);
  // Asynchronous: the server under test may run in this very process.
  const child = spawn('wrk', ['-t1', `-c${clients}`, `-d${seconds}s`, '--latency', '-s', script, baseUrl]);
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString(); });
  await new Promise((resolve) => child.once('close', resolve));
  const ms = (label: string) => {
    const m = new RegExp(`${label}%\\s+([\\d.]+)(us|ms|s)`).exec(out);
    return m ? Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1) : NaN;
  };
  return {
    rate: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]),
    p50: ms('50'),
    p99: ms('99'),
    failures: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
  };
}

/**
 * A deterministic synthetic corpus (mulberry32 PRNG from `seed`): an 8,000-word vocabulary of syllables, picked
 * Zipf-like (low ranks much more frequent), mixed with common English words, so that every run of a bench
 * stores and searches the same texts.
 */
export function syntheticCorpus(seed = 42) {
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  const SYLLABLES = ['ka', 'lo', 'mi', 'ren', 'tor', 'sa', 'vel', 'di', 'no', 'qua', 'ber', 'lin', 'ost', 'pra', 'zu', 'fen', 'gar', 'hel', 'mon', 'tis'];
  const vocabulary = Array.from({ length: 8000 }, () => {
    const n = 2 + Math.floor(random() * 3);
    return Array.from({ length: n }, () => SYLLABLES[Math.floor(random() * SYLLABLES.length)]).join('');
  });
  const COMMON = ['the', 'user', 'likes', 'has', 'a', 'is', 'with', 'and', 'to', 'in', 'of', 'their', 'on', 'at'];
  const zipfWord = () => vocabulary[Math.floor(vocabulary.length * random() ** 3)]!;
  const sentence = (): string => {
    const words: string[] = [];
    const n = 8 + Math.floor(random() * 12);
    for (let i = 0; i < n; i++) words.push(random() < 0.35 ? COMMON[Math.floor(random() * COMMON.length)]! : zipfWord());
    return words.join(' ');
  };
  return { random, vocabulary, zipfWord, sentence };
}

/** A MemoryStored event as the memory service appends it, for seeding the log directly. */
export function storedEvent(scope: { agent: string; user: string }, text: string): NewEvent {
  const now = new Date().toISOString();
  return {
    id: randomUUID(), type: 'MemoryStored',
    data: { ...scope, memory_id: memoryIdFor(text), text, session: 'bench', created_at: now },
    metadata: { correlation_id: randomUUID(), causation_id: randomUUID(), actor: 'owner', occurred_at: now },
  };
}

/**
 * Grows `scope` from `from` to `size` memories of distinct texts, appended straight to its stream 1,000 per
 * append (the projections then apply them as they would any write). `seen`: the ids already in the scope.
 */
export async function seedMemories(events: EventStore, scope: { agent: string; user: string }, from: number, size: number,
  sentence: () => string, seen: Set<string>): Promise<void> {
  const stream = memoryStream(scope.agent, scope.user);
  for (let seeded = from; seeded < size;) {
    const batch: NewEvent[] = [];
    while (batch.length < Math.min(1000, size - seeded)) {
      const text = sentence();
      const id = memoryIdFor(text);
      if (seen.has(id)) continue;
      seen.add(id);
      batch.push(storedEvent(scope, text));
    }
    await events.append(stream, batch, seeded === 0 ? 'no_stream' : seeded - 1);
    seeded += batch.length;
  }
}

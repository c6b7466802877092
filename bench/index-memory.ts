/**
 * Heap taken by the in-process search indexes in the shapes a companion service has: many scopes (one per agent and
 * user) holding few memories, memories updated turn after turn, and a scope that once held many vectors. Prints MB
 * of heap and array buffers (the vectors' Float32Arrays live outside the heap), after a full GC, per case.
 *
 *   npm run bench:index-memory            (this checkout)
 *   ROOT=/path/to/other/checkout npm run bench:index-memory   (another one, e.g. a `git worktree` of an older commit)
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const root = resolve(process.env.ROOT ?? new URL('..', import.meta.url).pathname);
const { BruteForceVectorIndex } = await import(pathToFileURL(`${root}/infra/search/vector.ts`).href) as typeof import('../infra/search/vector.js');
const { Bm25Index } = await import(pathToFileURL(`${root}/infra/search/lexical.ts`).href) as typeof import('../infra/search/lexical.js');

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:index-memory does)');

function heapMb(): number {
  gc!();
  gc!();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return (heapUsed + arrayBuffers) / 2 ** 20;
}

let seed = 42;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) - 0.5;
const vector = (dim: number) => Float32Array.from({ length: dim }, random);

/** Heap growth while `build` makes a structure that is kept alive until measured. */
function measure(label: string, build: () => unknown): void {
  const before = heapMb();
  const kept = build();
  const after = heapMb();
  console.log(`| ${label} | ${(after - before).toFixed(1)} MB |`);
  if (kept === undefined) throw new Error('nothing kept');
}

console.log(`index heap, ${root}, node ${process.version}\n`);
console.log('| case | heap + array buffers |');
console.log('|---|---|');
measure('vectors: 2,000 scopes of one memory, 256 dimensions', () => {
  const index = new BruteForceVectorIndex();
  for (let s = 0; s < 2_000; s++) index.upsert(`agent/user-${s}`, 'm1', 'local', vector(256));
  return index;
});
measure('vectors: 2,000 scopes of one memory, 1,536 dimensions', () => {
  const index = new BruteForceVectorIndex();
  for (let s = 0; s < 2_000; s++) index.upsert(`agent/user-${s}`, 'm1', 'openai', vector(1_536));
  return index;
});
measure('vectors: one scope, 10,000 stored then 9,990 deleted, 256 dimensions', () => {
  const index = new BruteForceVectorIndex();
  for (let i = 0; i < 10_000; i++) index.upsert('agent/user', `m${i}`, 'local', vector(256));
  for (let i = 10; i < 10_000; i++) index.remove('agent/user', `m${i}`);
  return index;
});
measure('lexical: 200 scopes, one memory each updated 1,000 times', () => {
  const index = new Bm25Index();
  for (let s = 0; s < 200; s++) {
    for (let turn = 0; turn < 1_000; turn++) index.upsert(`agent/user-${s}`, 'mood', `turn ${turn}: the user feels word${turn} and word${turn + 1} today`);
  }
  return index;
});
measure('lexical: 2,000 scopes of 10 memories each', () => {
  const index = new Bm25Index();
  for (let s = 0; s < 2_000; s++) for (let m = 0; m < 10; m++) index.upsert(`agent/user-${s}`, `m${m}`, `memory ${m} of user ${s}: likes tea number ${m * s}`);
  return index;
});

/**
 * How long the disk under DATA_DIR takes to make a small write durable: the floor under every
 * acknowledged append of the embedded log. Overwrites (a WAL restarted in place) and appends (a WAL
 * growing under steady writes), 2,000 `fdatasync`s each.
 *
 *   npx tsx bench/fsync.ts [dir=DATA_DIR or ./data]
 */
import { closeSync, fdatasyncSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2] ?? process.env.DATA_DIR ?? './data';
mkdirSync(dir, { recursive: true });
const file = join(dir, `fsync-probe-${process.pid}`);
const fd = openSync(file, 'w');
const page = Buffer.alloc(4096, 1);
const commit = Buffer.alloc(3 * 4096, 1);
const N = 2000;

function run(name: string, buffer: Buffer, offset: (i: number) => number): void {
  const micros: number[] = [];
  for (let i = 0; i < N; i++) {
    writeSync(fd, buffer, 0, buffer.length, offset(i));
    const start = process.hrtime.bigint();
    fdatasyncSync(fd);
    micros.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  micros.sort((a, b) => a - b);
  const at = (q: number) => micros[Math.min(N - 1, Math.floor(q * N))]!.toFixed(0);
  console.log(`| ${name} | ${at(0.5)} | ${at(0.9)} | ${at(0.99)} |`);
}

try {
  console.log(`fdatasync latency in ${dir} (µs), ${N} syncs each\n`);
  console.log('| write before each sync | p50 | p90 | p99 |\n|---|---|---|---|');
  run('4 KiB overwrite', page, (i) => (i % 256) * 4096);
  run('12 KiB appended (growing file)', commit, (i) => i * commit.length);
} finally {
  closeSync(fd);
  rmSync(file, { force: true });
}

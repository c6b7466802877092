/**
 * Two API nodes writing one memory scope in turn (a load balancer without affinity): every command a node
 * takes finds its cached state one event behind, its append fails on the expected revision, and it decides
 * again. Measures the command's latency through the bus when the node reads only the events since its cached
 * state (the bus as it is) against reading the scope's whole stream again (the baseline: `forget` before each command,
 * which is what a conflict cost before; the old path also paid the failed append on top), in one process, on
 * the embedded log (two connections to one file, as two nodes on one host).
 *
 *   npm run bench:bus-conflict -- [sizes=10000,50000] [commands=200]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../commands/bus.js';
import { memoryDecider, memoryStream } from '../domain/memory/decider.js';
import { EmbeddedEventStore } from '../infra/eventstore/embedded.js';
import { fmt, latencySummary, seedMemories, syntheticCorpus } from './lib.js';

const sizes = (process.argv[2] ?? '10000,50000').split(',').map(Number);
const commands = Number(process.argv[3] ?? 200);
const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'bench', request_key: id, sequence: { next: 0 } };
};

console.log(`| memories in the scope | variant | per command | reads of the stream per command |`);
console.log(`|---|---|---|---|`);
for (const size of sizes) {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bus-conflict-'));
  const file = join(dir, 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  const scope = { agent: 'bench', user: 'u1' };
  const stream = memoryStream(scope.agent, scope.user);
  const corpus = syntheticCorpus();
  await seedMemories(storeA, scope, 0, size, corpus.sentence, new Set());
  let reads = 0;
  const counting = (store: EmbeddedEventStore) => Object.assign(Object.create(store) as EmbeddedEventStore, {
    readStream: (s: string, o?: { fromRevision?: number; limit?: number }) => { reads++; return store.readStream(s, o); },
  });
  const nodes = [new CommandBus(counting(storeA)), new CommandBus(counting(storeB))];
  let n = 0;
  const store = (bus: CommandBus) => bus.handle(stream, memoryDecider, { type: 'StoreMemory', data: { ...scope, text: `alternating ${size} ${n++} ${randomUUID()}`, session: null } }, meta());
  for (const bus of nodes) await store(bus); // both nodes load the scope once

  for (const variant of ['one node (no conflict)', 'two nodes in turn, reading whole (baseline)', 'two nodes in turn, the bus as it is'] as const) {
    const latencies: number[] = [];
    reads = 0;
    for (let i = 0; i < commands; i++) {
      const bus = variant.startsWith('one') ? nodes[0]! : nodes[i % 2]!;
      if (variant.includes('baseline')) bus.forget(stream);
      const started = process.hrtime.bigint();
      await store(bus);
      latencies.push(Number(process.hrtime.bigint() - started) / 1e6);
    }
    console.log(`| ${fmt(size)} | ${variant} | ${latencySummary(latencies)} | ${fmt(reads / commands, 2)} |`);
  }
  await storeA.close();
  await storeB.close();
  rmSync(dir, { recursive: true, force: true });
}

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';

/** Writes a new embedded event log in `dataDir` holding one stream of `count` `WalkPinged` events ({ i }), and closes it. */
export async function seedEventLog(dataDir: string, stream: string, count = 3): Promise<void> {
  const events = new EmbeddedEventStore(join(dataDir, 'events.db'));
  const metadata = { correlation_id: stream, causation_id: stream, actor: 'test', occurred_at: new Date().toISOString() };
  await events.append(stream, Array.from({ length: count }, (_, k) => ({ id: randomUUID(), type: 'WalkPinged', data: { i: k + 1 }, metadata })), 'no_stream');
  await events.close();
}

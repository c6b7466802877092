import { join } from 'node:path';
import type { Config } from './config.js';
import { EmbeddedEventStore } from './eventstore/embedded.js';
import type { EventStore } from './eventstore/port.js';
import { EmbeddedReadStore } from './readstore/embedded.js';
import type { ReadStore } from './readstore/port.js';

/** Picks the adapters: EventStoreDB / MongoDB when their URLs are set, the embedded files in DATA_DIR otherwise. */
export async function openStores(config: Pick<Config, 'dataDir' | 'eventStoreUrl' | 'mongodbUrl' | 'mongodbDb'>): Promise<{ events: EventStore; reads: ReadStore }> {
  let events: EventStore;
  if (config.eventStoreUrl) {
    const { EsdbEventStore } = await import('./eventstore/esdb.js');
    events = new EsdbEventStore(config.eventStoreUrl);
  } else {
    events = new EmbeddedEventStore(join(config.dataDir, 'events.db'));
  }
  let reads: ReadStore;
  if (config.mongodbUrl) {
    const { MongoReadStore } = await import('./readstore/mongo.js');
    reads = await MongoReadStore.connect(config.mongodbUrl, config.mongodbDb);
  } else {
    reads = new EmbeddedReadStore(join(config.dataDir, 'readmodels.db'));
  }
  return { events, reads };
}

import t from 'tap';
import { EVENT_TYPES } from '../../domain/event-types.js';
import { loadConfig } from '../../infra/config.js';
import { unwrittenTypesNote } from '../../ops/events.js';
import { allProjections } from '../../projections/index.js';

// The compiler checks the list against the deciders' event unions (domain/event-types.ts); this checks the readers.
t.test('every type a projection reads is one Cairn writes', async (t) => {
  const projections = allProjections(loadConfig({}));
  t.ok(projections.some((p) => p.name === 'memory-vectors'), 'every projection, the optional one included');
  for (const p of projections) {
    t.strictSame(p.canHandle.filter((type) => !EVENT_TYPES.includes(type)), [], p.name);
    // Without them it would apply events of its types from any stream, another service's on a shared EventStoreDB.
    t.ok(p.streams && p.streams.length > 0 && p.streams.every((prefix) => /^[a-z]+-$/.test(prefix)), `${p.name} reads its stream categories only`);
  }
  t.strictSame([...EVENT_TYPES].sort(), EVENT_TYPES, 'in name order');
});

// What `events tail --type` says where it does not ask the log (EventStoreDB), which no test here can start.
t.test('a tailed type this version of Cairn does not write is named, with the types to pick the intended one from', async (t) => {
  t.equal(unwrittenTypesNote(['MemoryStore']),
    `this version of Cairn writes no event of type "MemoryStore"; waiting (known types: ${EVENT_TYPES.join(', ')})`);
  t.match(unwrittenTypesNote(['MemoryStore', 'Stored\u001b']), /^this version of Cairn writes no event of type "MemoryStore" or "Stored\\u001b"; .*MemoryStored/,
    'every name, escaped for the terminal');
  t.equal(unwrittenTypesNote(['MemoryStored']), undefined);
  t.equal(unwrittenTypesNote(['MemoryStore', 'MemoryStored']), undefined, 'one type that may come is enough to wait quietly');
});

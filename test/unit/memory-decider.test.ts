import t, { type Test as Tap } from 'tap';
import { memoryDecider, memoryIdFor, memoryStream, type MemoryCommand, type MemoryEvent, type MemoryState } from '../../domain/memory/decider.js';
import { type DomainError, type CommandContext } from '../../domain/shared/decider.js';

const scope = { agent: 'ava', user: 'u1' };
const ctx = (now: string): CommandContext => ({ now, actor: 'owner', request_key: 'k', request_hash: 'h' });
const T0 = '2025-01-01T00:00:00.000Z';
const T1 = '2025-01-02T00:00:00.000Z';

/** given(events).when(command, now).then(events) / .thenThrows(kind) */
function given(events: MemoryEvent[], tt: Tap = t) {
  const state = events.reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
  return {
    when(command: MemoryCommand, now = T1) {
      return {
        then: (expected: MemoryEvent[]) => tt.same(memoryDecider.decide(command, state, ctx(now)), expected),
        thenThrows: (kind: DomainError['kind']) => tt.throws(() => memoryDecider.decide(command, state, ctx(now)), { name: 'DomainError', kind }),
      };
    },
  };
}

const stored = (id: string, text: string, session: string | null = null, created_at = T0): MemoryEvent =>
  ({ type: 'MemoryStored', data: { ...scope, memory_id: id, text, session, created_at } });
const store = (id: string, text: string, session: string | null = null): MemoryCommand =>
  ({ type: 'StoreMemory', data: { ...scope, memory_id: id, text, session } });

t.test('stream names keep scopes apart even when ids contain dots', async (t) => {
  t.equal(memoryStream('a.b', 'c'), 'memory-a.b/c');
  t.not(memoryStream('a.b', 'c'), memoryStream('a', 'b.c'));
});

t.test('derived ids: trimmed, NFC-normalised text', async (t) => {
  t.equal(memoryIdFor('  tea  '), memoryIdFor('tea'));
  t.equal(memoryIdFor('caf\u0065\u0301'), memoryIdFor('caf\u00e9'));
  t.not(memoryIdFor('Tea'), memoryIdFor('tea'));
  t.match(memoryIdFor('tea'), /^m_[0-9a-f]{32}$/);
});

t.test('StoreMemory', async (t) => {
  t.test('new id → MemoryStored', async (t) => given([], t).when(store('m1', 'tea'), T0).then([stored('m1', 'tea')]));
  t.test('same text and session → nothing', async (t) => given([stored('m1', 'tea', 's')], t).when(store('m1', 'tea', 's')).then([]));
  t.test('different text → MemoryUpdated keeping created_at', async (t) => given([stored('m1', 'tea')], t).when(store('m1', 'coffee')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'coffee', session: null, created_at: T0, updated_at: T1 } },
  ]));
  t.test('different session → MemoryUpdated', async (t) => given([stored('m1', 'tea', 'a')], t).when(store('m1', 'tea', 'b')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 'b', created_at: T0, updated_at: T1 } },
  ]));
  t.test('session null and "" differ from a label', async (t) => given([stored('m1', 'tea', null)], t).when(store('m1', 'tea', 'x')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 'x', created_at: T0, updated_at: T1 } },
  ]));
  t.test('after delete the id can be stored again (a new memory)', async (t) => given([
    stored('m1', 'tea'), { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm1', deleted_at: T0 } },
  ], t).when(store('m1', 'tea')).then([stored('m1', 'tea', null, T1)]));
  t.test('after ScopeDeleted nothing is live', async (t) => given([
    stored('m1', 'tea'), { type: 'ScopeDeleted', data: { ...scope, memory_count: 1, personality: false, deleted_at: T0 } },
  ], t).when(store('m1', 'tea')).then([stored('m1', 'tea', null, T1)]));
});

t.test('DeleteMemory', async (t) => {
  t.test('live → MemoryDeleted', async (t) => given([stored('m1', 'tea')], t).when({ type: 'DeleteMemory', data: { ...scope, memory_id: 'm1' } }).then([
    { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm1', deleted_at: T1 } },
  ]));
  t.test('unknown → not_found', async (t) => given([], t).when({ type: 'DeleteMemory', data: { ...scope, memory_id: 'm1' } }).thenThrows('not_found'));
  t.test('already deleted → not_found', async (t) => given([
    stored('m1', 'tea'), { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm1', deleted_at: T0 } },
  ], t).when({ type: 'DeleteMemory', data: { ...scope, memory_id: 'm1' } }).thenThrows('not_found'));
});

t.test('SetPersonality', async (t) => {
  const set: MemoryCommand = { type: 'SetPersonality', data: { ...scope, personality: 'kind' } };
  t.test('first → PersonalitySet', async (t) => given([], t).when(set).then([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T1 } }]));
  t.test('same text → nothing', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } }], t).when(set).then([]));
  t.test('other text → PersonalitySet', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'grumpy', updated_at: T0 } }], t).when(set)
    .then([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T1 } }]));
});

t.test('DeleteScope', async (t) => {
  const del: MemoryCommand = { type: 'DeleteScope', data: scope };
  t.test('empty scope → nothing', async (t) => given([], t).when(del).then([]));
  t.test('counts live memories and the personality', async (t) => given([
    stored('m1', 'a'), stored('m2', 'b'), stored('m3', 'c'),
    { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm2', deleted_at: T0 } },
    { type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } },
  ], t).when(del).then([{ type: 'ScopeDeleted', data: { ...scope, memory_count: 2, personality: true, deleted_at: T1 } }]));
  t.test('personality only', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } }], t).when(del)
    .then([{ type: 'ScopeDeleted', data: { ...scope, memory_count: 0, personality: true, deleted_at: T1 } }]));
});

t.test('IngestFacts: each fact like a store without id, duplicates once, then FactsExtracted', async () => {
  const tea = memoryIdFor('tea'), dog = memoryIdFor('dog'), cat = memoryIdFor('cat');
  given([stored(tea, 'tea', 's'), stored(dog, 'dog', null)])
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: ['tea', 'dog', 'cat', 'cat'], model: 'm' } })
    .then([
      { type: 'MemoryUpdated', data: { ...scope, memory_id: dog, text: 'dog', session: 's', created_at: T0, updated_at: T1 } },
      { type: 'MemoryStored', data: { ...scope, memory_id: cat, text: 'cat', session: 's', created_at: T1 } },
      { type: 'FactsExtracted', data: { ...scope, session: 's', memory_ids: [tea, dog, cat], model: 'm', extracted_at: T1 } },
    ]);
});

t.test('evolve returns a new top-level state', async (t) => {
  const s0 = memoryDecider.initialState();
  const s1 = memoryDecider.evolve(s0, stored('m1', 'tea'));
  t.not(s1, s0);
  t.equal(s1.memories.size, 1);
});

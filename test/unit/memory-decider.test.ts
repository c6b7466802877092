import t, { type Test as Tap } from 'tap';
import { MAX_REMEMBERED_REQUESTS, memoryDecider, memoryIdFor, memoryStream, requestFingerprint, type MemoryCommand, type MemoryEvent, type MemoryState } from '../../domain/memory/decider.js';
import { type DomainError, type CommandContext } from '../../domain/shared/decider.js';

const scope = { agent: 'ava', user: 'u1' };
const ctx = (now: string, requestKey = 'k'): CommandContext => ({ now, actor: 'owner', request_key: requestKey, request_hash: 'h' });
const T0 = '2025-01-01T00:00:00.000Z';
const T1 = '2025-01-02T00:00:00.000Z';

/** given(events).when(command, now, requestKey?).then(events) / .thenThrows(kind) */
function given(events: MemoryEvent[], tt: Tap = t) {
  const state = events.reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
  return {
    when(command: MemoryCommand, now = T1, requestKey?: string) {
      return {
        then: (expected: MemoryEvent[]) => tt.same(memoryDecider.decide(command, state, ctx(now, requestKey)), expected),
        thenThrows: (kind: DomainError['kind']) => tt.throws(() => memoryDecider.decide(command, state, ctx(now, requestKey)), { name: 'DomainError', kind }),
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
  t.test('... sent with a key → recorded: MemoryUpdated with the memory as it is, times included', async (t) => given([stored('m1', 'tea', 's')], t)
    .when(store('m1', 'tea', 's'), T1, 'idem:a').then([{ type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 's', created_at: T0, updated_at: T0 } }]));
  t.test('a text held, without id or session, sent with a key → recorded as the memory holding it', async (t) => given([stored('m1', 'tea', 's')], t)
    .when({ type: 'StoreMemory', data: { ...scope, text: 'tea' } }, T1, 'idem:a')
    .then([{ type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 's', created_at: T0, updated_at: T0 } }]));
  t.test('different text → MemoryUpdated keeping created_at', async (t) => given([stored('m1', 'tea')], t).when(store('m1', 'coffee')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'coffee', session: null, created_at: T0, updated_at: T1 } },
  ]));
  t.test('different session → MemoryUpdated', async (t) => given([stored('m1', 'tea', 'a')], t).when(store('m1', 'tea', 'b')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 'b', created_at: T0, updated_at: T1 } },
  ]));
  t.test('session null and "" differ from a label', async (t) => given([stored('m1', 'tea', null)], t).when(store('m1', 'tea', 'x')).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'tea', session: 'x', created_at: T0, updated_at: T1 } },
  ]));
  t.test('a clock behind the last change (stepped back, another node) → updated_at not before it', async (t) => given([
    stored('m1', 'tea', null, T1),
  ], t).when(store('m1', 'coffee'), T0).then([
    { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'coffee', session: null, created_at: T1, updated_at: T1 } },
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
  t.test('... sent with a key → recorded as it is, updated_at unchanged', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } }], t)
    .when(set, T1, 'idem:a').then([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } }]));
  t.test('other text → PersonalitySet', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'grumpy', updated_at: T0 } }], t).when(set)
    .then([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T1 } }]));
  t.test('a clock behind the last change → updated_at not before it', async (t) => given([{ type: 'PersonalitySet', data: { ...scope, personality: 'grumpy', updated_at: T1 } }], t)
    .when(set, T0).then([{ type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T1 } }]));
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

t.test('IngestFacts: each new fact like a store without id, duplicates once, then FactsExtracted', async (t) => {
  const tea = memoryIdFor('tea'), dog = memoryIdFor('dog'), cat = memoryIdFor('cat');
  t.test('facts live memories already hold are left as they are, whatever their session', async (t) => given([stored(tea, 'tea', 's'), stored(dog, 'dog', 'other')], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: ['tea', 'dog', 'cat', 'cat'], model: 'm' } })
    .then([
      { type: 'MemoryStored', data: { ...scope, memory_id: cat, text: 'cat', session: 's', created_at: T1 } },
      { type: 'FactsExtracted', data: { ...scope, session: 's', memory_ids: [tea, dog, cat], model: 'm', extracted_at: T1 } },
    ]));
  t.test('an ingest without session does not erase a label', async (t) => given([stored(dog, 'dog', 'call-1')], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: null, facts: ['dog'], model: 'm' } })
    .then([{ type: 'FactsExtracted', data: { ...scope, session: null, memory_ids: [dog], model: 'm', extracted_at: T1 } }]));
});

t.test('StoreMemory without id: one memory per text, and a correction by id is never undone', async (t) => {
  const storeText = (text: string, session: string | null = null): MemoryCommand => ({ type: 'StoreMemory', data: { ...scope, text, session } });
  const porto = memoryIdFor('Sam lives in Porto');
  const updated = (id: string, text: string): MemoryEvent =>
    ({ type: 'MemoryUpdated', data: { ...scope, memory_id: id, text, session: null, created_at: T0, updated_at: T0 } });
  const deleted = (id: string): MemoryEvent => ({ type: 'MemoryDeleted', data: { ...scope, memory_id: id, deleted_at: T0 } });

  t.test('a new text: the id derived from it', async (t) => given([], t).when(storeText('Sam lives in Porto'), T0).then([stored(porto, 'Sam lives in Porto')]));
  t.test('the same text again: nothing', async (t) => given([stored(porto, 'Sam lives in Porto')], t).when(storeText('Sam lives in Porto')).then([]));
  t.test('the same text in another session: that memory moves to the session', async (t) => given([stored(porto, 'Sam lives in Porto')], t)
    .when(storeText('Sam lives in Porto', 's2')).then([
      { type: 'MemoryUpdated', data: { ...scope, memory_id: porto, text: 'Sam lives in Porto', session: 's2', created_at: T0, updated_at: T1 } },
    ]));
  t.test('the same text without a session: that memory as it is, label kept', async (t) => given([stored(porto, 'Sam lives in Porto', 's1')], t)
    .when({ type: 'StoreMemory', data: { ...scope, text: 'Sam lives in Porto' } }).then([]));
  t.test('the same text with session null: the label is removed', async (t) => given([stored(porto, 'Sam lives in Porto', 's1')], t)
    .when(storeText('Sam lives in Porto', null)).then([
      { type: 'MemoryUpdated', data: { ...scope, memory_id: porto, text: 'Sam lives in Porto', session: null, created_at: T0, updated_at: T1 } },
    ]));
  t.test('a new text without a session: stored without a label', async (t) => given([], t)
    .when({ type: 'StoreMemory', data: { ...scope, text: 'Sam lives in Porto' } }, T0).then([stored(porto, 'Sam lives in Porto')]));
  t.test('by id without a session: exactly that, the label removed', async (t) => given([stored('diet', 'vegetarian', 's1')], t)
    .when({ type: 'StoreMemory', data: { ...scope, memory_id: 'diet', text: 'vegetarian' } }).then([
      { type: 'MemoryUpdated', data: { ...scope, memory_id: 'diet', text: 'vegetarian', session: null, created_at: T0, updated_at: T1 } },
    ]));
  t.test('the old text after a correction by id: a new memory under the next derived id', async (t) => given([
    stored(porto, 'Sam lives in Porto'), updated(porto, 'Sam lives in Lisbon'),
  ], t).when(storeText('Sam lives in Porto')).then([stored(memoryIdFor('Sam lives in Porto', 2), 'Sam lives in Porto', null, T1)]));
  t.test('... and once more: that new memory, no third one', async (t) => given([
    stored(porto, 'Sam lives in Porto'), updated(porto, 'Sam lives in Lisbon'), stored(memoryIdFor('Sam lives in Porto', 2), 'Sam lives in Porto'),
  ], t).when(storeText('Sam lives in Porto')).then([]));
  t.test('a text held by a memory with a supplied id: that memory', async (t) => given([stored('diet', 'vegetarian')], t)
    .when(storeText('vegetarian')).then([]));
  t.test('after that memory is deleted: a new one under the derived id', async (t) => given([stored('diet', 'vegetarian'), deleted('diet')], t)
    .when(storeText('vegetarian')).then([stored(memoryIdFor('vegetarian'), 'vegetarian', null, T1)]));
  t.test('of two memories holding a text, the older one', async (t) => given([stored('a', 'tea'), stored('b', 'tea'), updated('a', 'coffee')], t)
    .when(storeText('tea')).then([]));
  t.test('ingest: the same rules, per fact', async (t) => given([
    stored(porto, 'Sam lives in Porto'), updated(porto, 'Sam lives in Lisbon'), stored('diet', 'vegetarian'),
  ], t).when({ type: 'IngestFacts', data: { ...scope, session: null, facts: ['Sam lives in Porto', 'vegetarian', 'Sam lives in Porto'], model: 'm' } }).then([
    stored(memoryIdFor('Sam lives in Porto', 2), 'Sam lives in Porto', null, T1),
    { type: 'FactsExtracted', data: { ...scope, session: null, memory_ids: [memoryIdFor('Sam lives in Porto', 2), 'diet'], model: 'm', extracted_at: T1 } },
  ]));
  t.test('evolve keeps the text index in step through updates, deletes and scope deletion', async (t) => {
    const state = [stored('a', 'tea'), stored('b', 'tea'), updated('a', 'coffee'), stored('c', 'milk'), deleted('c'),
    ].reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
    t.same([...state.byText.values()].sort(), [['a'], ['b']], 'coffee → a, tea → b; milk gone');
    const cleared = memoryDecider.evolve(state, { type: 'ScopeDeleted', data: { ...scope, memory_count: 2, personality: false, deleted_at: T0 } });
    t.equal(cleared.byText.size, 0);
  });
});

t.test('evolve returns a new top-level state', async (t) => {
  const s0 = memoryDecider.initialState();
  const s1 = memoryDecider.evolve(s0, stored('m1', 'tea'));
  t.not(s1, s0);
  t.equal(s1.memories.size, 1);
});

t.test('requests sent with an Idempotency-Key: a repeat decides the first one\'s event again (or nothing, for an ingest)', async (t) => {
  const del = requestFingerprint('idem:k1', 'DeleteMemory', 'm1');
  const deleteM1 = (request?: string): MemoryCommand => ({ type: 'DeleteMemory', data: { ...scope, memory_id: 'm1', ...(request ? { request_fingerprint: request } : {}) } });
  const deletedM1: MemoryEvent = { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm1', deleted_at: T0, request_fingerprint: del } };
  t.test('a deletion records its request', async (t) => given([stored('m1', 'tea')], t).when(deleteM1(del), T0).then([deletedM1]));
  t.test('its repeat: the same event, although the memory is gone', async (t) => given([stored('m1', 'tea'), deletedM1], t).when(deleteM1(del)).then([deletedM1]));
  t.test('... or live again', async (t) => given([stored('m1', 'tea'), deletedM1, stored('m1', 'tea')], t).when(deleteM1(del)).then([deletedM1]));
  t.test('... or after the scope was deleted', async (t) => given([
    stored('m1', 'tea'), deletedM1, { type: 'ScopeDeleted', data: { ...scope, memory_count: 0, personality: false, deleted_at: T0 } },
  ], t).when(deleteM1(del)).then([deletedM1]));
  const other = requestFingerprint('idem:k2', 'DeleteMemory', 'm1');
  const refusedM1 = (request: string, at = T1): MemoryEvent => ({ type: 'MemoryDeletionRefused', data: { ...scope, memory_id: 'm1', refused_at: at, request_fingerprint: request } });
  t.test('another request of a memory no longer live: not found, recorded as a refusal', async (t) => given([stored('m1', 'tea'), deletedM1], t).when(deleteM1(other)).then([refusedM1(other)]));
  t.test('... thrown without a key', async (t) => given([stored('m1', 'tea'), deletedM1], t).when(deleteM1()).thenThrows('not_found'));
  t.test('older events carry no request: a refusal', async (t) => given([
    stored('m1', 'tea'), { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm1', deleted_at: T0 } },
  ], t).when(deleteM1(del)).then([refusedM1(del)]));
  t.test('a refusal\'s repeat: the same refusal, although a memory with the id is live now', async (t) => given([refusedM1(other, T0), stored('m1', 'tea')], t)
    .when(deleteM1(other)).then([refusedM1(other, T0)]));
  t.test('a refusal is answered as the error it records', async (t) => {
    t.match(memoryDecider.refusal!(refusedM1(other)), { name: 'DomainError', kind: 'not_found', message: 'memory m1 does not exist in this scope' });
    t.equal(memoryDecider.refusal!(deletedM1), undefined);
    const state = [refusedM1(other)].reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
    t.equal(state.memories.size, 0, 'and changes nothing but what is remembered');
    t.same(state.requests.get(other), { type: 'MemoryDeletionRefused', memory_id: 'm1', refused_at: T1 });
  });

  const wipe = requestFingerprint('idem:k3', 'DeleteScope');
  const wiped: MemoryEvent = { type: 'ScopeDeleted', data: { ...scope, memory_count: 2, personality: true, deleted_at: T0, request_fingerprint: wipe } };
  t.test('a scope deletion\'s repeat: the same event, counts included', async (t) => given([
    stored('m1', 'tea'), stored('m2', 'milk'), { type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T0 } }, wiped, stored('m3', 'cake'),
  ], t).when({ type: 'DeleteScope', data: { ...scope, request_fingerprint: wipe } }).then([wiped]));
  const wipedEmpty: MemoryEvent = { type: 'ScopeDeleted', data: { ...scope, memory_count: 0, personality: false, deleted_at: T1, request_fingerprint: wipe } };
  t.test('an empty scope\'s deletion with a key: recorded, of 0', async (t) => given([stored('m1', 'tea'), deletedM1], t)
    .when({ type: 'DeleteScope', data: { ...scope, request_fingerprint: wipe } }).then([wipedEmpty]));
  t.test('... without a key: nothing', async (t) => given([], t).when({ type: 'DeleteScope', data: { ...scope } }).then([]));
  t.test('... and its repeat, once the scope holds memories: the same event, of 0', async (t) => given([{ ...wipedEmpty, data: { ...wipedEmpty.data, deleted_at: T0 } }, stored('m1', 'tea')], t)
    .when({ type: 'DeleteScope', data: { ...scope, request_fingerprint: wipe } }).then([{ ...wipedEmpty, data: { ...wipedEmpty.data, deleted_at: T0 } }]));

  const ingest = requestFingerprint('idem:k4', 'IngestFacts', 'the text', 's');
  const extracted: MemoryEvent = { type: 'FactsExtracted', data: { ...scope, session: 's', memory_ids: [memoryIdFor('tea')], model: 'm', extracted_at: T0, request_fingerprint: ingest } };
  t.test('an ingest records its request', async (t) => given([], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: ['tea'], model: 'm', request_fingerprint: ingest } }, T0)
    .then([stored(memoryIdFor('tea'), 'tea', 's'), extracted]));
  t.test('its repeat decides nothing, whatever facts it brings', async (t) => given([stored(memoryIdFor('tea'), 'tea', 's'), extracted], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: ['coffee'], model: 'm', request_fingerprint: ingest } }).then([]));
  const nothing: MemoryEvent = { type: 'FactsExtracted', data: { ...scope, session: 's', memory_ids: [], model: 'm', extracted_at: T1, request_fingerprint: ingest } };
  t.test('an ingest with a key that stored nothing is recorded', async (t) => given([], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: [], model: 'm', request_fingerprint: ingest } }).then([nothing]));
  t.test('... without a key: nothing', async (t) => given([], t).when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: [], model: 'm' } }).then([]));
  t.test('... and its repeat decides nothing, whatever facts it brings', async (t) => given([nothing], t)
    .when({ type: 'IngestFacts', data: { ...scope, session: 's', facts: ['coffee'], model: 'm', request_fingerprint: ingest } }).then([]));
  t.test('the state keeps which memories it stored', async (t) => {
    const state = [stored(memoryIdFor('tea'), 'tea', 's'), extracted].reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
    t.same(state.requests.get(ingest), { type: 'FactsExtracted', memory_ids: [memoryIdFor('tea')] });
  });

  t.test(`the last ${MAX_REMEMBERED_REQUESTS} are remembered, older ones forgotten`, async (t) => {
    const events: MemoryEvent[] = [];
    for (let i = 0; i <= MAX_REMEMBERED_REQUESTS; i++) {
      events.push(stored(`m${i}`, `text ${i}`), { type: 'MemoryDeleted', data: { ...scope, memory_id: `m${i}`, deleted_at: T0, request_fingerprint: `r${i}` } });
    }
    const state = events.reduce<MemoryState>((s, e) => memoryDecider.evolve(s, e), memoryDecider.initialState());
    t.equal(state.requests.size, MAX_REMEMBERED_REQUESTS);
    t.notOk(state.requests.has('r0'));
    t.ok(state.requests.has('r1'));
    t.ok(state.requests.has(`r${MAX_REMEMBERED_REQUESTS}`));
  });
  t.test('fingerprints differ by key, operation and content', async (t) => {
    const all = [
      requestFingerprint('idem:a', 'DeleteMemory', 'm1'), requestFingerprint('idem:b', 'DeleteMemory', 'm1'), requestFingerprint('idem:a', 'DeleteMemory', 'm2'),
      requestFingerprint('idem:a', 'DeleteScope'), requestFingerprint('idem:a', 'IngestFacts', 'x', ''), requestFingerprint('idem:a', 'IngestFacts', 'x', 's'),
      requestFingerprint('idem:a', 'IngestFacts', 'x\u0000', ''),
    ];
    t.equal(new Set(all).size, all.length);
    t.match(all[0], /^[0-9a-f]{32}$/);
  });
});

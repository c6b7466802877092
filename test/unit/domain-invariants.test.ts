import { createHash } from 'node:crypto';
import t, { type Test as Tap } from 'tap';
import { agentDecider, agentNameDecider, NEUTRAL_BIG5, type AgentProfile } from '../../domain/agents/decider.js';
import { apiKeyDecider } from '../../domain/apikeys/decider.js';
import { configDecider, type ConfigCommand, type ConfigEvent, type ConfigState } from '../../domain/config/decider.js';
import {
  MAX_FACTS_PER_INGEST, MAX_PERSONALITY_BYTES, MAX_SESSION_BYTES, MAX_TEXT_BYTES, memoryDecider, textKey,
  type MemoryCommand, type MemoryEvent, type MemoryState,
} from '../../domain/memory/decider.js';
import { projectDecider } from '../../domain/projects/decider.js';
import { DomainError, fold, type CommandContext, type Decider, type DomainEvent } from '../../domain/shared/decider.js';
import { generateApiKey } from '../../infra/apikeys.js';
import { testContext } from '../support/decider-spec.js';
import { mulberry32 } from '../support/prng.js';

const ctx = testContext();
const scope = { agent: 'ava', user: 'u1' };

/** Deciding `command` on the state of `events` is refused as invalid, with a message matching `message`. */
function refuses<S, C, E extends DomainEvent>(tt: Tap, decider: Decider<S, C, E>, command: C, message: RegExp, what: string, events: E[] = []): void {
  tt.throws(() => decider.decide(command, fold(decider, events), ctx), { name: 'DomainError', kind: 'invalid', message }, what);
}
function accepts<S, C, E extends DomainEvent>(tt: Tap, decider: Decider<S, C, E>, command: C, what: string): void {
  tt.doesNotThrow(() => decider.decide(command, decider.initialState(), ctx), what);
}

t.test('memory: the spec\'s limits hold in the decider, counted in bytes, at their edges', async (t) => {
  const store = (text: string, extra: { memory_id?: string; session?: string | null } = {}): MemoryCommand => ({ type: 'StoreMemory', data: { ...scope, text, ...extra } });
  accepts(t, memoryDecider, store('a'.repeat(MAX_TEXT_BYTES)), 'text of exactly 8,192 bytes');
  accepts(t, memoryDecider, store('\u00e9'.repeat(MAX_TEXT_BYTES / 2)), '4,096 two-byte characters: 8,192 bytes');
  refuses(t, memoryDecider, store('a'.repeat(MAX_TEXT_BYTES + 1)), /memory text must be at most 8192 bytes \(is 8193\)/, 'one byte past');
  refuses(t, memoryDecider, store('\u00e9'.repeat(MAX_TEXT_BYTES / 2 + 1)), /at most 8192 bytes \(is 8194\)/, '4,097 characters: fewer than 8,192 characters, but 8,194 bytes');
  refuses(t, memoryDecider, store(''), /memory text must not be empty/, 'empty');
  refuses(t, memoryDecider, store(' tea '), /trimmed and NFC/, 'not trimmed (the stored form is)');
  refuses(t, memoryDecider, store('cafe\u0301'), /trimmed and NFC/, 'decomposed (the stored form is NFC)');
  refuses(t, memoryDecider, store('tea \ud800'), /well-formed/, 'an unpaired surrogate');

  accepts(t, memoryDecider, store('tea', { session: 's'.repeat(MAX_SESSION_BYTES) }), 'session of exactly 128 bytes');
  accepts(t, memoryDecider, store('tea', { session: null }), 'no session');
  refuses(t, memoryDecider, store('tea', { session: 's'.repeat(MAX_SESSION_BYTES + 1) }), /session must be at most 128 bytes/, 'session one byte past');
  refuses(t, memoryDecider, store('tea', { session: '\u00e9'.repeat(65) }), /session must be at most 128 bytes \(is 130\)/, '65 characters, 130 bytes');
  refuses(t, memoryDecider, store('tea', { session: '' }), /session must be null/, 'an empty label (the API sends none as null)');

  accepts(t, memoryDecider, store('tea', { memory_id: 'note:42' }), 'a supplied id');
  refuses(t, memoryDecider, store('tea', { memory_id: 'a b' }), /memory id/, 'an id outside the id alphabet');
  refuses(t, memoryDecider, { type: 'StoreMemory', data: { agent: 'a/b', user: 'u1', text: 'tea' } }, /scope agent/, 'a scope id with "/" (would reach another scope\'s stream name)');
  refuses(t, memoryDecider, { type: 'DeleteScope', data: { agent: 'ava', user: 'u'.repeat(129) } }, /scope user/, 'a scope id over 128 characters');

  const personality = (text: string): MemoryCommand => ({ type: 'SetPersonality', data: { ...scope, personality: text } });
  accepts(t, memoryDecider, personality('p'.repeat(MAX_PERSONALITY_BYTES)), 'personality of exactly 8,192 bytes');
  refuses(t, memoryDecider, personality('p'.repeat(MAX_PERSONALITY_BYTES + 1)), /personality must be at most 8192 bytes/, 'personality one byte past');
  refuses(t, memoryDecider, personality('\u00e9'.repeat(MAX_PERSONALITY_BYTES / 2 + 1)), /personality must be at most 8192 bytes/, 'personality in characters under, in bytes over');
  refuses(t, memoryDecider, personality(' \n'), /personality must not be empty/, 'a blank personality');

  const ingest = (facts: string[]): MemoryCommand => ({ type: 'IngestFacts', data: { ...scope, session: null, facts, model: 'm' } });
  const facts = (n: number) => Array.from({ length: n }, (_, i) => `fact ${i}`);
  accepts(t, memoryDecider, ingest(facts(MAX_FACTS_PER_INGEST)), '20 facts');
  refuses(t, memoryDecider, ingest(facts(MAX_FACTS_PER_INGEST + 1)), /at most 20 facts \(has 21\)/, '21 facts');
  refuses(t, memoryDecider, ingest(['ok', ' untrimmed']), /fact 2 must be trimmed/, 'a fact not in the stored form');
  refuses(t, memoryDecider, ingest(['x'.repeat(MAX_TEXT_BYTES + 1)]), /fact 1 must be at most 8192 bytes/, 'an oversize fact');

  // Events written before these rules still fold, and a repeat of their request is still recognised.
  const old: MemoryEvent = { type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: ' old ', session: '', created_at: ctx.now } };
  t.equal(fold(memoryDecider, [old]).memories.size, 1, 'an old event outside the rules still folds');
});

t.test('agents: Big Five scores 0.0 to 1.0, all five, the three genders, and names that cannot be taken for ids', async (t) => {
  const profile: Omit<AgentProfile, 'owner'> = {
    agent_id: 'a1', project_id: 'p1', name: 'Ava', bio: null, gender: null, avatar_url: null, big5: NEUTRAL_BIG5, language: 'en',
    personality_prompt: null, speech_patterns: [], true_interests: [], true_dislikes: [],
  };
  const create = (over: Partial<Omit<AgentProfile, 'owner'>>) => ({ type: 'CreateAgent' as const, data: { ...profile, ...over } });
  accepts(t, agentDecider, create({ big5: { openness: 0, conscientiousness: 1, extraversion: 0, agreeableness: 1, neuroticism: 0.5 } }), 'scores at 0.0 and 1.0');
  accepts(t, agentDecider, create({ gender: 'non_binary' }), 'a gender the spec names');
  refuses(t, agentDecider, create({ big5: { ...NEUTRAL_BIG5, openness: 1.0001 } }), /big5/, 'a score just past 1.0');
  refuses(t, agentDecider, create({ big5: { ...NEUTRAL_BIG5, neuroticism: -0.0001 } }), /big5/, 'a score just below 0.0');
  refuses(t, agentDecider, create({ big5: { ...NEUTRAL_BIG5, agreeableness: Number.NaN } }), /big5/, 'NaN');
  const { neuroticism: _n, ...four } = NEUTRAL_BIG5;
  refuses(t, agentDecider, create({ big5: four as AgentProfile['big5'] }), /big5/, 'a trait missing');
  refuses(t, agentDecider, create({ big5: { ...NEUTRAL_BIG5, honesty: 0.5 } as AgentProfile['big5'] }), /big5/, 'a trait the model does not have');
  refuses(t, agentDecider, create({ gender: 'other' as AgentProfile['gender'] }), /gender/, 'a gender the spec does not name');

  const reserve = (name: string) => ({ type: 'ReserveAgentName' as const, data: { project_id: 'p1', name, agent_id: 'a1', abandoned_holder: null } });
  for (const name of ['.', '..', '0b7e6c1a-52f4-4e0e-8d3b-7a9c2e4f6d10', '0B7E6C1A-52F4-4E0E-8D3B-7A9C2E4F6D10']) {
    refuses(t, agentDecider, create({ name }), /^agent name must not/, `agent named ${name}`);
    refuses(t, agentNameDecider, reserve(name), /^agent name must not/, `name reservation of ${name}`);
  }
  accepts(t, agentDecider, create({ name: '...' }), 'three dots are a name a URL can carry');
  accepts(t, agentNameDecider, reserve('0b7e6c1a-52f4'), 'part of a UUID is a name');
});

t.test('api keys: the log gets a hash and a short prefix, never the key', async (t) => {
  const { key, prefix, hash } = generateApiKey();
  const data = { key_id: 'k1', project_id: 'p1', tenant_id: 't1', name: 'n', key_prefix: prefix, key_hash: hash, scopes: ['*'], expires_at: null };
  const create = (over: Partial<typeof data>) => ({ type: 'CreateApiKey' as const, data: { ...data, ...over } });
  accepts(t, apiKeyDecider, create({}), 'what generateApiKey gives');
  refuses(t, apiKeyDecider, create({ key_hash: key }), /hash must be a SHA-256 digest/, 'the key as its hash');
  refuses(t, apiKeyDecider, create({ key_hash: createHash('sha256').update(key).digest('base64') }), /hash must be a SHA-256 digest/, 'a digest in another encoding (auth compares hex)');
  refuses(t, apiKeyDecider, create({ key_prefix: key }), /prefix/, 'the key as its prefix');
  refuses(t, apiKeyDecider, create({ key_prefix: key.slice(0, 12) }), /prefix/, 'one character more than the prefix');

  // Use is recorded for the key's own project only, as revocation is refused for another.
  const created = apiKeyDecider.decide(create({}), apiKeyDecider.initialState(), ctx);
  t.same(apiKeyDecider.decide({ type: 'RecordApiKeyUse', data: { key_id: 'k1', project_id: 'p2' } }, fold(apiKeyDecider, created), ctx), [], 'another project: nothing recorded');
  t.equal(apiKeyDecider.decide({ type: 'RecordApiKeyUse', data: { key_id: 'k1', project_id: 'p1' } }, fold(apiKeyDecider, created), ctx).length, 1, 'its own: recorded');
  // Recorded at most once a minute by the wall clock, which may be stepped back (NTP).
  const use = { type: 'RecordApiKeyUse' as const, data: { key_id: 'k1', project_id: 'p1' } };
  const at = (now: string) => ({ ...ctx, now });
  const used = fold(apiKeyDecider, [...created, ...apiKeyDecider.decide(use, fold(apiKeyDecider, created), at('2026-01-01T12:00:00.000Z'))]);
  t.equal(apiKeyDecider.decide(use, used, at('2026-01-01T12:00:59.999Z')).length, 0, 'within the minute: not again');
  t.equal(apiKeyDecider.decide(use, used, at('2026-01-01T12:01:00.000Z')).length, 1, 'a minute later: again');
  t.equal(apiKeyDecider.decide(use, used, at('2026-01-01T11:00:00.000Z')).length, 1, 'the clock stepped back an hour: recorded, not held back for the hour');

  // expires_at: stored in the form the API returns, and after the key's creation (ctx.now), at the millisecond.
  const expiring = (expires_at: string) => ({ type: 'CreateApiKey' as const, data: { ...data, expires_at } });
  accepts(t, apiKeyDecider, expiring('2026-01-01T00:00:00.001Z'), 'a millisecond after creation');
  refuses(t, apiKeyDecider, expiring(ctx.now), /expires_at/, 'at creation: born expired');
  refuses(t, apiKeyDecider, expiring('2030-01-01T00:00:00Z'), /expires_at/, 'not in the stored form (milliseconds, UTC)');
  refuses(t, apiKeyDecider, expiring('next year'), /expires_at/, 'not a date-time');
});

t.test('config: keys and values as the API takes them, in the decider too', async (t) => {
  const put = (key: string, value: unknown = 1): ConfigCommand => ({ type: 'SetConfigValue', data: { project_id: 'p1', key, value } });
  accepts(t, configDecider, put('k'.repeat(256)), 'a key of 256 characters');
  accepts(t, configDecider, put('a.b:c-d_e'), 'every punctuation the alphabet has');
  refuses(t, configDecider, put('k'.repeat(257)), /config key/, 'a key of 257 characters');
  refuses(t, configDecider, put('..'), /config key/, '".."');
  refuses(t, configDecider, { type: 'DeleteConfigValue', data: { project_id: 'p1', key: 'a/b' } }, /config key/, 'a key with "/"');
  refuses(t, configDecider, { type: 'SetConfigValue', data: { project_id: 'p1', key: 'a', value: undefined } }, /JSON value/, 'undefined (no JSON text: it could not be hashed)');
  accepts(t, configDecider, put('a', null), 'null is a JSON value');
});

t.test('evolve is total: an event type this version does not know (a newer version\'s) changes no state', async (t) => {
  const unknown = { type: 'SomethingNew', data: { key: 'a', agent_id: 'x', request_key: 'r' } } as never;
  const cases: Array<[string, Decider<unknown, never, DomainEvent>, DomainEvent[]]> = [
    ['project', projectDecider as never, [{ type: 'ProjectCreated', data: { project_id: 'p1', tenant_id: 't1', name: 'P', created_by: 'u', created_at: ctx.now, request_key: 'r1', request_hash: 'h1' } }]],
    ['agent name', agentNameDecider as never, [{ type: 'AgentNameReserved', data: { project_id: 'p1', name: 'Ava', agent_id: 'a1', reserved_at: ctx.now } }]],
    ['config', configDecider as never, [{ type: 'ConfigValueSet', data: { project_id: 'p1', key: 'a', value: 1, set_at: ctx.now, request_key: 'r1' } }]],
    ['memory', memoryDecider as never, [{ type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: 'tea', session: null, created_at: ctx.now } }]],
  ];
  for (const [name, decider, events] of cases) {
    t.same(snapshot(decider.evolve(fold(decider, events), unknown)), snapshot(fold(decider, events)), name);
  }
});

/** A state as plain data (Maps as entry lists), to compare states. */
function snapshot(state: unknown): unknown {
  return JSON.parse(JSON.stringify(state, (_k, v: unknown) => (v instanceof Map ? { map: [...v.entries()] } : v)));
}

/** A small deterministic generator (mulberry32), so a failing sequence can be replayed from its seed. */
function random(seed: number) {
  const next = mulberry32(seed);
  return { pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!, chance: (p: number) => next() < p };
}

/**
 * Runs `steps` random commands through decide and evolve as the command bus does (refusals append nothing),
 * and checks after each: deciding changed nothing in the state, and folding every event so far from the
 * initial state rebuilds the same state.
 */
function explore<S, C, E extends DomainEvent>(tt: Tap, decider: Decider<S, C, E>, seed: number, steps: number, command: (r: ReturnType<typeof random>) => [C, CommandContext], check: (state: S, events: E[]) => void): void {
  const r = random(seed);
  let state = decider.initialState();
  const log: E[] = [];
  for (let i = 0; i < steps; i++) {
    const [c, context] = command(r);
    const before = snapshot(state);
    let events: E[] = [];
    try {
      events = decider.decide(c, state, context);
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
    }
    const after = snapshot(state);
    if (JSON.stringify(after) !== JSON.stringify(before)) {
      tt.fail(`seed ${seed} step ${i}: decide changed the state`, { command: c });
      return;
    }
    for (const e of events) state = decider.evolve(state, structuredClone(e));
    log.push(...events);
    const replayed = fold(decider, structuredClone(log));
    if (JSON.stringify(snapshot(replayed)) !== JSON.stringify(snapshot(state))) {
      tt.fail(`seed ${seed} step ${i}: replaying the log does not rebuild the state`, { command: c, events });
      return;
    }
    check(state, log);
  }
  tt.pass(`seed ${seed}: ${steps} commands, ${log.length} events`);
}

t.test('memory: random command sequences, replayed, rebuild the state; the text index agrees with the memories', async (t) => {
  const texts = ['tea', 'coffee', 'milk', 'caf\u00e9', 'a fact'];
  const ids = ['m1', 'm2', 'note:3'];
  const sessions = [undefined, null, 's1', 's2'];
  const keys = ['r-a', 'r-b', 'idem:k1', 'idem:k2'];
  const times = ['2026-01-01T00:00:00.000Z', '2026-01-02T00:00:00.000Z', '2025-12-31T00:00:00.000Z'];
  for (let seed = 1; seed <= 40; seed++) {
    explore<MemoryState, MemoryCommand, MemoryEvent>(t, memoryDecider, seed, 60, (r) => {
      const key = r.pick(keys);
      const fingerprint = key.startsWith('idem:') ? { request_fingerprint: `${key}:${r.pick(['x', 'y'])}` } : {};
      const kind = r.pick(['store', 'store', 'storeId', 'delete', 'personality', 'ingest', 'scope'] as const);
      const session = r.pick(sessions);
      const command: MemoryCommand =
        kind === 'store' ? { type: 'StoreMemory', data: { ...scope, text: r.pick(texts), ...(session === undefined ? {} : { session }) } }
          : kind === 'storeId' ? { type: 'StoreMemory', data: { ...scope, memory_id: r.pick(ids), text: r.pick(texts), ...(session === undefined ? {} : { session }) } }
            : kind === 'delete' ? { type: 'DeleteMemory', data: { ...scope, memory_id: r.pick(ids), ...fingerprint } }
              : kind === 'personality' ? { type: 'SetPersonality', data: { ...scope, personality: r.pick(['kind', 'grumpy']) } }
                : kind === 'ingest' ? { type: 'IngestFacts', data: { ...scope, session: session ?? null, facts: [r.pick(texts), r.pick(texts)], model: 'm', ...fingerprint } }
                  : { type: 'DeleteScope', data: { ...scope, ...fingerprint } };
      return [command, { now: r.pick(times), actor: 'owner', request_key: key, request_hash: 'h' }];
    }, (state) => {
      for (const [id, memory] of state.memories) {
        if (!state.byText.get(memory.text_key)?.includes(id)) t.fail(`live memory ${id} missing from the text index`);
        if (memory.updated_at < memory.created_at) t.fail(`memory ${id} updated before it was created`);
      }
      for (const [key, holders] of state.byText) {
        for (const id of holders) if (state.memories.get(id)?.text_key !== key) t.fail(`text index names ${id}, which does not hold that text`);
      }
    });
  }
  t.equal(textKey('tea'), textKey('tea'));
});

t.test('config: random command sequences, replayed, rebuild the state', async (t) => {
  for (let seed = 1; seed <= 40; seed++) {
    explore<ConfigState, ConfigCommand, ConfigEvent>(t, configDecider, seed, 60, (r) => {
      const key = r.pick(['a', 'b']);
      const command: ConfigCommand = r.chance(0.6)
        ? { type: 'SetConfigValue', data: { project_id: 'p1', key, value: r.pick([1, 2, { x: [1] }, null]) } }
        : { type: 'DeleteConfigValue', data: { project_id: 'p1', key } };
      return [command, testContext({ request_key: r.pick(['r-a', 'r-b', 'idem:k1', 'idem:k2']) })];
    }, () => undefined);
  }
});

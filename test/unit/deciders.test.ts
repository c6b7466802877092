import t from 'tap';
import { agentDecider, agentNameDecider, NEUTRAL_BIG5, type AgentCreated, type AgentNameReserved } from '../../domain/agents/decider.js';
import { apiKeyDecider, MAX_API_KEY_NAME, type ApiKeyCreated, type ApiKeyEvent } from '../../domain/apikeys/decider.js';
import { configDecider, MAX_REMEMBERED_CONFIG_REQUESTS, type ConfigValueSet } from '../../domain/config/decider.js';
import { MAX_PROJECT_NAME, projectDecider, type ProjectCreated } from '../../domain/projects/decider.js';
import { deciderSpec, testContext } from '../support/decider-spec.js';

const ctx = testContext();

/**
 * Names refused by every decider that takes a name, whoever sends the command (the operator CLI calls them
 * directly): not in the stored form (untrimmed, decomposed), one past `max`, invisible, reordering, control.
 */
const refusedNames = (max: number): Array<[string, string, RegExp]> => [
  ['untrimmed', ' P ', /trimmed and NFC/],
  ['decomposed', 'Zoe\u0308', /trimmed and NFC/],
  ['blank', '', /empty/],
  ['one past the limit', 'p'.repeat(max + 1), new RegExp(`more than ${max} characters`)],
  ['a zero-width space', 'P\u200Bq', /invisible.*\(U\+200B at UTF-16 offset 1\)/],
  ['a bidirectional control', 'P\u202Eq', /bidirectional.*\(U\+202E at UTF-16 offset 1\)/],
  ['a C0 control', 'P\u001Bq', /control characters.*\(U\+001B at UTF-16 offset 1\)/],
  ['an unpaired surrogate', 'P\uD800', /well-formed/],
];
/** Names at the limit, composed, or with a joiner that shapes a script or an emoji. */
const acceptedNames = (max: number) => ['p'.repeat(max), 'Zo\u00EB', '\u0915\u094D\u200D\u0937', '\u{1F469}\u200D\u{1F4BB} ops'];

t.test('projects', async (t) => {
  const spec = deciderSpec(t, projectDecider);
  const create = { type: 'CreateProject' as const, data: { project_id: 'p1', tenant_id: 't1', name: 'P' } };
  const created: ProjectCreated = { type: 'ProjectCreated', data: { ...create.data, created_by: ctx.actor, created_at: ctx.now, request_key: 'r1', request_hash: 'h1' } };
  spec.given([]).when(create).then([created]);
  spec.given([created]).when(create).then([]); // same Idempotency-Key, same command: replay
  spec.given([created]).when(create, testContext({ request_hash: 'other' })).thenThrows('idempotency_mismatch');
  spec.given([created]).when(create, testContext({ request_key: 'r2' })).thenThrows('conflict');

  // Names follow agent names' rules, in the decider too.
  const named = (name: string) => ({ ...create, data: { ...create.data, name } });
  for (const name of acceptedNames(MAX_PROJECT_NAME)) {
    spec.given([]).when(named(name)).then([{ ...created, data: { ...created.data, name } }], `accepted: ${JSON.stringify(name)}`);
  }
  for (const [what, name, message] of refusedNames(MAX_PROJECT_NAME)) {
    t.throws(() => projectDecider.decide(named(name), projectDecider.initialState(), ctx), { name: 'DomainError', kind: 'invalid', message: new RegExp(`^project name must .*${message.source}`) }, what);
  }
  // Events recorded before these rules still apply, and a replay of their request is still recognised.
  const old: ProjectCreated = { ...created, data: { ...created.data, name: ' Old\u200B ' } };
  spec.given([old]).when(named(' Old\u200B ')).then([], 'an old event with an untrimmed, invisible name still folds');
});

t.test('api keys', async (t) => {
  const spec = deciderSpec(t, apiKeyDecider);
  const data = { key_id: 'k1', project_id: 'p1', tenant_id: 't1', name: 'n', key_prefix: 'sk_abc', key_hash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', scopes: ['*'], expires_at: null };
  const created: ApiKeyCreated = { type: 'ApiKeyCreated', data: { ...data, created_by: ctx.actor, created_at: ctx.now, request_key: 'r1', request_hash: 'h1' } };
  spec.given([]).when({ type: 'CreateApiKey', data }).then([created]);
  spec.given([]).when({ type: 'CreateApiKey', data: { ...data, name: ' \t' } }).thenThrows('invalid');
  // Names follow agent names' rules, in the decider too (the operator CLI sends this command directly).
  for (const name of acceptedNames(MAX_API_KEY_NAME)) {
    spec.given([]).when({ type: 'CreateApiKey', data: { ...data, name } }).then([{ ...created, data: { ...created.data, name } }], `accepted: ${JSON.stringify(name)}`);
  }
  for (const [what, name, message] of refusedNames(MAX_API_KEY_NAME)) {
    t.throws(() => apiKeyDecider.decide({ type: 'CreateApiKey', data: { ...data, name } }, apiKeyDecider.initialState(), ctx),
      { name: 'DomainError', kind: 'invalid', message: new RegExp(`^api key name must .*${message.source}`) }, what);
  }
  const old: ApiKeyCreated = { ...created, data: { ...created.data, name: ' old\u202E ' } };
  spec.given([old]).when({ type: 'CreateApiKey', data: { ...data, name: ' old\u202E ' } }).then([], 'an old event with an untrimmed, reordering name still folds');
  spec.given([old]).when({ type: 'RevokeApiKey', data: { key_id: 'k1', project_id: 'p1' } })
    .then([{ type: 'ApiKeyRevoked', data: { key_id: 'k1', project_id: 'p1', revoked_by: ctx.actor, revoked_at: ctx.now } }], 'and its key can be revoked');
  spec.given([created]).when({ type: 'RevokeApiKey', data: { key_id: 'k1', project_id: 'p1' } })
    .then([{ type: 'ApiKeyRevoked', data: { key_id: 'k1', project_id: 'p1', revoked_by: ctx.actor, revoked_at: ctx.now } }]);
  spec.given([created]).when({ type: 'RevokeApiKey', data: { key_id: 'k1', project_id: 'other' } }).thenThrows('not_found');
  spec.given([]).when({ type: 'RevokeApiKey', data: { key_id: 'k1', project_id: 'p1' } }).thenThrows('not_found');
  const revoked: ApiKeyEvent = { type: 'ApiKeyRevoked', data: { key_id: 'k1', project_id: 'p1', revoked_by: 'x', revoked_at: ctx.now } };
  spec.given([created, revoked]).when({ type: 'RevokeApiKey', data: { key_id: 'k1', project_id: 'p1' } }).then([]);
  // Use is recorded at most once a minute.
  const use = { type: 'RecordApiKeyUse' as const, data: { key_id: 'k1', project_id: 'p1' } };
  const used: ApiKeyEvent = { type: 'ApiKeyUsed', data: { key_id: 'k1', project_id: 'p1', used_at: ctx.now } };
  spec.given([created]).when(use).then([used]);
  spec.given([created, used]).when(use, testContext({ now: '2026-01-01T00:00:59.999Z' })).then([]);
  spec.given([created, used]).when(use, testContext({ now: '2026-01-01T00:01:00.000Z' }))
    .then([{ type: 'ApiKeyUsed', data: { key_id: 'k1', project_id: 'p1', used_at: '2026-01-01T00:01:00.000Z' } }]);
  spec.given([created, revoked]).when(use).then([]);
});

t.test('config', async (t) => {
  const spec = deciderSpec(t, configDecider);
  const set: ConfigValueSet = { type: 'ConfigValueSet', data: { project_id: 'p1', key: 'a', value: { x: 1 }, set_at: ctx.now, request_key: ctx.request_key } };
  const setByOther: ConfigValueSet = { ...set, data: { ...set.data, request_key: 'another-request' } };
  const setInOldLog: ConfigValueSet = { ...set, data: { project_id: 'p1', key: 'a', value: { x: 1 }, set_at: ctx.now } };
  const deleted = { type: 'ConfigValueDeleted' as const, data: { project_id: 'p1', key: 'a', deleted_at: ctx.now, request_key: ctx.request_key } };
  const put = { type: 'SetConfigValue' as const, data: { project_id: 'p1', key: 'a', value: { x: 1 } } };
  const del = { type: 'DeleteConfigValue' as const, data: { project_id: 'p1', key: 'a' } };
  spec.given([]).when(put).then([set]);
  spec.given([setByOther]).when(put).then([], 'the value is already so: nothing to append');
  spec.given([setInOldLog]).when(put).then([], 'also for events written before request keys were recorded');
  spec.given([set]).when(put).then([set], 'a repeat of the request that set it decides the same event (the store answers it as a replay)');
  spec.given([]).when(del).thenThrows('not_found');
  spec.given([setByOther]).when(del).then([deleted]);
  spec.given([setByOther, { ...deleted, data: { ...deleted.data, request_key: 'another-request' } }]).when(del).thenThrows('not_found');
  spec.given([setByOther, deleted]).when(del).then([deleted], 'a repeat of the deleting request is not a 404 but the same deletion again');

  // Requests sent with an Idempotency-Key are remembered, so a repeat is recognised whatever happened since.
  const idem = testContext({ request_key: 'idem:k1' });
  const setIdem: ConfigValueSet = { ...set, data: { ...set.data, request_key: 'idem:k1' } };
  const deletedIdem = { ...deleted, data: { ...deleted.data, request_key: 'idem:k1' } };
  const deletedByOther = { ...deleted, data: { ...deleted.data, request_key: 'another-request' } };
  spec.given([setIdem, { ...setByOther, data: { ...setByOther.data, value: 2 } }, setByOther]).when(put, idem)
    .then([setIdem], 'the value was changed and changed back by others: the repeat is still recognised');
  spec.given([setIdem, setByOther]).when({ ...put, data: { ...put.data, value: { x: 2 } } }, idem)
    .then([{ ...setIdem, data: { ...setIdem.data, value: { x: 2 } } }], 'the same key with another value: a new change');
  spec.given([setByOther, deletedIdem, setByOther, deletedByOther]).when(del, idem)
    .then([deletedIdem], 'deleted, set again and deleted by others: the repeat of the first deletion is not a 404');
  spec.given([setIdem, setByOther]).when(del, idem).then([deletedIdem], 'the same key for a deletion is a new change');
  // At most MAX_REMEMBERED_CONFIG_REQUESTS are remembered: exactly that many later ones, and the first is still known; one more, and it is forgotten.
  const others = (n: number): ConfigValueSet[] => Array.from({ length: n }, (_, i) => ({ ...set, data: { ...set.data, key: `k${i}`, request_key: `idem:other-${i}` } }));
  spec.given([setIdem, ...others(MAX_REMEMBERED_CONFIG_REQUESTS - 1), setByOther]).when(put, idem).then([setIdem], `${MAX_REMEMBERED_CONFIG_REQUESTS} remembered`);
  // One more, and it is forgotten: decided again, as a request with a key that changes nothing, which is recorded (with the
  // first one's event ids: the store answers it as a replay).
  spec.given([setIdem, ...others(MAX_REMEMBERED_CONFIG_REQUESTS), setByOther]).when(put, idem).then([setIdem], 'one more: forgotten, and the value is already so: recorded all the same');

  // A request with a key that changes nothing is recorded (the same value), and remembered: its repeat decides that event again.
  spec.given([setByOther]).when(put, idem).then([setIdem], 'with a key, an unchanged value is recorded');
  spec.given([setByOther]).when(put, testContext({ request_key: 'r2' })).then([], 'without one, nothing');
  spec.given([setByOther, setIdem, { ...setByOther, data: { ...setByOther.data, value: 2 } }]).when(put, idem)
    .then([setIdem], 'its repeat after a later change: the same event (a replay), not a new one');
  // A deletion with a key of a key not set is recorded as a refusal, which its repeats decide again, also once the key is set.
  const refused = { type: 'ConfigValueDeletionRefused' as const, data: { project_id: 'p1', key: 'a', refused_at: ctx.now, request_key: 'idem:k1' } };
  spec.given([]).when(del, idem).then([refused], 'a 404 with a key: recorded');
  spec.given([refused, setByOther]).when(del, idem).then([refused], 'its repeat once the key is set: the refusal again, not a deletion');
  spec.given([refused, setByOther]).when(del, testContext({ request_key: 'idem:k2' })).then([{ ...deleted, data: { ...deleted.data, request_key: 'idem:k2' } }], 'another key deletes it');
  t.match(configDecider.refusal!(refused), { name: 'DomainError', kind: 'not_found', message: 'config key a not found' }, 'answered as the 404 it records');
  t.equal(configDecider.refusal!(set), undefined);
  const afterRefusal = [setByOther, refused].reduce((s, e) => configDecider.evolve(s, e), configDecider.initialState());
  t.same([afterRefusal.values.has('a'), afterRefusal.changedBy.get('a')], [true, 'another-request'], 'a refusal changes no value, nor who changed the key last');

  // The state is cached per project by the command bus: it must not hold the values themselves (up to 1 MiB each).
  const big: ConfigValueSet = { ...set, data: { ...set.data, value: 'x'.repeat(1024 * 1024) } };
  const state = configDecider.evolve(configDecider.initialState(), big);
  t.ok(JSON.stringify([...state.values, ...state.changedBy, ...state.requests]).length < 1024, 'a 1 MiB value leaves a few bytes in the state');
  spec.given([big]).when({ ...put, data: { ...put.data, value: big.data.value } }, testContext({ request_key: 'r2' })).then([], 'an unchanged value is still recognised');
  spec.given([big]).when({ ...put, data: { ...put.data, value: `${big.data.value}y` } }, testContext({ request_key: 'r2' }))
    .then([{ ...set, data: { ...set.data, value: `${big.data.value}y`, request_key: 'r2' } }], 'a changed one too');
});

t.test('agents and their names', async (t) => {
  const profile = {
    agent_id: 'a1', project_id: 'p1', name: 'Ava', bio: null, gender: null, avatar_url: null, big5: NEUTRAL_BIG5, language: 'en',
    personality_prompt: null, speech_patterns: [], true_interests: [], true_dislikes: [],
  };
  const created: AgentCreated = { type: 'AgentCreated', data: { ...profile, owner: ctx.actor, created_at: ctx.now, request_key: 'r1', request_hash: 'h1' } };
  deciderSpec(t, agentDecider).given([]).when({ type: 'CreateAgent', data: profile }).then([created]);
  deciderSpec(t, agentDecider).given([created]).when({ type: 'CreateAgent', data: profile }, testContext({ request_key: 'r2' })).thenThrows('conflict');

  const names = deciderSpec(t, agentNameDecider);
  const reserve = (agent_id: string, abandoned_holder: string | null = null) =>
    ({ type: 'ReserveAgentName' as const, data: { project_id: 'p1', name: 'Ava', agent_id, abandoned_holder } });
  const reserved: AgentNameReserved = { type: 'AgentNameReserved', data: { project_id: 'p1', name: 'Ava', agent_id: 'a1', reserved_at: ctx.now } };
  names.given([]).when(reserve('a1')).then([reserved]);
  names.given([reserved]).when(reserve('a1')).then([]);
  names.given([reserved]).when(reserve('a2')).thenThrows('conflict');
  // Only the exact holder the handler found abandoned can be displaced.
  names.given([reserved]).when(reserve('a2', 'a9')).thenThrows('conflict');
  names.given([reserved]).when(reserve('a2', 'a1'))
    .then([{ type: 'AgentNameReserved', data: { project_id: 'p1', name: 'Ava', agent_id: 'a2', reserved_at: ctx.now } }]);
});

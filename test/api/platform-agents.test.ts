import { randomUUID } from 'node:crypto';
import t from 'tap';
import { nameKey } from '../../api/platform/agents/routes.js';
import { agentNameStream, agentStream } from '../../domain/agents/decider.js';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

const app = await startTestCairn();
t.teardown(() => app.stop());
const a = await projectWithKey(app, 'tenant-a');
const b = await projectWithKey(app, 'tenant-b');
const big5 = { openness: 0.9, conscientiousness: 0.4, extraversion: 0.7, agreeableness: 0.8, neuroticism: 0.1 };

async function create(body: Record<string, unknown>, key = a.key, headers: Record<string, string> = {}) {
  const res = await app.platform('/agents', { method: 'POST', headers: { ...bearer(key), ...headers }, json: body });
  return { res, body: (await res.json()) as Record<string, any>, position: res.headers.get('x-event-position') };
}

t.test('create, then get by id and by URL-encoded name', async (t) => {
  const full = {
    name: 'Ava Lindqvist', personality_prompt: 'You are Ava.', big5, speech_patterns: ['says "indeed"'], true_interests: ['astronomy'],
    true_dislikes: ['rudeness'], project_id: a.projectId, language: 'sv-SE', bio: 'A curious mind', gender: 'female', avatar_url: 'https://cdn.example/ava.png',
  };
  const { res, body, position } = await create(full);
  t.equal(res.status, 200);
  t.match(body, { ...full, agent_id: /^[0-9a-f-]{36}$/, owner: `key:${a.keyId}`, created_at: /Z$/ });
  t.strictSame(body.personality, { big5, personality_prompt: 'You are Ava.', speech_patterns: ['says "indeed"'], true_interests: ['astronomy'], true_dislikes: ['rudeness'] });
  t.strictSame(body.profile, { bio: 'A curious mind', gender: 'female', avatar_url: 'https://cdn.example/ava.png', language: 'sv-SE' });
  t.match(body.mood, { valence: 0, arousal: 0, tension: 0, affiliation: 0 });
  const events = await app.events.readStream(agentStream(body.agent_id));
  t.equal(events.length, 1);
  t.equal(events[0]!.type, 'AgentCreated');
  t.equal(String(events[0]!.position), position);
  t.match(events[0]!.metadata, { actor: `key:${a.keyId}`, project_id: a.projectId, correlation_id: res.headers.get('x-request-id') });

  const consistent = { ...bearer(a.key), 'X-Min-Position': position! };
  const byId = await app.platform(`/agents/${body.agent_id}`, { headers: consistent });
  t.strictSame(await byId.json(), body, 'get by id returns what create returned');
  const byName = await app.platform(`/agents/${encodeURIComponent('Ava Lindqvist')}`, { headers: consistent });
  t.equal(byName.status, 200);
  t.equal((await byName.json()).agent_id, body.agent_id);
  t.equal((await app.platform(`/agents/${body.agent_id.toUpperCase()}`, { headers: consistent })).status, 200, 'UUIDs are case-insensitive');
  t.equal((await app.platform(`/agents/nobody`, { headers: consistent })).status, 404);
  t.equal((await app.platform(`/agents/${crypto.randomUUID()}`, { headers: consistent })).status, 404);
});

t.test('defaults', async (t) => {
  const { res, body } = await create({ name: 'Minimal' });
  t.equal(res.status, 200);
  t.match(body, { big5: { openness: 0.5, conscientiousness: 0.5, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.5 }, language: 'en', project_id: a.projectId, bio: null, speech_patterns: [] });
});

t.test('an optional field sent as null is left out: the defaults, and an agent read back can be sent again', async (t) => {
  const optional = ['personality_prompt', 'big5', 'speech_patterns', 'true_interests', 'true_dislikes', 'project_id', 'language', 'bio', 'gender', 'avatar_url'];
  const nulls = await create({ name: 'All null', ...Object.fromEntries(optional.map((f) => [f, null])) });
  t.equal(nulls.res.status, 200, JSON.stringify(nulls.body));
  const absent = await create({ name: 'None given' });
  const same = (body: Record<string, any>) => ({ ...body, agent_id: undefined, name: undefined, created_at: undefined });
  t.strictSame(same(nulls.body), same(absent.body), 'as if none were sent');
  t.match(nulls.body, { project_id: a.projectId, language: 'en', bio: null, big5: { openness: 0.5 }, speech_patterns: [] });
  const events = await app.events.readStream(agentStream(nulls.body.agent_id));
  const profile = (data: Record<string, unknown>) => ({ ...data, agent_id: undefined, name: undefined, created_at: undefined, request_key: undefined, request_hash: undefined });
  t.strictSame(profile(events[0]!.data), profile((await app.events.readStream(agentStream(absent.body.agent_id)))[0]!.data), 'the same event as for fields left out');
  // A client that copies an agent: the fields of the view it read (nulls among them) are sent back as they are.
  const read = await (await app.platform(`/agents/${nulls.body.agent_id}`, { headers: { ...bearer(a.key), 'X-Min-Position': nulls.position! } })).json();
  const copy = await create({ name: 'Copy', ...Object.fromEntries(optional.map((f) => [f, read[f]])) });
  t.equal(copy.res.status, 200, JSON.stringify(copy.body));
  t.strictSame(same(copy.body), same(nulls.body));
  // A wrong type is still a 400 naming the field, null or not.
  const wrong = await create({ name: 'Wrong', bio: 42, big5: 'high', speech_patterns: [null] });
  t.equal(wrong.res.status, 400);
  t.strictSame((wrong.body.errors as Array<{ location: string; message: string }>).map((e) => [e.location, e.message]).sort(), [
    ['body.big5', 'must be an object or null'],
    ['body.bio', 'must be a string or null'],
    ['body.speech_patterns.0', 'must be string'],
  ], 'one error each, saying what is allowed');
  const deep = await create({ name: 'Deep', big5: { ...big5, openness: 2 } });
  t.strictSame(deep.body.errors, [{ location: 'body.big5.openness', message: 'must be <= 1', value: 2 }], 'inside a field that may be null, the error is where it is');
  t.equal((await create({ name: null })).res.status, 400, 'name is required: null is not a name');
});

t.test('Big Five scores are 0.0 to 1.0, all five', async (t) => {
  t.equal((await create({ name: 'Zeros', big5: { ...big5, openness: 0, neuroticism: 0 } })).res.status, 200, '0.0 is allowed');
  t.equal((await create({ name: 'Ones', big5: { ...big5, openness: 1, neuroticism: 1 } })).res.status, 200, '1.0 is allowed');
  const below = await create({ name: 'Below', big5: { ...big5, openness: -0.01 } });
  t.equal(below.res.status, 400);
  t.match(below.body, { title: 'Bad Request', status: 400, errors: [{ location: 'body.big5.openness', value: -0.01 }] });
  const above = await create({ name: 'Above', big5: { ...big5, neuroticism: 1.01 } });
  t.equal(above.res.status, 400);
  t.match(above.body, { errors: [{ location: 'body.big5.neuroticism', value: 1.01 }] });
  const { openness: _o, ...four } = big5;
  const missing = await create({ name: 'Four', big5: four });
  t.equal(missing.res.status, 400);
  t.match(missing.body, { errors: [{ location: 'body.big5', message: /openness/ }] });
  t.equal((await create({ name: 'Text', big5: { ...big5, openness: '0.5' } })).res.status, 400, 'strings are not numbers');
});

t.test('names', async (t) => {
  t.equal((await create({ name: 'n'.repeat(128) })).res.status, 200, '128 characters');
  const long = await create({ name: 'n'.repeat(129) });
  t.equal(long.res.status, 400);
  t.match(long.body, { errors: [{ location: 'body.name' }] });
  t.equal((await create({ name: '   ' })).res.status, 400, 'blank');
  t.equal((await create({ name: crypto.randomUUID() })).res.status, 400, 'UUID-shaped names would shadow ids');
  const dup = await create({ name: 'Ava Lindqvist' });
  t.equal(dup.res.status, 409, 'names are unique within a project');
  t.match(dup.body, { type: /conflict/, agent_id: /^[0-9a-f-]{36}$/ });
  t.equal((await create({ name: 'Ava Lindqvist' }, b.key)).res.status, 200, 'the same name in another project is fine');
  const unicode = await create({ name: 'Zoë 🌙' });
  t.equal(unicode.res.status, 200);
  const got = await app.platform(`/agents/${encodeURIComponent('Zoë 🌙')}`, { headers: { ...bearer(a.key), 'X-Min-Position': unicode.position! } });
  t.equal((await got.json()).agent_id, unicode.body.agent_id);
});

t.test('names are trimmed and NFC-normalised, and the limit and the lookup apply to that form', async (t) => {
  // 100 characters written decomposed (e + combining acute: 200 code points), between spaces.
  const decomposed = `  ${'e\u0301'.repeat(100)}  `;
  const created = await create({ name: decomposed });
  t.equal(created.res.status, 200, 'within the limit once normalised');
  t.equal(created.body.name, '\u00e9'.repeat(100));
  const composed129 = await create({ name: '\u00e9'.repeat(129) });
  t.equal(composed129.res.status, 400, 'one past it');
  t.match(composed129.body, { errors: [{ location: 'body.name', message: /128/ }] });
  t.equal((await create({ name: 'e\u0301'.repeat(129) })).res.status, 400, 'one past it, decomposed');
  t.equal((await create({ name: ` ${'m'.repeat(128)} ` })).res.status, 200, '128 between spaces');
  // U+1F8F written decomposed is four code points (Α, U+0314, U+0342, U+0345): 512 sent, 128 stored.
  const widest = await create({ name: '\u0391\u0314\u0342\u0345'.repeat(128) });
  t.equal(widest.res.status, 200, '128 characters of four code points each, as sent');
  t.equal(widest.body.name, '\u1f8f'.repeat(128));
  const consistent = { ...bearer(a.key), 'X-Min-Position': created.position! };
  for (const asSent of [decomposed, decomposed.trim(), created.body.name]) {
    const got = await app.platform(`/agents/${encodeURIComponent(asSent)}`, { headers: consistent });
    t.equal(got.status, 200, `found by ${JSON.stringify(asSent.slice(0, 6))}…`);
    t.equal((await got.json()).agent_id, created.body.agent_id);
  }
});

t.test('names every URL client can look up, which are one name each', async (t) => {
  for (const name of ['.', '..', ' .. ']) {
    const res = await create({ name });
    t.equal(res.res.status, 400, `${JSON.stringify(name)}: URL clients resolve it as a path segment (GET /agents/%2E%2E is GET /)`);
    t.match(res.body, { errors: [{ location: 'body.name' }] });
  }
  t.equal((await create({ name: '...' })).res.status, 200, '"..." is a name like any other');
  // An unpaired surrogate becomes U+FFFD when hashed or sent in a URL: "a\ud800b" would take the name "a\ufffdb".
  const lone = await create({ name: 'Lone \ud800' });
  t.equal(lone.res.status, 400);
  t.match(lone.body, { errors: [{ location: 'body.name', message: /well-formed Unicode/ }] });
  t.equal((await create({ name: 'Lone \ufffd' })).res.status, 200, 'the name it would have collided with is free');
  for (const name of ['a/b', '100%', '%2F', 'who?', 'a#b', 'a+b']) {
    const res = await create({ name });
    t.equal(res.res.status, 200);
    const got = await app.platform(`/agents/${encodeURIComponent(name)}`, { headers: { ...bearer(a.key), 'X-Min-Position': res.position! } });
    t.equal((await got.json()).agent_id, res.body.agent_id, `${name} found by its URL-encoded name`);
  }
});

t.test('names that hide or reorder what they show are refused, naming the code point; joiners that shape a script or an emoji are kept', async (t) => {
  const refused: Array<[string, string]> = [
    ['Av\u0000a', 'U+0000'], ['Av\u001Fa', 'U+001F'], ['Av\u007Fa', 'U+007F'], ['Av\u0080a', 'U+0080'], ['Av\u009Fa', 'U+009F'], ['Av\na', 'U+000A'],
    ['Av\u202Ea', 'U+202E'], ['Av\u202Aa', 'U+202A'], ['Av\u2066a', 'U+2066'], ['Av\u2069a', 'U+2069'], ['Av\u200Ea', 'U+200E'], ['Av\u200Fa', 'U+200F'], ['Av\u061Ca', 'U+061C'],
    ['Av\u200Ba', 'U+200B'], ['Av\u200Ca', 'U+200C'], ['Av\u200Da', 'U+200D'], ['Av\u2060a', 'U+2060'], ['Av\uFEFFa', 'U+FEFF'],
    ['Av\u00ADa', 'U+00AD'], ['Av\u3164a', 'U+3164'], ['Av\u{E0001}a', 'U+E0001'], ['Av\uFE0Fa', 'U+FE0F'], ['Av\u2028a', 'U+2028'], ['Av\uFDD0a', 'U+FDD0'],
  ];
  for (const [name, code] of refused) {
    const res = await create({ name });
    t.equal(res.res.status, 400, code);
    t.match(res.body, { errors: [{ location: 'body.name', value: `${code} at UTF-16 offset 2` }] }, `${code}: named, with where it is`);
  }
  // The API's trimming (String.prototype.trim) removes a BOM or line breaks around a name, as the lookup does.
  t.equal((await create({ name: '\uFEFFTrimmed\n' })).body.name, 'Trimmed');
  for (const name of ['Av\u00A0a', 'Av\u202Fa', 'क्\u200Dष', 'می\u200Cخواهم', '👩🏽\u200D💻 Ava', '❤\uFE0F Ava', '葛\u{E0100}西', 'Ava 🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}', 'אבא']) {
    const res = await create({ name });
    t.equal(res.res.status, 200, JSON.stringify(name));
    const got = await app.platform(`/agents/${encodeURIComponent(name)}`, { headers: { ...bearer(a.key), 'X-Min-Position': res.position! } });
    t.equal((await got.json()).agent_id, res.body.agent_id, `${JSON.stringify(name)} found by its URL-encoded name`);
  }
});

t.test('language: BCP 47 in any case, stored and returned in canonical form; invalid tags are a 400 naming body.language', async (t) => {
  for (const [sent, stored] of [['EN', 'en'], ['en-us', 'en-US'], ['zh-hant-tw', 'zh-Hant-TW'], ['SR-LATN-RS', 'sr-Latn-RS'], ['es-419', 'es-419'], ['iw', 'he']]) {
    const res = await create({ name: `Lang ${sent}`, language: sent });
    t.equal(res.res.status, 200, sent);
    t.equal(res.body.language, stored, `${sent} is stored as ${stored}`);
    t.equal(res.body.profile.language, stored);
    const got = await app.platform(`/agents/${res.body.agent_id}`, { headers: { ...bearer(a.key), 'X-Min-Position': res.position! } });
    t.equal((await got.json()).language, stored, 'and read back so');
  }
  for (const language of ['English', 'en_US', 'en--US', 'en-a', 'en-US-US', 'i-klingon', 'x-private', '']) {
    const res = await create({ name: `Bad ${language}`, language });
    t.equal(res.res.status, 400, JSON.stringify(language));
    t.match(res.body, { errors: [{ location: 'body.language' }] });
  }
  const at35 = `en-${'a'.repeat(8)}-${'b'.repeat(8)}-${'c'.repeat(8)}-${'d'.repeat(5)}`;
  t.equal((await create({ name: 'Lang 35', language: at35 })).res.status, 200, '35 characters');
  t.equal((await create({ name: 'Lang 36', language: `${at35}e` })).res.status, 400, '36 characters');
  const doc = await (await app.platform('/docs/openapi.json')).json();
  const pattern: string = doc.paths['/api/v1/agents'].post.requestBody.content['application/json'].schema.properties.language.pattern;
  t.ok(new RegExp(pattern).test('EN-us') && new RegExp(pattern).test('zh-Hant-TW'), `the OpenAPI pattern accepts what the server accepts (${pattern})`);
});

t.test('other fields', async (t) => {
  const bad = await create({ name: 'Bad', gender: 'robot', language: 'English', avatar_url: 'ftp://x', extra: 1 });
  t.equal(bad.res.status, 400);
  const locations = (bad.body.errors as Array<{ location: string }>).map((e) => e.location).sort();
  t.strictSame([...new Set(locations)], ['body', 'body.avatar_url', 'body.gender', 'body.language'], 'every problem is listed');
  t.equal((await create({ name: 'Lots', speech_patterns: Array(101).fill('x') })).res.status, 400, 'at most 100 phrases');
  t.equal((await create({ name: 'Enough', speech_patterns: Array(100).fill('x') })).res.status, 200);
  for (const url of ['http://', 'https://', 'https:///path', 'https://?q', 'https://user@cdn.example/a.png']) {
    const res = await create({ name: `No host ${url.length}${url.at(-1)}`, avatar_url: url });
    t.equal(res.res.status, 400, `avatar_url ${url}: no host (or credentials in it)`);
  }
  for (const url of ['http://cdn.example', 'HTTPS://cdn.example/a.png', 'https://cdn.example:8443/a.png?v=2#x']) {
    t.equal((await create({ name: `Host ${url.length}`, avatar_url: url })).res.status, 200, `avatar_url ${url}`);
  }
});

t.test('optional fields at their edges: exactly the limit passes, one past it is a 400 naming the field', async (t) => {
  const url = (length: number) => `https://cdn.example/${'a'.repeat(length - 'https://cdn.example/'.length)}`;
  const phrases = (count: number, length = 1) => Array<string>(count).fill('p'.repeat(length));
  const edges: Array<[string, unknown, unknown, string]> = [
    ['personality_prompt', 'p'.repeat(16_000), 'p'.repeat(16_001), 'body.personality_prompt'],
    ['bio', 'b'.repeat(8_000), 'b'.repeat(8_001), 'body.bio'],
    ['avatar_url', url(2_048), url(2_049), 'body.avatar_url'],
    ['speech_patterns', phrases(1, 500), phrases(1, 501), 'body.speech_patterns.0'],
    ['speech_patterns', phrases(1, 1), [''], 'body.speech_patterns.0'],
    ['true_interests', phrases(100), phrases(101), 'body.true_interests'],
    ['true_interests', phrases(1, 500), phrases(1, 501), 'body.true_interests.0'],
    ['true_dislikes', phrases(100), phrases(101), 'body.true_dislikes'],
    ['true_dislikes', phrases(1, 500), phrases(1, 501), 'body.true_dislikes.0'],
  ];
  for (const [i, [field, atLimit, past, location]] of edges.entries()) {
    const ok = await create({ name: `Edge ${i}`, [field]: atLimit });
    t.equal(ok.res.status, 200, `${field}: at the limit`);
    t.strictSame(ok.body[field], atLimit, `${field}: stored as sent`);
    const refused = await create({ name: `Past ${i}`, [field]: past });
    t.equal(refused.res.status, 400, `${field}: one past it`);
    t.match(refused.body, { type: 'https://cairn.dev/problems/validation', errors: [{ location }] }, `${field}: a validation problem naming ${location}`);
  }
  for (const gender of ['male', 'female', 'non_binary']) t.equal((await create({ name: `Gender ${gender}`, gender })).body.gender, gender, `gender ${gender}`);
  const other = await create({ name: 'Gender other', gender: 'nonbinary' });
  t.equal(other.res.status, 400, 'a gender not among the three');
  t.match(other.body, { type: 'https://cairn.dev/problems/validation', errors: [{ location: 'body.gender' }] });
  const doc = await (await app.platform('/docs/openapi.json')).json();
  const view = doc.paths['/api/v1/agents/{agentId}'].get.responses['200'].content['application/json'].schema;
  const genders = { anyOf: [{ type: 'string', enum: ['male', 'female', 'non_binary'] }, { type: 'null' }] };
  t.strictSame([view.properties.gender, view.properties.profile.properties.gender], [genders, genders], 'the OpenAPI document gives the agent\'s gender as the three values or null, not any string');
});

t.test('every text of the profile must be well-formed Unicode: a lone surrogate is a 400 naming the field and where it is', async (t) => {
  // JSON can carry "\ud800" escaped; a UTF-8 store (MongoDB) or reader keeps U+FFFD instead, so the agent read back
  // would not be the one created. The memory service refuses them in every text; names were refused already.
  const refused: Array<[Record<string, unknown>, string, string]> = [
    [{ bio: 'A curious mind \ud800' }, 'body.bio', 'U+D800 at UTF-16 offset 15'],
    [{ personality_prompt: '\udfff You are Ava.' }, 'body.personality_prompt', 'U+DFFF at UTF-16 offset 0'],
    [{ speech_patterns: ['indeed', 'well \ud83d'] }, 'body.speech_patterns.1', 'U+D83D at UTF-16 offset 5'],
    [{ true_interests: ['\ude00'] }, 'body.true_interests.0', 'U+DE00 at UTF-16 offset 0'],
    [{ true_dislikes: ['a', 'b', 'c\ud800d'] }, 'body.true_dislikes.2', 'U+D800 at UTF-16 offset 1'],
  ];
  for (const [over, location, value] of refused) {
    const res = await create({ name: `Unpaired ${location}`, ...over });
    t.equal(res.res.status, 400, location);
    t.match(res.body, { type: 'https://cairn.dev/problems/validation', errors: [{ location, message: /well-formed Unicode/, value }] }, `${location}: named, with where it is`);
    t.equal(res.res.headers.get('content-type'), 'application/problem+json');
  }
  const everyFieldOnce = await create({ name: 'Unpaired all', bio: '\ud800', personality_prompt: '\ud800', speech_patterns: ['\ud800'], true_interests: ['\ud800'], true_dislikes: ['\ud800'] });
  t.strictSame((everyFieldOnce.body.errors as Array<{ location: string }>).map((e) => e.location),
    ['body.bio', 'body.personality_prompt', 'body.speech_patterns.0', 'body.true_interests.0', 'body.true_dislikes.0'], 'every such field is listed');
  const nothing = await app.events.readAll(0, { limit: 100_000, filter: { types: ['AgentCreated', 'AgentNameReserved'] } });
  t.notOk(nothing.some((e) => String(e.data.name).startsWith('Unpaired ')), 'nothing was written for them');
  // Surrogate pairs are astral characters, well-formed: kept as sent and read back so.
  const paired = { bio: 'Stargazer 🌙', personality_prompt: 'You are 𝒜va.', speech_patterns: ['🎻'], true_interests: ['𝄞 music'], true_dislikes: ['😠'] };
  const ok = await create({ name: 'Paired', ...paired });
  t.equal(ok.res.status, 200);
  t.match(ok.body, paired);
  const got = await app.platform(`/agents/${ok.body.agent_id}`, { headers: { ...bearer(a.key), 'X-Min-Position': ok.position! } });
  t.match(await got.json(), paired, 'and read back as sent');
});

t.test('GET /agents/{agentId}: an id with whitespace around it (a line read with its newline) is still an id, as a name is still a name', async (t) => {
  const { body, position } = await create({ name: 'Padded lookups' });
  t.equal(body.name, 'Padded lookups');
  const headers = { ...bearer(a.key), 'X-Min-Position': position! };
  for (const around of [[' ', ''], ['', '\n'], ['\t', '\r\n'], ['\u00a0', ' ']]) {
    for (const key of [body.agent_id, body.agent_id.toUpperCase(), 'Padded lookups']) {
      const res = await app.platform(`/agents/${encodeURIComponent(`${around[0]}${key}${around[1]}`)}`, { headers });
      t.equal(res.status, 200, `${JSON.stringify(around[0] + key.slice(0, 8) + '…' + around[1])}`);
      t.equal(((await res.json()) as { agent_id: string }).agent_id, body.agent_id);
    }
  }
  const atLimit = await app.platform(`/agents/${'n'.repeat(512)}`, { headers });
  t.equal(atLimit.status, 404, 'agentId of 512 characters (the longest a 128-character name can be sent as): looked up, not found');
  const pastLimit = await app.platform(`/agents/${'n'.repeat(513)}`, { headers });
  t.equal(pastLimit.status, 400, 'one past it: refused');
  t.match(await pastLimit.json(), { type: 'https://cairn.dev/problems/validation', errors: [{ location: 'path.agentId', value: '513 characters' }] });
  const other = await create({ name: 'Padded other' }, b.key);
  const foreign = await app.platform(`/agents/${encodeURIComponent(` ${other.body.agent_id}\n`)}`, { headers: { ...headers, 'X-Min-Position': other.position! } });
  t.equal(foreign.status, 404, 'another project\'s agent is still not found, however its id is padded');
});

t.test('Idempotency-Key', async (t) => {
  const headers = { 'Idempotency-Key': 'agent-create-000001' };
  const first = await create({ name: 'Once' }, a.key, headers);
  const again = await create({ name: 'Once' }, a.key, headers);
  t.equal(again.res.status, 200);
  t.equal(again.body.agent_id, first.body.agent_id);
  t.equal((await app.events.readStream(agentStream(first.body.agent_id))).length, 1, 'one event only');
  const different = await create({ name: 'Twice' }, a.key, headers);
  t.equal(different.res.status, 422);
  await create({ name: 'Taken' });
  const differentTaken = await create({ name: 'Taken' }, a.key, headers);
  t.equal(differentTaken.res.status, 422, 'a different request with the key, whose name another agent holds: still 422, not 409');
  t.equal(differentTaken.res.headers.get('content-type'), 'application/problem+json');
});

t.test('the name reservation and the agent commit together; of concurrent creations of one name exactly one wins', async (t) => {
  const attempts = await Promise.all(Array.from({ length: 8 }, () => create({ name: 'Racer' })));
  t.strictSame(attempts.map((r) => r.res.status).sort(), [200, 409, 409, 409, 409, 409, 409, 409]);
  const winner = attempts.find((r) => r.res.status === 200)!;
  const [reserved] = await app.events.readStream(agentNameStream(a.projectId, nameKey('Racer')));
  const [created, ...more] = await app.events.readStream(agentStream(winner.body.agent_id));
  t.strictSame(more, []);
  t.equal(reserved!.data.agent_id, winner.body.agent_id);
  t.equal(created!.position, reserved!.position + 1, 'adjacent in the log');
  t.equal(created!.recorded_at, reserved!.recorded_at, 'one commit');
  t.equal(winner.position, String(created!.position), 'X-Event-Position is the agent\'s event');
  const everyCreation = await app.events.readAll(0, { limit: 100_000, filter: { types: ['AgentCreated'] } });
  t.equal(everyCreation.filter((e) => e.data.name === 'Racer').length, 1, 'the losers created nothing');
});

t.test('a name held by a reservation whose agent never got created is taken over once the reservation is abandoned', async (t) => {
  let offset = 0;
  const other = await startTestCairn({}, { clock: () => new Date(Date.now() + offset) });
  t.teardown(() => other.stop());
  const p = await projectWithKey(other);
  // What a creation interrupted between its two appends leaves on a store without multi-stream
  // transactions (EventStoreDB): a reservation and no agent.
  const orphan = randomUUID();
  await other.events.append(agentNameStream(p.projectId, nameKey('Nova')), [{
    id: randomUUID(), type: 'AgentNameReserved',
    data: { project_id: p.projectId, name: 'Nova', agent_id: orphan, reserved_at: new Date().toISOString() },
    metadata: { correlation_id: randomUUID(), causation_id: randomUUID(), actor: 'test', occurred_at: new Date().toISOString() },
  }], 'no_stream');
  const post = () => other.platform('/agents', { method: 'POST', headers: bearer(p.key), json: { name: 'Nova' } });
  t.equal((await post()).status, 409, 'a fresh reservation holds the name');
  offset = 59_000;
  t.equal((await post()).status, 409, 'and so does one just under a minute old');
  offset = 61_000;
  const taken = await post();
  t.equal(taken.status, 200, 'an abandoned one (over a minute old, no agent) does not');
  const agent = (await taken.json()) as { agent_id: string; name: string };
  t.not(agent.agent_id, orphan);
  const reservations = await other.events.readStream(agentNameStream(p.projectId, nameKey('Nova')));
  t.strictSame(reservations.map((e) => e.data.agent_id), [orphan, agent.agent_id]);
  t.equal((await post()).status, 409, 'and now the name is in use');
});

t.test('projects are isolated', async (t) => {
  const { body: mine, position } = await create({ name: 'Private' });
  const asB = { ...bearer(b.key), 'X-Min-Position': position! };
  t.equal((await app.platform(`/agents/${mine.agent_id}`, { headers: asB })).status, 404, 'by id');
  t.equal((await app.platform(`/agents/Private`, { headers: asB })).status, 404, 'by name');
  t.equal((await app.platform(`/agents?project_id=${a.projectId}`, { headers: asB })).status, 404, 'list of another project');
  t.equal((await create({ name: 'Intruder', project_id: a.projectId }, b.key)).res.status, 404, 'create in another project');
  // B lists its own agent, and only its own: an empty list would pass an `every` check without showing anything.
  const theirs = await create({ name: 'Their own' }, b.key);
  t.equal(theirs.res.status, 200);
  const listB = (await (await app.platform('/agents', { headers: { ...bearer(b.key), 'X-Min-Position': theirs.position! } })).json()) as Array<{ name: string; project_id: string }>;
  t.ok(listB.some((x) => x.name === 'Their own'), 'B lists its own agent');
  t.notOk(listB.some((x) => x.name === 'Private'), 'and not A\'s');
  t.ok(listB.every((x) => x.project_id === b.projectId), 'every agent B lists is of its project');
  const listA = (await (await app.platform(`/agents?project_id=${a.projectId}`, { headers: { ...bearer(a.key), 'X-Min-Position': position! } })).json()) as Array<{ name: string; created_at: string }>;
  t.ok(listA.some((x) => x.name === 'Private'), 'A lists its own agent');
  t.notOk(listA.some((x) => x.name === 'Their own'), 'and not B\'s');
  t.strictSame(listA.map((x) => x.created_at), [...listA.map((x) => x.created_at)].sort(), 'oldest first');
  t.equal((await app.platform('/agents?offset=5', { headers: bearer(a.key) })).status, 400, 'unknown query parameters are rejected');
});

t.test('two projects of one tenant may each have an agent of the same name: a key finds its own, and never the other by id', async (t) => {
  const one = await projectWithKey(app, 'tenant-siblings');
  const two = await projectWithKey(app, 'tenant-siblings');
  const first = await create({ name: 'Twin' }, one.key);
  const second = await create({ name: 'Twin' }, two.key);
  t.equal(second.res.status, 200, 'names are unique per project, not per tenant');
  const get = async (key: string, idOrName: string) => {
    const res = await app.platform(`/agents/${idOrName}`, { headers: { ...bearer(key), 'X-Min-Position': second.position! } });
    return { status: res.status, body: (await res.json()) as { agent_id?: string } };
  };
  t.equal((await get(one.key, 'Twin')).body.agent_id, first.body.agent_id, 'by name: the own project\'s agent');
  t.equal((await get(two.key, 'Twin')).body.agent_id, second.body.agent_id);
  t.equal((await get(one.key, second.body.agent_id)).status, 404, 'by id: the sibling project\'s agent is not found');
  t.equal((await get(two.key, first.body.agent_id)).status, 404);
  t.equal((await app.platform(`/agents?project_id=${two.projectId}`, { headers: bearer(one.key) })).status, 404, 'nor its list');
  t.equal((await create({ name: 'Intruder', project_id: two.projectId }, one.key)).res.status, 404, 'nor can it create there');
});

t.test('GET /agents pages with limit and cursor (X-Next-Cursor), and without them returns every agent as before', async (t) => {
  const p = await projectWithKey(app, 'tenant-paging');
  const headers = bearer(p.key);
  let position = '0';
  const names: string[] = [];
  for (let i = 0; i < 5; i += 1) {
    const res = await create({ name: `Pager ${i}` }, p.key);
    t.equal(res.res.status, 200);
    names.push(res.body.name);
    position = res.position!;
  }
  const list = async (query: string) => {
    const res = await app.platform(`/agents${query}`, { headers: { ...headers, 'X-Min-Position': position } });
    return { status: res.status, next: res.headers.get('x-next-cursor'), body: (await res.json()) as any };
  };
  const all = await list('');
  t.strictSame(all.body.map((x: { name: string }) => x.name), names, 'no limit: every agent, oldest first, a bare array');
  t.equal(all.next, null);

  const atLimit = await list('?limit=5');
  t.strictSame(atLimit.body.map((x: { name: string }) => x.name), names, 'limit exactly the number of agents: all of them');
  t.equal(atLimit.next, null, 'and no next page');
  const pastLimit = await list('?limit=4');
  t.strictSame(pastLimit.body.map((x: { name: string }) => x.name), names.slice(0, 4), 'one fewer');
  t.ok(pastLimit.next, 'then a cursor');
  const last = await list(`?limit=4&cursor=${encodeURIComponent(pastLimit.next!)}`);
  t.strictSame(last.body.map((x: { name: string }) => x.name), names.slice(4), 'the next page has the rest');
  t.equal(last.next, null);

  const walked: string[] = [];
  for (let query = '?limit=2'; ;) {
    const page = await list(query);
    walked.push(...page.body.map((x: { name: string }) => x.name));
    if (!page.next) break;
    query = `?limit=2&cursor=${encodeURIComponent(page.next)}`;
  }
  t.strictSame(walked, names, 'pages of 2 walk the whole list once');

  t.equal((await list('?limit=500')).status, 200, 'limit 500');
  const one = await list('?limit=1');
  t.strictSame(one.body.map((x: { name: string }) => x.name), names.slice(0, 1), 'limit 1: one agent');
  t.ok(one.next, 'and a cursor');
  for (const query of ['?limit=501', '?limit=0', '?limit=1.5', '?limit=x']) {
    const res = await list(query);
    t.equal(res.status, 400, query);
    t.match(res.body, { errors: [{ location: 'query.limit' }] });
  }
  for (const query of ['?limit=2&cursor=not-a-cursor', `?cursor=${encodeURIComponent(pastLimit.next!)}`]) {
    const res = await list(query);
    t.equal(res.status, 400, query);
    t.match(res.body, { errors: [{ location: 'query.cursor' }] });
  }
  const other = await app.platform(`/agents?limit=5&cursor=${encodeURIComponent(pastLimit.next!)}`, { headers: { ...bearer(a.key), 'X-Min-Position': position } });
  t.ok(((await other.json()) as Array<{ project_id: string }>).every((x) => x.project_id === a.projectId), 'a cursor never reaches into another project');

  const doc = await (await app.platform('/docs/openapi.json')).json();
  const op = doc.paths['/api/v1/agents'].get;
  t.match(op.parameters.find((x: { name: string }) => x.name === 'limit'), { in: 'query', schema: { minimum: 1, maximum: 500 } });
  t.ok(op.parameters.find((x: { name: string }) => x.name === 'cursor'));
  t.ok(op.responses['200'].headers['X-Next-Cursor'], 'X-Next-Cursor is documented');
});

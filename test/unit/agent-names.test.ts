import t from 'tap';
import { agentDecider, agentNameDecider, NEUTRAL_BIG5 } from '../../domain/agents/decider.js';
import { canonicalLanguage } from '../../domain/agents/language.js';
import { MAX_AGENT_NAME } from '../../domain/agents/names.js';
import { nameProblems } from '../../domain/shared/text.js';
import { invisibleCharacter, VIRAMAS } from '../../domain/shared/text.js';
import { deciderSpec } from '../support/decider-spec.js';

const hex = (c: number) => `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;

t.test('the virama list is what this Node\'s Unicode data says (canonical combining class 9)', async (t) => {
  // Canonical ordering tells a mark's class: it moves after U+3099 (class 8) and before U+05B0 (class 10) only at class 9.
  const derived: string[] = [];
  for (let c = 0; c < 0x110000; c += 1) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const m = String.fromCodePoint(c);
    if (!/\p{M}/u.test(m) || m.normalize('NFD') !== m || m === '\u3099' || m === '\u05B0') continue;
    if (`a${m}\u3099`.normalize('NFD') === `a\u3099${m}` && `a\u05B0${m}`.normalize('NFD') === `a${m}\u05B0`) derived.push(m);
  }
  t.same([...VIRAMAS].map((c) => hex(c.codePointAt(0)!)), derived.map((c) => hex(c.codePointAt(0)!)), 'regenerate VIRAMAS in domain/shared/text.ts if this fails');
});

t.test('refused code points, each class at its edges, with the code point and where it is', async (t) => {
  const refused: Array<[string, number, RegExp]> = [
    ['C0 first', 0x0000, /control/], ['C0 last (unit separator)', 0x001f, /control/], ['tab', 0x0009, /control/], ['line feed', 0x000a, /control/],
    ['DEL', 0x007f, /control/], ['C1 first', 0x0080, /control/], ['C1 NEL', 0x0085, /control/], ['C1 last', 0x009f, /control/],
    ['LRE', 0x202a, /bidirectional/], ['RLO', 0x202e, /bidirectional/], ['LRI', 0x2066, /bidirectional/], ['PDI', 0x2069, /bidirectional/],
    ['LRM', 0x200e, /bidirectional/], ['RLM', 0x200f, /bidirectional/], ['ALM', 0x061c, /bidirectional/],
    ['ZWSP', 0x200b, /invisible/], ['ZWNJ between Latin letters', 0x200c, /non-joiner/], ['ZWJ between Latin letters', 0x200d, /zero-width joiner/],
    ['word joiner', 0x2060, /invisible/], ['invisible times', 0x2062, /invisible/], ['unassigned default-ignorable', 0x2065, /invisible/],
    ['deprecated format (inhibit symmetric swapping)', 0x206a, /invisible/], ['nominal digit shapes', 0x206f, /invisible/],
    ['BOM inside', 0xfeff, /invisible/], ['soft hyphen', 0x00ad, /invisible/], ['combining grapheme joiner', 0x034f, /invisible/],
    ['Hangul choseong filler', 0x115f, /invisible/], ['Hangul jungseong filler', 0x1160, /invisible/], ['Hangul filler', 0x3164, /invisible/],
    ['halfwidth Hangul filler', 0xffa0, /invisible/], ['Khmer inherent vowel', 0x17b4, /invisible/], ['shorthand format overlap', 0x1bca0, /invisible/],
    ['musical symbol begin beam', 0x1d173, /invisible/], ['language tag', 0xe0001, /invisible/], ['last default-ignorable', 0xe0fff, /invisible/],
    ['variation selector on a Latin letter', 0xfe0f, /variation selector/], ['VS1 on a Latin letter', 0xfe00, /variation selector/],
    ['ideographic VS on a Latin letter', 0xe0100, /variation selector/], ['Mongolian FVS on a Latin letter', 0x180b, /variation selector/],
    ['tag outside a flag', 0xe0067, /tag/], ['cancel tag alone', 0xe007f, /tag/],
    ['line separator', 0x2028, /separator/], ['paragraph separator', 0x2029, /separator/],
    ['noncharacter U+FDD0', 0xfdd0, /noncharacter/], ['noncharacter U+FDEF', 0xfdef, /noncharacter/], ['noncharacter U+FFFE', 0xfffe, /noncharacter/],
    ['noncharacter U+10FFFF', 0x10ffff, /noncharacter/],
  ];
  for (const [what, code, message] of refused) {
    const name = `Av${String.fromCodePoint(code)}a`;
    t.match(invisibleCharacter(name), { message, value: `${hex(code)} at UTF-16 offset 2` }, `${what} (${hex(code)})`);
  }
});

t.test('accepted: the neighbours of each refused range, and joiners, selectors and tags where they shape something', async (t) => {
  const neighbours = [0x0020, 0x007e, 0x00a0, 0x00ac, 0x00ae, 0x061b, 0x061d, 0x200a, 0x2010, 0x2027, 0x202f, 0x205f, 0xfdcf, 0xfdf0, 0xfefc, 0xfffd, 0x1bca4];
  for (const code of neighbours) t.equal(invisibleCharacter(`Av${String.fromCodePoint(code)}a`), undefined, hex(code));
  const shaped: Array<[string, string]> = [
    ['Devanagari conjunct with ZWJ after the virama', 'क्\u200Dष'],
    ['Devanagari half form with ZWNJ after the virama', 'क्\u200Cष'],
    ['Persian word with ZWNJ between letters', 'می\u200Cخواهم'],
    ['Persian, with a harakat before the ZWNJ', 'مِ\u200Cی'],
    ['emoji ZWJ sequence', '👩\u200D💻'],
    ['with a skin tone', '👩🏽\u200D💻'],
    ['with a presentation selector', '🏳\uFE0F\u200D🌈'],
    ['emoji presentation', '❤\uFE0F Ava'],
    ['text presentation', 'Ava \u263A\uFE0E'],
    ['keycap', '1\uFE0F\u20E3'],
    ['ideographic variation sequence', '葛\u{E0100}西'],
    ['Mongolian free variation selector', 'ᠠ\u180Bᠡ'],
    ['subdivision flag', 'Ava 🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}'],
    ['right-to-left text without controls', 'אבא'],
  ];
  for (const [what, name] of shaped) t.equal(invisibleCharacter(name), undefined, what);
  const misplaced: Array<[string, string]> = [
    ['ZWJ at the end of an emoji', '👩\u200D'],
    ['ZWJ before a letter', '👩\u200Da'],
    ['ZWNJ at the end of a Persian word', 'می\u200C'],
    ['ZWNJ between Persian and Latin', 'م\u200Ca'],
    ['a second variation selector', '❤\uFE0F\uFE0F'],
    ['tags without their cancel tag', '🏴\u{E0067}\u{E0062}'],
    ['tags after another emoji', '👩\u{E0067}\u{E007F}'],
  ];
  for (const [what, name] of misplaced) t.not(invisibleCharacter(name), undefined, what);
});

t.test('nameProblems of an agent name: the stored form, blank, the limit at its edge, unpaired surrogates, invisible characters', async (t) => {
  t.same(nameProblems('Ava', MAX_AGENT_NAME), []);
  t.same(nameProblems('n'.repeat(MAX_AGENT_NAME), MAX_AGENT_NAME), [], 'exactly at the limit');
  t.match(nameProblems('n'.repeat(MAX_AGENT_NAME + 1), MAX_AGENT_NAME), [{ message: /128/ }], 'one past it');
  t.same(nameProblems('🌙'.repeat(MAX_AGENT_NAME), MAX_AGENT_NAME), [], 'characters, not UTF-16 units');
  t.match(nameProblems('', MAX_AGENT_NAME), [{ message: /empty/ }]);
  t.match(nameProblems(' Ava', MAX_AGENT_NAME), [{ message: /trimmed/ }]);
  t.match(nameProblems('e\u0301', MAX_AGENT_NAME), [{ message: /NFC/ }]);
  t.match(nameProblems('Lone \ud800', MAX_AGENT_NAME), [{ message: /well-formed/, value: 'U+D800 at UTF-16 offset 5' }]);
  t.match(nameProblems('A\u200Bva', MAX_AGENT_NAME), [{ message: /invisible/, value: 'U+200B at UTF-16 offset 1' }]);
});

t.test('the deciders refuse such names and non-canonical languages, whoever sends them', async (t) => {
  const profile = {
    agent_id: 'a1', project_id: 'p1', name: 'Ava', bio: null, gender: null, avatar_url: null, big5: NEUTRAL_BIG5, language: 'en-US',
    personality_prompt: null, speech_patterns: [], true_interests: [], true_dislikes: [],
  };
  const agents = deciderSpec(t, agentDecider).given([]);
  for (const name of ['A\u202Eva', 'A\u200Bva', 'Ava\u0000', ' Ava', '', 'n'.repeat(129), 'Lone \ud800']) {
    agents.when({ type: 'CreateAgent', data: { ...profile, name } }).thenThrows('invalid');
    deciderSpec(t, agentNameDecider).given([]).when({ type: 'ReserveAgentName', data: { project_id: 'p1', name, agent_id: 'a1', abandoned_holder: null } }).thenThrows('invalid');
  }
  for (const language of ['en-us', 'EN', 'English', 'en--US', 'iw']) agents.when({ type: 'CreateAgent', data: { ...profile, language } }).thenThrows('invalid');
  t.equal(agentDecider.decide({ type: 'CreateAgent', data: profile }, agentDecider.initialState(), { now: 'n', actor: 'a', request_key: 'r', request_hash: 'h' }).length, 1);
});

t.test('canonicalLanguage: any case in, the canonical form out; invalid tags refused', async (t) => {
  const canonical: Array<[string, string]> = [
    ['en', 'en'], ['EN', 'en'], ['en-us', 'en-US'], ['EN-US', 'en-US'], ['zh-hant-tw', 'zh-Hant-TW'], ['ZH-HANT-TW', 'zh-Hant-TW'],
    ['sr-latn-rs', 'sr-Latn-RS'], ['es-419', 'es-419'], ['de-DE-1901', 'de-DE-1901'], ['iw', 'he'], ['cmn-hans-cn', 'zh-Hans-CN'],
    ['en-GB-u-ca-gregory', 'en-GB-u-ca-gregory'], ['en-US-x-twain', 'en-US-x-twain'], ['sv-SE', 'sv-SE'],
  ];
  for (const [tag, expected] of canonical) t.equal(canonicalLanguage(tag), expected, tag);
  for (const tag of ['English', 'e', 'abcd', 'en_US', 'en-', 'en--US', 'en-a', 'en-US-US', 'i-klingon', 'x-foo', 'toolongsubtag', 'en-Latn-US-fonipa-fonipa', '']) {
    t.equal(canonicalLanguage(tag), undefined, JSON.stringify(tag));
  }
  const at35 = `en-${'a'.repeat(8)}-${'b'.repeat(8)}-${'c'.repeat(8)}-${'d'.repeat(5)}`;
  t.equal(at35.length, 35);
  t.equal(canonicalLanguage(at35), at35, '35 characters');
  t.equal(canonicalLanguage(`${at35}e`), undefined, '36 characters');
});

t.test('the agent decider refuses a profile text with an unpaired surrogate (UTF-8 stores keep U+FFFD instead), and keeps surrogate pairs', async (t) => {
  const profile = {
    agent_id: 'a1', project_id: 'p1', name: 'Ava', bio: null, gender: null, avatar_url: null, big5: NEUTRAL_BIG5, language: 'en',
    personality_prompt: null, speech_patterns: [], true_interests: [], true_dislikes: [],
  };
  const context = { now: 'n', actor: 'a', request_key: 'r', request_hash: 'h' };
  const decide = (over: Record<string, unknown>) => () => agentDecider.decide({ type: 'CreateAgent', data: { ...profile, ...over } }, agentDecider.initialState(), context);
  const refused: Array<[Record<string, unknown>, RegExp]> = [
    [{ bio: 'a\ud800b' }, /^agent bio must be well-formed Unicode .*\(U\+D800 at UTF-16 offset 1\)$/],
    [{ personality_prompt: '\udc00' }, /^agent personality_prompt must be well-formed Unicode .*\(U\+DC00 at UTF-16 offset 0\)$/],
    [{ speech_patterns: ['fine', 'end \ud83d'] }, /^agent speech_patterns\[1\] must be well-formed/],
    [{ true_interests: ['\ude00 start'] }, /^agent true_interests\[0\] must be well-formed/],
    [{ true_dislikes: ['x', 'y', 'z\ud800'] }, /^agent true_dislikes\[2\] must be well-formed/],
  ];
  for (const [over, message] of refused) t.throws(decide(over), { name: 'DomainError', kind: 'invalid', message } as never, Object.keys(over)[0]);
  const paired = { bio: 'a 🌙 b', personality_prompt: '🌙', speech_patterns: ['🌙'], true_interests: ['𝄞'], true_dislikes: ['\u{1F600}'] };
  t.equal(decide(paired)().length, 1, 'surrogate pairs (astral characters) are well-formed');
});

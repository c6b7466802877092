import t from 'tap';
import { parseFacts, UnparseableFactsError } from '../../api/memory/facts.js';
import { LocalHashEmbedder, LOCAL_EMBEDDING_DIM } from '../../infra/providers/embeddings.js';
import { reciprocalRankFusion } from '../../infra/search/fusion.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { indexTerms, tokenize } from '../../infra/search/tokenize.js';
import { topK } from '../../infra/search/topk.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';

t.test('tokenizer: Unicode words, case, compatibility forms', async (t) => {
  t.same(tokenize('Hello, WORLD! Straße—ÉCOLE 42x'), ['hello', 'world', 'strasse', 'école', '42x']);
  t.same(tokenize('STRASSE'), tokenize('Straße'), 'ß folds to ss, as STRASSE does');
  t.same(tokenize('İstanbul'), tokenize('istanbul'), 'the dotted capital I folds to i');
  t.same(tokenize('ISTANBUL'), ['istanbul']);
  t.same(tokenize('ΟΔΟΣ'), tokenize('οδος'), 'final sigma and capital sigma fold together');
  t.same(tokenize('ＦＵＬＬ width'), ['full', 'width'], 'NFKC folds full-width letters');
  t.same(tokenize('cafe\u0301'), ['café'], 'combining marks stay inside the word');
  t.same(tokenize('Привет мир'), ['привет', 'мир']);
  t.same(tokenize('हिन्दी भाषा'), ['हिन्दी', 'भाषा'], 'Devanagari vowel signs do not split words');
  t.same(tokenize('東京に行く'), ['東京', '京に', 'に行', '行く'], 'unspaced scripts become bigrams');
  t.same(tokenize('고양이가 귀엽다'), ['고양', '양이', '이가', '귀엽', '엽다'], 'Hangul becomes bigrams within each spaced word');
  t.same(tokenize('집'), ['집'], 'a one-syllable Korean word stays one token');
  t.same(tokenize('ฉันรักแมว 3 ตัว'), ['ฉัน', 'รัก', 'แมว', '3', 'ตัว'], 'Thai is cut into dictionary words');
  t.same(tokenize('ຂ້ອຍຮັກແມວ'), ['ຂ້ອຍ', 'ຮັກ', 'ແມວ'], 'Lao');
  t.same(tokenize('ខ្ញុំស្រឡាញ់ឆ្មា'), ['ខ្ញុំ', 'ស្រឡាញ់', 'ឆ្មា'], 'Khmer');
  t.same(tokenize('ကြောင်ကိုချစ်တယ်'), ['ကြောင်', 'ကို', 'ချစ်', 'တယ်'], 'Myanmar');
  t.same(tokenize('Bangkok กรุงเทพ'), ['bangkok', 'กรุงเทพ'], 'a Latin word next to a Thai one is untouched');
  t.same(tokenize('...  !!'), []);
});

t.test('tokenizer: invisible default-ignorable characters do not split or change a word (as NFKC_Casefold)', async (t) => {
  t.same(tokenize('co\u00adoperate'), ['cooperate'], 'soft hyphen, as text copied from web pages and PDFs has');
  t.same(tokenize('Straße\u2060Nord'), ['strassenord'], 'word joiner');
  t.same(tokenize('\ufefftea'), ['tea'], 'byte order mark');
  t.same(tokenize('tea\ufe0f time'), ['tea', 'time'], 'a variation selector is not part of the word');
  t.same(tokenize('葛\u{e0100}城に行く'), tokenize('葛城に行く'), 'an ideographic variation selector does not break the bigrams');
  t.same(tokenize('\u0930\u094d\u200d\u092f'), tokenize('\u0930\u094d\u092f'), 'zero-width joiner inside a Devanagari word');
  t.same(tokenize('\u200f\u05e9\u05dc\u05d5\u05dd\u200e'), ['\u05e9\u05dc\u05d5\u05dd'], 'bidirectional marks');
  t.same(tokenize('one\u200btwo'), ['one', 'two'], 'a zero-width space still separates words');
  t.same(tokenize('\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645'), ['\u0645\u06cc', '\u062e\u0648\u0627\u0647\u0645'], 'so does a zero-width non-joiner (Persian writes it or a space)');
  const index = new Bm25Index();
  index.upsert('s', 'soft', 'We co\u00adoperate with the neighbours');
  index.upsert('s', 'other', 'We argue with the neighbours');
  t.same(index.search('s', 'cooperate', 10).map((h) => h.id), ['soft'], 'found by the word as typed');
});

t.test('tokenizer: an emoji is a word of its own, as in Lucene\'s standard tokenizer', async (t) => {
  t.same(tokenize('I \u2764\ufe0f sushi \u{1f363}\u{1f363}'), ['i', '\u2764', 'sushi', '\u{1f363}', '\u{1f363}'], 'presentation selector left out; each emoji counts');
  t.same(tokenize('\u{1f44d}\u{1f3fd}'), ['\u{1f44d}'], 'without its skin tone: "👍🏽" finds "👍"');
  t.same(tokenize('\u{1f468}\u200d\u{1f469}\u200d\u{1f467}'), ['\u{1f468}', '\u{1f469}', '\u{1f467}'], 'a joined sequence: each emoji in it');
  t.same(tokenize('Japan \u{1f1ef}\u{1f1f5}\u{1f1eb}\u{1f1f7}'), ['japan', '\u{1f1ef}\u{1f1f5}', '\u{1f1eb}\u{1f1f7}'], 'a flag is its two regional indicators');
  t.same(tokenize('... !! #1 \u2122'), ['1', 'tm'], 'punctuation is still no word; ™ is letters (NFKC)');
  const index = new Bm25Index();
  index.upsert('s', 'trip', 'The trip to Japan \u{1f1ef}\u{1f1f5} was great \u{1f363}');
  index.upsert('s', 'party', 'Birthday party \u{1f389}\u{1f389}');
  index.upsert('s', 'plain', 'The trip was long');
  t.same(index.search('s', '\u{1f389}', 10).map((h) => h.id), ['party']);
  t.same(index.search('s', '\u{1f363} \u{1f1ef}\u{1f1f5}', 10).map((h) => h.id), ['trip']);
});

t.test('topK: best first, ties by id, bounded', async (t) => {
  const scores = [0.5, 0.9, 0.1, 0.9, 0.7];
  const ids = ['e', 'd', 'c', 'b', 'a'];
  t.same(topK(5, 3, (i) => scores[i]!, (i) => ids[i]!), [{ id: 'b', score: 0.9 }, { id: 'd', score: 0.9 }, { id: 'a', score: 0.7 }]);
  t.same(topK(5, 10, (i) => scores[i]!, (i) => ids[i]!).map((h) => h.id), ['b', 'd', 'a', 'e', 'c']);
  t.same(topK(0, 3, () => 0, () => ''), []);
});

t.test('BM25', async (t) => {
  const index = new Bm25Index();
  index.upsert('s', 'tea', 'I drink green tea every morning');
  index.upsert('s', 'coffee', 'Coffee in the morning, tea in the evening, tea at night');
  index.upsert('s', 'dog', 'My dog Rex likes the park');
  index.upsert('other', 'x', 'tea tea tea');

  t.test('ranks by BM25 with the standard formula', async (t) => {
    const hits = index.search('s', 'tea', 10);
    t.same(hits.map((h) => h.id), ['coffee', 'tea'], 'higher tf wins here; the dog does not match');
    // Hand-computed: N = 3, df = 2, idf = ln(1 + 1.5/2.5); doc "tea" has 6 tokens, avgdl = (6 + 11 + 6) / 3.
    const idf = Math.log(1 + (3 - 2 + 0.5) / (2 + 0.5));
    const avg = 23 / 3;
    const expected = (idf * 1 * 2.2) / (1 + 1.2 * (1 - 0.75 + (0.75 * 6) / avg));
    t.ok(Math.abs(hits[1]!.score - expected) < 1e-12, `score ${hits[1]!.score} = ${expected}`);
  });
  t.test('case and Unicode insensitive to form', async (t) => {
    t.same(index.search('s', 'TEA', 10).map((h) => h.id), ['coffee', 'tea']);
    t.same(index.search('s', 'rex', 10).map((h) => h.id), ['dog']);
  });
  t.test('scopes are separate', async (t) => {
    t.same(index.search('other', 'tea', 10).map((h) => h.id), ['x']);
    t.same(index.search('nobody', 'tea', 10), []);
  });
  t.test('update and remove', async (t) => {
    index.upsert('s', 'dog', 'My dog Rex drinks tea');
    t.same(index.search('s', 'park', 10), []);
    t.ok(index.search('s', 'tea', 10).some((h) => h.id === 'dog'));
    index.remove('s', 'dog');
    t.same(index.search('s', 'rex', 10), []);
    t.equal(index.size('s'), 2);
  });
  t.test('a term repeated in the query counts once per repetition (Lucene sums duplicate clauses)', async (t) => {
    const qtf = new Bm25Index();
    qtf.upsert('s', 'a-coffee', 'coffee');
    qtf.upsert('s', 'b-tea', 'tea');
    const tea = qtf.search('s', 'tea', 1)[0]!.score;
    const hits = qtf.search('s', 'coffee tea, tea', 10);
    t.same(hits.map((h) => h.id), ['b-tea', 'a-coffee'], 'not a tie broken by id');
    t.ok(Math.abs(hits[0]!.score - 2 * tea) < 1e-12, `score ${hits[0]!.score} = 2 × ${tea}`);
    t.ok(Math.abs(hits[1]!.score - tea) < 1e-12, 'same idf and length: once');
  });
  t.test('a one-character query of an unspaced script matches inside a sentence', async (t) => {
    t.same(indexTerms('東京に行く'), { terms: ['東京', '京に', 'に行', '行く', '東', '京', 'に', '行', 'く'], tokens: 4 });
    const cjk = new Bm25Index();
    cjk.upsert('s', 'ja', '私は猫が好き');
    cjk.upsert('s', 'zh', '我喜欢猫');
    cjk.upsert('s', 'kyoto', '京都に行く');
    cjk.upsert('s', 'one', '猫');
    t.same(cjk.search('s', '猫', 10).map((h) => h.id).sort(), ['ja', 'one', 'zh']);
    t.same(cjk.search('s', '東京', 10), [], 'a longer query still needs its bigrams: 京 alone does not match 東京');
    t.same(cjk.search('s', '京都', 10).map((h) => h.id), ['kyoto']);
  });
  t.test('Korean words with particles and Thai words inside a sentence match the bare word', async (t) => {
    const index = new Bm25Index();
    index.upsert('s', 'subject', '고양이가 귀엽다');
    index.upsert('s', 'object', '나는 고양이를 좋아해');
    index.upsert('s', 'dog', '강아지가 짖는다');
    index.upsert('s', 'thai-cat', 'ฉันรักแมวมาก');
    index.upsert('s', 'thai-dog', 'ฉันรักหมา');
    t.same(index.search('s', '고양이', 10).map((h) => h.id).sort(), ['object', 'subject']);
    t.same(index.search('s', '집', 10), [], 'a syllable no memory holds matches nothing');
    t.same(index.search('s', 'แมว', 10).map((h) => h.id), ['thai-cat']);
    t.same(index.search('s', 'รัก', 10).map((h) => h.id).sort(), ['thai-cat', 'thai-dog']);
  });
  t.test('term frequency is exact past 255 (BM25 saturates it; a cap reorders results)', async (t) => {
    const tf = new Bm25Index();
    tf.upsert('s', 'long', 'tea '.repeat(1000));
    tf.upsert('s', 'short', `${'tea '.repeat(255)}x`);
    tf.upsert('s', 'other', 'coffee');
    const hits = tf.search('s', 'tea', 10);
    const idf = Math.log(1 + (3 - 2 + 0.5) / (2 + 0.5));
    const avg = (1000 + 256 + 1) / 3;
    const bm25 = (f: number, length: number) => (idf * f * 2.2) / (f + 1.2 * (1 - 0.75 + (0.75 * length) / avg));
    t.same(hits.map((h) => h.id), ['long', 'short']);
    t.ok(Math.abs(hits[0]!.score - bm25(1000, 1000)) < 1e-12, `score ${hits[0]!.score} = ${bm25(1000, 1000)}`);
  });
  t.test('the vocabulary of a scope does not grow with updates', async (t) => {
    const churn = new Bm25Index();
    churn.upsert('s', 'keep', 'a memory that stays');
    for (let i = 0; i < 20_000; i++) churn.upsert('s', 'pulse', `heart rate ${i} at t${i * 7}`);
    t.ok(churn.vocabulary('s') < 5000, `vocabulary ${churn.vocabulary('s')}`);
    t.same(churn.search('s', 'stays', 5).map((h) => h.id), ['keep']);
    t.same(churn.search('s', '19999 rate', 5).map((h) => h.id), ['pulse']);
    t.same(churn.search('s', '19998', 5), []);
    t.same(churn.search('s', 't139993', 5).map((h) => h.id), ['pulse']);
  });
  t.test('many deletes compact the postings and keep results right', async (t) => {
    const big = new Bm25Index();
    for (let i = 0; i < 5000; i++) big.upsert('b', `m${i}`, `memory number ${i} ${i % 2 ? 'odd' : 'even'}`);
    for (let i = 0; i < 4000; i++) big.remove('b', `m${i}`);
    t.equal(big.size('b'), 1000);
    const hits = big.search('b', 'odd', 1000);
    t.equal(hits.length, 500);
    t.ok(hits.every((h) => Number(h.id.slice(1)) >= 4000 && Number(h.id.slice(1)) % 2 === 1));
    t.same(big.search('b', '4321', 5).map((h) => h.id), ['m4321']);
  });
});

t.test('vector index: cosine, per scope and model', async (t) => {
  const index = new BruteForceVectorIndex();
  index.upsert('s', 'a', 'm', Float32Array.from([1, 0, 0]));
  index.upsert('s', 'b', 'm', Float32Array.from([1, 1, 0]));
  index.upsert('s', 'c', 'm', Float32Array.from([0, 0, 5]));
  index.upsert('s', 'd', 'other-model', Float32Array.from([1, 0]));
  const hits = index.search('s', 'm', Float32Array.from([2, 0, 0]), 10);
  t.same(hits.map((h) => h.id), ['a', 'b', 'c']);
  t.ok(Math.abs(hits[0]!.score - 1) < 1e-6);
  t.ok(Math.abs(hits[1]!.score - Math.SQRT1_2) < 1e-6);
  t.same(index.search('s', 'other-model', Float32Array.from([1, 0]), 10).map((h) => h.id), ['d']);
  index.remove('s', 'a');
  t.same(index.search('s', 'm', Float32Array.from([1, 0, 0]), 10).map((h) => h.id), ['b', 'c']);
  // Growing past the initial capacity keeps every column right.
  for (let i = 0; i < 300; i++) index.upsert('g', `v${i}`, 'm', Float32Array.from([i, 100, 0]));
  t.same(index.search('g', 'm', Float32Array.from([1, 0, 0]), 2).map((h) => h.id), ['v299', 'v298']);
  for (let i = 0; i < 299; i++) index.remove('g', `v${i}`);
  t.same(index.search('g', 'm', Float32Array.from([0, 1, 0]), 5).map((h) => h.id), ['v299']);
  t.equal(index.size('g'), 1);
});

t.test('vector index: a cosine is never outside [-1, 1], also when Float32 rounding of unit vectors adds up past it', async (t) => {
  // Normalised to Float32, (1, 1, 2) has a squared length of 1 + 7e-8: compared with itself it summed to 1.00000007.
  const index = new BruteForceVectorIndex();
  index.upsert('s', 'b-same', 'm', Float32Array.from([1, 1, 2]));
  index.upsert('s', 'a-twice', 'm', Float32Array.from([2, 2, 4]));
  index.upsert('s', 'c-near', 'm', Float32Array.from([1, 1, 2.1]));
  const same = index.search('s', 'm', Float32Array.from([1, 1, 2]), 10);
  t.same(same.map((h) => h.score).slice(0, 2), [1, 1], 'an exact match scores 1');
  t.same(same.map((h) => h.id), ['a-twice', 'b-same', 'c-near'], 'equal scores rank by id, the near one after');
  t.ok(same[2]!.score < 1);
  const opposite = index.search('s', 'm', Float32Array.from([-1, -1, -2]), 10);
  t.same(opposite.map((h) => h.score).slice(1), [-1, -1], 'the opposite direction scores -1');
});

t.test('vector index: a vector of another dimension under the same model replaces none of the others', async (t) => {
  // E.g. loading the read model after the provider changed the dimension of a model: old and new vectors mixed.
  const index = new BruteForceVectorIndex();
  index.upsert('s', 'new1', 'm', Float32Array.from([1, 0, 0]));
  index.upsert('s', 'old1', 'm', Float32Array.from([1, 0]));
  index.upsert('s', 'new2', 'm', Float32Array.from([0, 1, 0]));
  index.upsert('s', 'old2', 'm', Float32Array.from([0, 1]));
  t.equal(index.size('s'), 4);
  t.same(index.search('s', 'm', Float32Array.from([1, 0, 0]), 10).map((h) => h.id), ['new1', 'new2']);
  t.same(index.search('s', 'm', Float32Array.from([1, 0]), 10).map((h) => h.id), ['old1', 'old2']);
  t.same([...index.models()], [['m', 4]]);
  index.upsert('s', 'old1', 'm', Float32Array.from([0, 0, 1]));
  t.same(index.search('s', 'm', Float32Array.from([0, 0, 1]), 10).map((h) => h.id), ['old1', 'new1', 'new2'], 're-embedded: moved');
  t.same(index.search('s', 'm', Float32Array.from([1, 0]), 10).map((h) => h.id), ['old2']);
  index.remove('s', 'old2');
  t.equal(index.size('s'), 3);
});

t.test('vector index: sparse vectors through inserts, updates and removals score as exact cosine', async (t) => {
  // Slots freed by removals are reused by later inserts, which write only their non-zero components:
  // a stale component left behind in a freed slot would show up here as a wrong score.
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const dim = 32;
  const sparse = () => Float32Array.from({ length: dim }, () => (random() < 0.2 ? random() * 2 - 1 : 0));
  const index = new BruteForceVectorIndex();
  const reference = new Map<string, Float32Array>();
  for (let op = 0; op < 3000; op++) {
    const id = `m${Math.floor(random() * 120)}`;
    if (random() < 0.3) {
      index.remove('s', id);
      reference.delete(id);
    } else {
      const v = sparse();
      index.upsert('s', id, 'm', v);
      reference.set(id, v);
    }
  }
  const unit = (v: Float32Array) => { const n = Math.hypot(...v); return n === 0 ? v : v.map((x) => x / n); };
  let worst = 0;
  for (let q = 0; q < 20; q++) {
    const query = sparse();
    const hits = index.search('s', 'm', query, 1000);
    t.equal(hits.length, reference.size, 'every live vector ranks once');
    for (const hit of hits) {
      const expected = unit(reference.get(hit.id)!).reduce((sum, x, i) => sum + x * unit(query)[i]!, 0);
      worst = Math.max(worst, Math.abs(hit.score - expected));
    }
  }
  t.ok(worst < 1e-5, `largest score error ${worst}`);
  t.equal(index.size('s'), reference.size);
});

t.test('reciprocal rank fusion with k = 60', async (t) => {
  const fused = reciprocalRankFusion([
    [{ id: 'a', score: 9 }, { id: 'b', score: 5 }],
    [{ id: 'b', score: 0.9 }, { id: 'c', score: 0.5 }],
  ], 10);
  t.same(fused.map((h) => h.id), ['b', 'a', 'c']);
  t.equal(fused[0]!.score, 1 / 62 + 1 / 61);
  t.equal(fused[1]!.score, 1 / 61);
  t.equal(fused[2]!.score, 1 / 62);
  t.equal(reciprocalRankFusion([[{ id: 'a', score: 1 }], [{ id: 'b', score: 1 }]], 1).length, 1);
});

t.test('local embedder: deterministic, unit length, sub-word overlap', async (t) => {
  const e = new LocalHashEmbedder();
  const [a, b, c, d, empty] = await e.embed(['running shoes', 'Running shoe', 'a recipe for soup', 'running shoes', '!!!']);
  const dot = (x: Float32Array, y: Float32Array) => x.reduce((s, v, i) => s + v * y[i]!, 0);
  t.equal(a!.length, LOCAL_EMBEDDING_DIM);
  t.ok(Math.abs(dot(a!, a!) - 1) < 1e-5);
  t.same(Array.from(a!), Array.from(d!), 'deterministic');
  t.ok(dot(a!, b!) > 0.6, `spelling variants are close (${dot(a!, b!)})`);
  t.ok(dot(a!, b!) > dot(a!, c!) + 0.4, 'unrelated text is far');
  t.ok(empty!.every((x) => x === 0), 'no words → zero vector');
});

t.test('parseFacts tolerates what local models send', async (t) => {
  t.same(parseFacts('{"facts": ["likes tea", "has a dog"]}'), ['likes tea', 'has a dog']);
  t.same(parseFacts('```json\n{"facts": ["likes tea"]}\n```'), ['likes tea'], 'fenced');
  t.same(parseFacts('Sure! Here are the facts:\n{"facts": ["likes tea",]}\nHope this helps.'), ['likes tea'], 'prose and trailing comma');
  t.same(parseFacts('["likes tea"]'), ['likes tea'], 'bare array');
  t.same(parseFacts('{"facts": [{"fact": "likes tea"}, {"text": "has a dog"}, 3]}'), ['likes tea', 'has a dog'], 'objects; non-text items dropped');
  t.same(parseFacts('{"facts": []}'), []);
  t.throws(() => parseFacts('I could not find any facts.'), UnparseableFactsError);
  t.throws(() => parseFacts('{"memories": ["likes tea"]}'), UnparseableFactsError, 'wrong shape is not "no facts"');
  t.throws(() => parseFacts('{"facts": ["likes tea"'), UnparseableFactsError, 'truncated');
  t.same(parseFacts('Sure! Facts: ["likes tea", "has a dog"] Hope this helps.'), ['likes tea', 'has a dog'], 'bare array in prose');
  t.throws(() => parseFacts('{"facts": [{"name": "Sam"}]}'), UnparseableFactsError, 'items, none of them a fact');
  t.throws(() => parseFacts('{"facts": [42, true]}'), UnparseableFactsError, 'scalars are not facts');
});

t.test('parseFacts finds the JSON in prose that has braces and brackets of its own', async (t) => {
  t.same(parseFacts('Here is the JSON for the text {as requested}:\n{"facts": ["likes tea"]}'), ['likes tea'], 'braces in the prose before');
  t.same(parseFacts('{"facts": ["likes tea"]}\n\nNote: I skipped the greetings (e.g. {hello}).'), ['likes tea'], 'braces in the prose after');
  t.same(parseFacts('<think>The text says {"hi"} and cites [1].</think>\n{"facts": ["likes tea",]}'), ['likes tea'], 'a reasoning block first');
  t.same(parseFacts('As noted in [1], the facts: ["likes tea", "has a dog"]'), ['likes tea', 'has a dog'], 'a bracket in the prose before a bare array');
  t.same(parseFacts('The facts {none found}: {"facts": []}'), [], 'an explicit empty list in prose');
  t.same(parseFacts('Here: {"facts": ["a \\"quoted\\" {brace]"]} done.'), ['a "quoted" {brace]'], 'brackets and quotes inside the strings');
  t.throws(() => parseFacts('Here: {"memories": ["likes tea"]} and {so on}.'), UnparseableFactsError, 'the wrong shape in prose is still not a list');
  t.throws(() => parseFacts('Sorry {I cannot} answer [1].'), UnparseableFactsError, 'no facts anywhere');
  t.throws(() => parseFacts(`${'{'.repeat(100_000)}{"facts": ["too far"]}`), UnparseableFactsError, 'the search for a start is bounded');
});

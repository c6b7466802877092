/**
 * Unicode word tokenizer shared by the BM25 index and the local embedder.
 *
 * Text is NFKC-normalised (full-width forms, ligatures and compatibility characters fold to their
 * plain forms), loses its default-ignorable characters as NFKC_Casefold (ICU's nfkc_cf) does (see
 * IGNORABLE), and is case-folded without a locale (the same result on every machine): lower-cased, with
 * the full foldings lower-casing misses for common text: ß → ss, the dotted capital İ → i (lower-casing
 * leaves i + U+0307), final ς → σ. So "STRASSE" finds "Straße" and "istanbul" finds "İstanbul". A word is a run of
 * letters and digits, with combining marks kept inside it (Devanagari vowel signs, etc.). Each emoji is a
 * word of its own, as in Lucene's standard tokenizer, without its skin tone ("👍🏽" finds "👍") and with
 * each emoji of a joined sequence apart; a flag is its pair of regional indicators. Han,
 * Hiragana, Katakana and Hangul are cut into overlapping character bigrams, as Lucene's CJK analyzer
 * does: Chinese and Japanese are written without spaces, and Korean attaches particles and endings to
 * the word ("고양이가", "고양이를"), so bigrams let a query match inside a sentence or a word ("고양이"). A
 * document is also indexed under each of their characters (see indexTerms), so a one-character query
 * ("猫") matches too. Thai, Lao, Khmer and Myanmar, also written without spaces between words, are cut
 * into words by ICU's dictionaries (`Intl.Segmenter`; Node ships full ICU).
 */
const WORD = /[\p{L}\p{N}][\p{L}\p{N}\p{M}]*|\p{Extended_Pictographic}|\p{Regional_Indicator}{2}/gu;
/** A word that needs more than the regular expression: bigrams (BIGRAM) or dictionary segmentation (DICTIONARY). */
const SPECIAL = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}\p{Script=Myanmar}]/u;
const DICTIONARY = /[\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}\p{Script=Myanmar}]/u;
const BIGRAM_RUN = /([\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\u30fc]+)|([^\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\u30fc]+)/gu;
/** Locale-independent: ICU picks the dictionary by script. */
const segmenter = new Intl.Segmenter('und', { granularity: 'word' });

/**
 * Invisible characters that must not split or change a word: soft hyphens (web pages, PDFs), word
 * joiners, zero-width joiners inside Indic words, variation selectors (also ideographic ones after Han),
 * byte order marks, bidirectional marks. The zero-width space and non-joiner are kept: they separate
 * words (Persian writes a non-joiner or a space between the parts of one), and the regular expression
 * below splits there.
 */
const IGNORABLE = /(?![\u200b\u200c])\p{Default_Ignorable_Code_Point}/gu;
const FOLD = /ß|i\u0307|ς/g;
const NEEDS_FOLD = /ß|i\u0307|ς/;
const FOLDED: Record<string, string> = { 'ß': 'ss', 'i\u0307': 'i', 'ς': 'σ' };

/** Locale-independent case folding (see above). */
export function caseFold(text: string): string {
  // Removed before NFKC: a combining grapheme joiner between two marks would keep them from composing.
  const lower = text.replace(IGNORABLE, '').normalize('NFKC').toLowerCase();
  return NEEDS_FOLD.test(lower) ? lower.replace(FOLD, (m) => FOLDED[m]!) : lower;
}

export function tokenize(text: string): string[] {
  return split(text);
}

/** A word of Latin letters (with their marks) and digits only: the words accent folding applies to. */
const LATIN_WORD = /^[\p{Script=Latin}\p{M}\p{N}]+$/u;
/** Not plain ASCII: a word that may have something to fold. */
const NON_ASCII = /[^\0-\x7f]/;
const MARKS = /\p{M}/gu;
/** Latin letters that carry their mark in their shape (no decomposition), folded as Lucene's ASCIIFoldingFilter does. */
const LATIN_LETTERS = /[øæœđłþðı]/g;
const LATIN_FOLDED: Record<string, string> = { 'ø': 'o', 'æ': 'ae', 'œ': 'oe', 'đ': 'd', 'ł': 'l', 'þ': 'th', 'ð': 'd', 'ı': 'i' };

/**
 * A token of Latin script without its accents ("café" → "cafe", "Ørsted" → "orsted", "Łódź" → "lodz"), or undefined
 * when it has none (or is of another script, whose marks can be letters' vowels: Devanagari, Arabic, Hebrew…).
 * The lexical index holds a memory under both forms and a query asks for both, as Elasticsearch's asciifolding with
 * preserve_original does: "cafe" finds "café", and "café" ranks a memory with "café" above one with "cafe".
 */
export function unaccented(token: string): string | undefined {
  if (!NON_ASCII.test(token) || !LATIN_WORD.test(token)) return undefined;
  const folded = token.normalize('NFD').replace(MARKS, '').replace(LATIN_LETTERS, (c) => LATIN_FOLDED[c]!).normalize('NFC');
  return folded === token || folded === '' ? undefined : folded;
}

/** The unaccented forms of those tokens that have one (see unaccented). */
function unaccentedForms(tokens: string[]): string[] {
  return tokens.flatMap((token) => unaccented(token) ?? []);
}

/** The tokens of a query, then their unaccented forms (see unaccented). */
export function queryTerms(query: string): string[] {
  const tokens = split(query);
  return tokens.concat(unaccentedForms(tokens));
}

/**
 * What a document is indexed under: its tokens, then each character of its unspaced runs longer than one
 * character (a one-character query is that character, which the bigrams alone never match), then the
 * unaccented forms of its Latin tokens (see unaccented). `tokens` counts the tokens only: the document's
 * length for BM25 is the same as without the characters and the unaccented forms.
 */
export function indexTerms(text: string): { terms: string[]; tokens: number } {
  const characters: string[] = [];
  const tokens = split(text, characters);
  return { terms: tokens.concat(characters, unaccentedForms(tokens)), tokens: tokens.length };
}

/** The tokens of `text`; the characters of its unspaced runs longer than one go to `characters`, if given. */
function split(text: string, characters?: string[]): string[] {
  const words = caseFold(text).match(WORD);
  if (!words) return [];
  const out: string[] = [];
  for (const word of words) {
    if (!SPECIAL.test(word)) {
      out.push(word);
      continue;
    }
    for (const [, unspaced, other] of word.matchAll(BIGRAM_RUN)) {
      if (other) {
        if (!DICTIONARY.test(other)) out.push(other);
        else for (const s of segmenter.segment(other)) if (s.isWordLike) out.push(s.segment);
        continue;
      }
      const chars = [...unspaced!];
      if (chars.length === 1) out.push(chars[0]!);
      else characters?.push(...chars);
      for (let i = 0; i + 1 < chars.length; i++) out.push(chars[i]! + chars[i + 1]!);
    }
  }
  return out;
}

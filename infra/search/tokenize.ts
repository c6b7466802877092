/**
 * Unicode word tokenizer shared by the BM25 index and the local embedder.
 *
 * Text is NFKC-normalised (full-width forms, ligatures and compatibility characters fold to their
 * plain forms) and case-folded without a locale (the same result on every machine): lower-cased, with
 * the full foldings lower-casing misses for common text: ß → ss, the dotted capital İ → i (lower-casing
 * leaves i + U+0307), final ς → σ. So "STRASSE" finds "Straße" and "istanbul" finds "İstanbul". A word is a run of
 * letters and digits, with combining marks kept inside it (Devanagari vowel signs, etc.). Scripts
 * written without spaces (Han, Hiragana, Katakana) are cut into overlapping character bigrams, so a
 * query can match inside a sentence; a document is also indexed under each of their characters (see
 * indexTerms), so a one-character query ("猫") matches too.
 */
const WORD = /[\p{L}\p{N}][\p{L}\p{N}\p{M}]*/gu;
const UNSPACED = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}]/u;
const UNSPACED_RUN = /([\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\u30fc]+)|([^\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\u30fc]+)/gu;

const FOLD = /ß|i\u0307|ς/g;
const NEEDS_FOLD = /ß|i\u0307|ς/;
const FOLDED: Record<string, string> = { 'ß': 'ss', 'i\u0307': 'i', 'ς': 'σ' };

/** Locale-independent case folding (see above). */
export function caseFold(text: string): string {
  const lower = text.normalize('NFKC').toLowerCase();
  return NEEDS_FOLD.test(lower) ? lower.replace(FOLD, (m) => FOLDED[m]!) : lower;
}

export function tokenize(text: string): string[] {
  return split(text);
}

/**
 * What a document is indexed under: its tokens, then each character of its unspaced runs longer than one
 * character (a one-character query is that character, which the bigrams alone never match). `tokens`
 * counts the tokens only: the document's length for BM25 is the same as without the characters.
 */
export function indexTerms(text: string): { terms: string[]; tokens: number } {
  const characters: string[] = [];
  const tokens = split(text, characters);
  return { terms: tokens.concat(characters), tokens: tokens.length };
}

/** The tokens of `text`; the characters of its unspaced runs longer than one go to `characters`, if given. */
function split(text: string, characters?: string[]): string[] {
  const words = caseFold(text).match(WORD);
  if (!words) return [];
  const out: string[] = [];
  for (const word of words) {
    if (!UNSPACED.test(word)) {
      out.push(word);
      continue;
    }
    for (const [, unspaced, other] of word.matchAll(UNSPACED_RUN)) {
      if (other) { out.push(other); continue; }
      const chars = [...unspaced!];
      if (chars.length === 1) out.push(chars[0]!);
      else characters?.push(...chars);
      for (let i = 0; i + 1 < chars.length; i++) out.push(chars[i]! + chars[i + 1]!);
    }
  }
  return out;
}

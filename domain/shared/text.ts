/** Text rules shared by features (and by the HTTP validation that reports them). */

export interface TextProblem {
  message: string;
  /** The offending code point and where it is: `U+200B at UTF-16 offset 3`. */
  value: string;
}

const at = (codePoint: number, offset: number) => `U+${codePoint.toString(16).toUpperCase().padStart(4, '0')} at UTF-16 offset ${offset}`;

/**
 * Text must be well-formed Unicode. Hashing and UTF-8 turn an unpaired surrogate into U+FFFD, so
 * "note \ud800" would be the memory of "note \ufffd" (or take the agent name "a\ufffdb") and be answered
 * with a text that was never stored.
 * (String.prototype.isWellFormed does the same, but is not in the ES2022 library we compile against.)
 */
export function unpairedSurrogate(value: string): TextProblem | undefined {
  const lone = /\p{Surrogate}/u.exec(value);
  if (!lone) return undefined;
  return { message: 'must be well-formed Unicode (no unpaired surrogates)', value: at(lone[0].charCodeAt(0), lone.index) };
}

/**
 * Viramas (canonical combining class 9): a zero-width joiner or non-joiner after one asks for a particular
 * conjunct form in Indic and related scripts (RFC 5892 appendix A.1 and A.2). Derived from Node's Unicode
 * data (17.0); test/unit/agent-names.test.ts derives it again and fails when a newer Node adds some.
 */
export const VIRAMAS = '\u094D\u09CD\u0A4D\u0ACD\u0B4D\u0BCD\u0C4D\u0CCD\u0D3B\u0D3C\u0D4D\u0DCA\u0E3A\u0EBA\u0F84\u1039\u103A\u1714\u1715\u1734'
  + '\u17D2\u1A60\u1B44\u1BAA\u1BAB\u1BF2\u1BF3\u2D7F\uA806\uA82C\uA8C4\uA953\uA9C0\uAAF6\uABED\u{10A3F}\u{11046}\u{11070}\u{1107F}'
  + '\u{110B9}\u{11133}\u{11134}\u{111C0}\u{11235}\u{112EA}\u{1134D}\u{113CE}\u{113CF}\u{113D0}\u{11442}\u{114C2}\u{115BF}\u{1163F}'
  + '\u{116B6}\u{1172B}\u{11839}\u{1193D}\u{1193E}\u{119E0}\u{11A34}\u{11A47}\u{11A99}\u{11C3F}\u{11D44}\u{11D45}\u{11D97}\u{11F41}\u{11F42}\u{1612F}';

const VIRAMA = new RegExp(`^[${VIRAMAS}]$`, 'u');
const CONTROL = /^\p{Cc}$/u;
const BIDI = /^\p{Bidi_Control}$/u;
const SEPARATOR = /^[\p{Zl}\p{Zp}]$/u;
const NONCHARACTER = /^\p{Noncharacter_Code_Point}$/u;
const IGNORABLE = /^\p{Default_Ignorable_Code_Point}$/u;
const PICTOGRAPHIC = /^\p{Extended_Pictographic}$/u;
const EMOJI = /^\p{Emoji}$/u;
const EMOJI_MODIFIER = /^\p{Emoji_Modifier}$/u;
const IDEOGRAPH = /^\p{Ideographic}$/u;
const MONGOLIAN = /^\p{Script_Extensions=Mongolian}$/u;
const NONSPACING = /^\p{Mn}$/u;
/** Cursive scripts whose letters a zero-width non-joiner keeps apart (Persian "می‌خواهم"). */
const JOINING_LETTER = /^(?=\p{L})[\p{Script_Extensions=Arabic}\p{Script_Extensions=Syriac}\p{Script_Extensions=Nko}\p{Script_Extensions=Mongolian}\p{Script_Extensions=Adlam}\p{Script_Extensions=Hanifi_Rohingya}\p{Script_Extensions=Mandaic}\p{Script_Extensions=Manichaean}\p{Script_Extensions=Psalter_Pahlavi}\p{Script_Extensions=Sogdian}]$/u;

const ZWNJ = '\u200C';
const ZWJ = '\u200D';
const VS15 = '\uFE0E';
const VS16 = '\uFE0F';
const BLACK_FLAG = '\u{1F3F4}';
const CANCEL_TAG = '\u{E007F}';
const isTag = (c: string | undefined) => c !== undefined && c >= '\u{E0020}' && c <= '\u{E007E}';
const isVariationSelector = (c: string) => (c >= '\uFE00' && c <= '\uFE0D') || (c >= '\u{E0100}' && c <= '\u{E01EF}');
const isMongolianFormat = (c: string) => c >= '\u180B' && c <= '\u180F';

/** The base letter before `i`, skipping non-spacing marks (harakat, nuqtas), or after it. */
function letterAround(chars: string[], i: number, step: -1 | 1): string | undefined {
  let j = i + step;
  while (chars[j] !== undefined && NONSPACING.test(chars[j]!)) j += step;
  return chars[j];
}

/**
 * Default-ignorable code points that have a visible effect where they are, so names in the scripts and
 * emoji that need them keep them: everywhere else they are invisible and refused.
 */
function ignorableInContext(chars: string[], i: number): boolean {
  const c = chars[i]!;
  const before = chars[i - 1];
  const after = chars[i + 1];
  if (c === ZWJ || c === ZWNJ) {
    if (before !== undefined && VIRAMA.test(before)) return true;
    if (c === ZWJ) {
      // An emoji ZWJ sequence (UTS #51): 👩‍💻, 👩🏽‍💻, 🏳️‍🌈, ❤️‍🔥.
      const emoji = before === VS16 || (before !== undefined && EMOJI_MODIFIER.test(before)) ? chars[i - 2] : before;
      return emoji !== undefined && PICTOGRAPHIC.test(emoji) && after !== undefined && PICTOGRAPHIC.test(after);
    }
    // Between two letters of a cursive script (an approximation of RFC 5892 A.1, whose Joining_Type data
    // JavaScript does not expose).
    const previous = letterAround(chars, i, -1);
    const next = letterAround(chars, i, 1);
    return previous !== undefined && next !== undefined && JOINING_LETTER.test(previous) && JOINING_LETTER.test(next);
  }
  // Text or emoji presentation of an emoji character (❤️, 1️⃣).
  if (c === VS15 || c === VS16) return before !== undefined && EMOJI.test(before) && !IGNORABLE.test(before);
  // Standardized and ideographic variation sequences of CJK ideographs (葛󠄀, as Japanese names need).
  if (isVariationSelector(c)) return before !== undefined && IDEOGRAPH.test(before);
  // Mongolian free variation selectors and the vowel separator, within Mongolian words.
  if (isMongolianFormat(c)) return before !== undefined && MONGOLIAN.test(before) && !isMongolianFormat(before);
  // Tags spell a subdivision flag after 🏴 and end with CANCEL TAG (🏴󠁧󠁢󠁳󠁣󠁴󠁿).
  if (isTag(c) || c === CANCEL_TAG) {
    let start = i;
    while (isTag(chars[start - 1])) start -= 1;
    if (c === CANCEL_TAG && start === i) return false;
    let end = i;
    while (isTag(chars[end])) end += 1;
    return chars[start - 1] === BLACK_FLAG && chars[end] === CANCEL_TAG;
  }
  return false;
}

function classify(chars: string[], i: number): string | undefined {
  const c = chars[i]!;
  if (CONTROL.test(c)) return 'must not contain control characters (C0, DEL, C1)';
  if (BIDI.test(c)) return 'must not contain bidirectional formatting characters (they reorder how the name is displayed)';
  if (SEPARATOR.test(c)) return 'must not contain line or paragraph separators';
  if (NONCHARACTER.test(c)) return 'must not contain noncharacters';
  if (!IGNORABLE.test(c) || ignorableInContext(chars, i)) return undefined;
  if (c === ZWJ) return 'must not contain a zero-width joiner except after a virama or within an emoji sequence';
  if (c === ZWNJ) return 'must not contain a zero-width non-joiner except after a virama or between letters of a cursive script';
  if (c === VS15 || c === VS16 || isVariationSelector(c) || isMongolianFormat(c)) return 'must not contain a variation selector that varies nothing';
  if (isTag(c) || c === CANCEL_TAG) return 'must not contain tag characters outside a flag emoji';
  return 'must not contain invisible (default-ignorable) characters such as zero-width spaces';
}

/**
 * Names people read and compare must show what they are: the first control character, bidirectional
 * control, line separator, noncharacter or invisible (default-ignorable) code point in `value`, with where
 * it is. Zero-width joiners, variation selectors and tags are accepted only where they change what is shown
 * (conjuncts, cursive joining, emoji sequences, CJK variants, Mongolian), as PRECIS (RFC 8264/8266) and
 * UTS #51 allow them. Unpaired surrogates are `unpairedSurrogate`'s.
 */
export function invisibleCharacter(value: string): TextProblem | undefined {
  const chars = [...value];
  let offset = 0;
  for (let i = 0; i < chars.length; i += 1) {
    const message = classify(chars, i);
    if (message) return { message, value: at(chars[i]!.codePointAt(0)!, offset) };
    offset += chars[i]!.length;
  }
  return undefined;
}

/**
 * The form names people read (of agents, projects, API keys) are stored, compared and looked up in. Limits
 * apply to this form: the text sent may be longer (surrounding spaces; decomposed accents or Hangul take up
 * to four code points each), which `rawNameLength` leaves room for.
 */
export const nameForm = (name: string) => name.trim().normalize('NFC');

/** The bound a request schema puts on the text sent for a name of at most `max` characters in `nameForm`. */
export const rawNameLength = (max: number) => 4 * max;

export interface NameProblem {
  message: string;
  value?: string;
}

/**
 * What makes a stored name acceptable, wherever it comes from (the API, the operator CLI): in `nameForm`,
 * not blank, at most `max` characters, well-formed, and nothing invisible or reordering in it.
 */
export function nameProblems(name: string, max: number): NameProblem[] {
  if (name !== nameForm(name)) return [{ message: 'must be trimmed and NFC-normalised' }];
  if (name === '') return [{ message: 'must not be empty or only whitespace' }];
  const problems: Array<NameProblem | undefined> = [
    // Given by its size, as every string over its limit is, not echoed back.
    [...name].length > max ? { message: `must not have more than ${max} characters (after trimming and NFC normalisation)`, value: `${[...name].length} characters` } : undefined,
    unpairedSurrogate(name),
    invisibleCharacter(name),
  ];
  return problems.filter((p): p is NameProblem => p !== undefined);
}

/** The first of `nameProblems` as one line (`must not contain … (U+200B at UTF-16 offset 1)`), for deciders and the operator CLI. */
export function nameProblem(name: string, max: number): string | undefined {
  const [problem] = nameProblems(name, max);
  return problem && `${problem.message}${problem.value ? ` (${problem.value})` : ''}`;
}

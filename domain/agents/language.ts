/**
 * An agent's language: a BCP 47 tag whose primary subtag is an ISO 639 code (2 or 3 letters), in any case
 * as sent. Tags are case-insensitive (RFC 5646 §2.1.1), so "EN", "en-us" and "zh-hant-tw" are stored in
 * canonical form ("en", "en-US", "zh-Hant-TW"; deprecated codes replaced: "iw" is "he").
 */
export const LANGUAGE_PATTERN = '^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$';
export const MAX_LANGUAGE_TAG = 35;
const SHAPE = new RegExp(LANGUAGE_PATTERN);

/** The canonical form of a language tag, or undefined when it is not a valid one. */
export function canonicalLanguage(tag: string): string | undefined {
  if (tag.length > MAX_LANGUAGE_TAG || !SHAPE.test(tag)) return undefined;
  let canonical: string | undefined;
  try {
    [canonical] = Intl.getCanonicalLocales(tag);
  } catch {
    return undefined; // RangeError: not a well-formed tag (en--US, en-a, i-klingon, a repeated variant)
  }
  // Canonicalisation can lengthen a tag ("en-US-POSIX" is "en-US-u-va-posix"): the stored form keeps to the limit.
  return canonical !== undefined && canonical.length <= MAX_LANGUAGE_TAG && SHAPE.test(canonical) ? canonical : undefined;
}

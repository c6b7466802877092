export class UnparseableFactsError extends Error {
  override readonly name = 'UnparseableFactsError';
}

/** Tries JSON.parse, then again after removing trailing commas (a common slip of small local models). */
function parseLoose(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return JSON.parse(text.replace(/,\s*([}\]])/g, '$1'));
  }
}

const UNPARSED = Symbol('unparsed');

function tryParse(text: string): unknown {
  try {
    return parseLoose(text);
  } catch {
    return UNPARSED;
  }
}

/**
 * How many `{` and `[` of a reply are tried as the start of its JSON: enough for prose (or a model's
 * reasoning) with a few braces of its own, and a bound on the work for a long reply that holds no JSON.
 */
const MAX_STARTS = 64;

/**
 * Where the object or array opening at `start` closes (the index after it), or -1 when it does not:
 * brackets inside JSON strings do not count, and a bracket closed by the wrong kind ends the attempt.
 */
function closingIndex(text: string, start: number): number {
  const expected: string[] = [];
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
    } else if (c === '{' || c === '[') {
      expected.push(c === '{' ? '}' : ']');
    } else if (c === '}' || c === ']') {
      if (expected.pop() !== c) return -1;
      if (expected.length === 0) return i + 1;
    }
  }
  return -1;
}

/**
 * The JSON objects and arrays in prose, in order: from each `{` or `[`, the value that closes there if
 * it parses. A value that parses is skipped whole (what is inside `{"memories": [...]}` is not a list of
 * facts); from a bracket that opens none (prose such as "{as requested}") the search goes on after it.
 */
function* embeddedValues(reply: string): Generator<unknown> {
  let from = 0;
  for (let tried = 0; tried < MAX_STARTS; tried++) {
    const open = reply.slice(from).search(/[{[]/);
    if (open < 0) return;
    const start = from + open;
    const end = closingIndex(reply, start);
    const value = end < 0 ? UNPARSED : tryParse(reply.slice(start, end));
    if (value === UNPARSED) {
      from = start + 1;
      continue;
    }
    yield value;
    from = end;
  }
}

function factText(item: unknown): string | undefined {
  if (typeof item === 'string') return item;
  if (item && typeof item === 'object') {
    for (const key of ['fact', 'text', 'content']) {
      const value = (item as Record<string, unknown>)[key];
      if (typeof value === 'string') return value;
    }
  }
  return undefined;
}

/** The facts of a list: a non-empty list none of whose items is a fact is unreadable, not "no facts". */
function factsOf(list: unknown[]): string[] {
  const facts = list.map(factText).filter((f): f is string => f !== undefined);
  if (list.length > 0 && facts.length === 0) {
    throw new UnparseableFactsError(`the chat provider's facts list has ${list.length} items and none of them is a fact`);
  }
  return facts;
}

const factsList = (value: unknown): unknown[] | undefined => {
  const list = (value as { facts?: unknown } | null)?.facts;
  return Array.isArray(list) ? list : undefined;
};

/**
 * The facts in a chat provider's reply. Tolerates what local models do: a ```json fence, prose around
 * the JSON (braces and brackets of its own included, as in a model's reasoning before its answer),
 * trailing commas, a bare array, and facts given as {"fact": "..."} objects. The reply itself and the
 * first fenced block are read first; then the first `{"facts": [...]}` object in the reply, else its
 * first array holding a fact (or an empty one). A reply in which no `facts` list can be found throws,
 * and so does a non-empty list none of whose items is a fact (a string, or an object with a `fact`,
 * `text` or `content` string): an unreadable reply must not pass for "no facts". Only an explicitly
 * empty list means the text held none.
 */
export function parseFacts(reply: string): string[] {
  const fenced = /```(?:json|JSON)?\s*([\s\S]*?)```/.exec(reply);
  for (const candidate of fenced ? [reply.trim(), fenced[1]!.trim()] : [reply.trim()]) {
    const parsed = tryParse(candidate);
    const list = Array.isArray(parsed) ? parsed : factsList(parsed);
    if (list) return factsOf(list);
  }
  let bare: unknown[] | undefined;
  for (const value of embeddedValues(reply)) {
    const list = factsList(value);
    if (list) return factsOf(list);
    // An array in prose counts if it can be the facts: "[1]" in a sentence is not.
    if (!bare && Array.isArray(value) && (value.length === 0 || value.some((item) => factText(item) !== undefined))) bare = value;
  }
  if (bare) return factsOf(bare);
  throw new UnparseableFactsError('the chat provider\'s reply contains no readable {"facts": [...]} JSON');
}

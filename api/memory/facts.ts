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

/**
 * Candidate JSON texts in a reply: the whole reply, a fenced block's content, the outermost {...}, and
 * the outermost [...] when it is not inside an object (`{"memories": [...]}` is the wrong shape, not a list).
 */
function candidates(reply: string): string[] {
  const out = [reply.trim()];
  const fenced = /```(?:json|JSON)?\s*([\s\S]*?)```/.exec(reply);
  if (fenced) out.push(fenced[1]!.trim());
  const open = reply.indexOf('{'), close = reply.lastIndexOf('}');
  if (open >= 0 && close > open) out.push(reply.slice(open, close + 1));
  const openList = reply.indexOf('['), closeList = reply.lastIndexOf(']');
  if (openList >= 0 && closeList > openList && (open < 0 || openList < open)) out.push(reply.slice(openList, closeList + 1));
  return out;
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

/**
 * The facts in a chat provider's reply. Tolerates what local models do: a ```json fence, prose around
 * the JSON, trailing commas, a bare array, and facts given as {"fact": "..."} objects. A reply in which
 * no `facts` list can be found throws, and so does a non-empty list none of whose items is a fact (a
 * string, or an object with a `fact`, `text` or `content` string): an unreadable reply must not pass for
 * "no facts". Only an explicitly empty list means the text held none.
 */
export function parseFacts(reply: string): string[] {
  for (const candidate of candidates(reply)) {
    let parsed: unknown;
    try {
      parsed = parseLoose(candidate);
    } catch {
      continue;
    }
    const list = Array.isArray(parsed) ? parsed : (parsed as { facts?: unknown } | null)?.facts;
    if (!Array.isArray(list)) continue;
    const facts = list.map(factText).filter((f): f is string => f !== undefined);
    if (list.length > 0 && facts.length === 0) {
      throw new UnparseableFactsError(`the chat provider's facts list has ${list.length} items and none of them is a fact`);
    }
    return facts;
  }
  throw new UnparseableFactsError('the chat provider\'s reply contains no readable {"facts": [...]} JSON');
}

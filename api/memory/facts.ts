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

/** Candidate JSON texts in a reply: the whole reply, a fenced block's content, and the outermost {...}. */
function candidates(reply: string): string[] {
  const out = [reply.trim()];
  const fenced = /```(?:json|JSON)?\s*([\s\S]*?)```/.exec(reply);
  if (fenced) out.push(fenced[1]!.trim());
  const open = reply.indexOf('{'), close = reply.lastIndexOf('}');
  if (open >= 0 && close > open) out.push(reply.slice(open, close + 1));
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
 * no `facts` list can be found throws: an unreadable reply must not pass for "no facts".
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
    return list.map(factText).filter((f): f is string => f !== undefined);
  }
  throw new UnparseableFactsError('the chat provider\'s reply contains no readable {"facts": [...]} JSON');
}

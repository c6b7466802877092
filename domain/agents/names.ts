import { invisibleCharacter, unpairedSurrogate } from '../shared/text.js';

/**
 * Names are stored trimmed and NFC-normalised, and the limit applies to that form: the text sent may be
 * longer (surrounding spaces; decomposed accents or Hangul take up to four code points each).
 */
export const MAX_AGENT_NAME = 128;

/** The form a name is stored, compared and looked up in. */
export const agentNameForm = (name: string) => name.trim().normalize('NFC');

export interface NameProblem {
  message: string;
  value?: string;
}

/**
 * What makes a stored agent name acceptable, wherever it comes from (the API, the operator CLI): in its
 * stored form, not blank, at most MAX_AGENT_NAME characters, well-formed, and nothing invisible or
 * reordering in it. (That a name must not look like a UUID nor be "." or ".." is the HTTP API's rule: it
 * shares GET /agents/{agentId} with ids.)
 */
export function agentNameProblems(name: string): NameProblem[] {
  if (name !== agentNameForm(name)) return [{ message: 'must be trimmed and NFC-normalised' }];
  if (name === '') return [{ message: 'must not be empty or only whitespace' }];
  const problems: Array<NameProblem | undefined> = [
    [...name].length > MAX_AGENT_NAME ? { message: `must not have more than ${MAX_AGENT_NAME} characters (after trimming and NFC normalisation)` } : undefined,
    unpairedSurrogate(name),
    invisibleCharacter(name),
  ];
  return problems.filter((p): p is NameProblem => p !== undefined);
}

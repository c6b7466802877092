import { nameForm } from '../shared/text.js';

/** The longest agent name, counted in its stored form (see nameForm); the other rules are every name's (nameProblems). */
export const MAX_AGENT_NAME = 128;

/** The form a name is stored, compared and looked up in. */
export const agentNameForm = nameForm;

/** Agent ids are UUIDs; `GET /agents/{agentId}` takes an id or a name, so a name must not look like one. */
/** A UUID's text form, in any case (the API's path and body ids use it too). */
export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * What an agent name must not be besides every name's rules (nameProblems): a UUID (names and ids share
 * `GET /agents/{agentId}`), or "." / ".." (URL clients resolve them as path segments, so no URL could name them).
 */
export function agentNameShapeProblem(name: string): string | undefined {
  if (UUID_PATTERN.test(name)) return 'must not look like a UUID (names and ids share GET /agents/{agentId})';
  if (name === '.' || name === '..') return 'must not be "." or ".." (URL clients resolve them as path segments)';
  return undefined;
}

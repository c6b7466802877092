import { nameForm } from '../shared/text.js';

/** The longest agent name, counted in its stored form (see nameForm); the other rules are every name's (nameProblems). */
export const MAX_AGENT_NAME = 128;

/** The form a name is stored, compared and looked up in. */
export const agentNameForm = nameForm;

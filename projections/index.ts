import type { Config } from '../infra/config.js';
import { agentsProjection } from './agents/projection.js';
import { apiKeysProjection } from './apikeys/projection.js';
import { configProjection } from './config/projection.js';
import { memoryProjections } from './memory/index.js';
import type { Projection } from './projection.js';
import { projectsProjection } from './projects/projection.js';

/** Every platform read model, by name (the name `ops projections rebuild NAME` takes). */
export const platformProjections: Projection[] = [projectsProjection, apiKeysProjection, configProjection, agentsProjection];

/** Every read model of both services, as the operator CLI sees them (without the server's in-process indexes). */
export function allProjections(config: Pick<Config, 'providers'>): Projection[] {
  return [...platformProjections, ...memoryProjections(config)];
}

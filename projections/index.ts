import { agentsProjection } from './agents/projection.js';
import { apiKeysProjection } from './apikeys/projection.js';
import { configProjection } from './config/projection.js';
import type { Projection } from './projection.js';
import { projectsProjection } from './projects/projection.js';

/** Every platform read model, by name (the name `ops projections rebuild NAME` takes). */
export const platformProjections: Projection[] = [projectsProjection, apiKeysProjection, configProjection, agentsProjection];

import Type from 'typebox';
import { Uuid } from '../../shared/schemas.js';

import { CONFIG_KEY_PATTERN } from '../../../domain/config/decider.js';

export const ConfigParams = Type.Object({ projectId: Uuid }, { additionalProperties: false });
export const ConfigKeyParams = Type.Object({
  projectId: Uuid,
  key: Type.String({ pattern: CONFIG_KEY_PATTERN, description: '1-256 of A-Z a-z 0-9 _ . : -, other than "." and ".."' }),
}, { additionalProperties: false });
export const ConfigValue = Type.Unknown({ description: 'any JSON value' });
export const ConfigMap = Type.Record(Type.String(), Type.Unknown(), { description: 'each config key mapped to its JSON value' });

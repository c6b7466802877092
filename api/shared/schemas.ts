import Type, { type TSchema } from 'typebox';

export const Uuid = Type.String({ format: 'uuid', pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' });
export const DateTime = Type.String({ format: 'date-time' });
export const Success = Type.Object({ success: Type.Boolean() });
/** A query open to any parameter, for operations that read none (probes with cache busters; operations not built yet). */
export const AnyQuery = Type.Object({}, { additionalProperties: true });

export { UUID_PATTERN } from '../../domain/agents/names.js';

/**
 * An optional body field that also takes null, meaning the same as leaving it out: answers show absent values as
 * null (a client may send back what it read), and generated clients send their unset optional arguments as null.
 */
export function OrNull<T extends TSchema>(schema: T) {
  // Its default and description are also the field's own, where readers and code generators look for them.
  const { default: value, description } = schema as { default?: unknown; description?: string };
  return Type.Optional(Type.Union([schema, Type.Null()], { ...(value !== undefined && { default: value }), ...(description !== undefined && { description }) }));
}

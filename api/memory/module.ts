import type { CommandBus } from '../../commands/bus.js';
import type { Config } from '../../infra/config.js';
import type { EventStore } from '../../infra/eventstore/port.js';
import type { Logger } from '../../infra/logger.js';
import type { ReadStore } from '../../infra/readstore/port.js';
import type { Projection } from '../../projections/projection.js';
import type { RouteDef } from '../http/routes.js';

export interface MemoryModuleDeps {
  bus: CommandBus;
  events: EventStore;
  reads: ReadStore;
  config: Config;
  log: Logger;
  /** Waits until the named projections have applied `position`. */
  waitFor(projections: string[], position: number): Promise<void>;
}

export interface MemoryModule {
  projections: Projection[];
  routes: RouteDef[];
}

/** The memory service's read models and routes. */
export async function createMemoryModule(_deps: MemoryModuleDeps): Promise<MemoryModule> {
  return { projections: [], routes: [] };
}

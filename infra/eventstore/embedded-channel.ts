import { resolve } from 'node:path';

/** The BroadcastChannel on which a log's writer thread announces new heads to the other threads of the process. */
export const appendChannelName = (file: string): string => `cairn-events:${resolve(file)}`;

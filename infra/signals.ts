/**
 * A stop signal that comes within this long of the first is the same stop delivered twice, not an operator asking
 * again: a service manager that signals every process of the service (systemd's default `KillMode=control-group`,
 * `kill -- -PGID`) reaches both npm and the server, and npm passes its own signal on to the server as well, a few
 * milliseconds later. Taken as a second stop, it would cut the requests in flight (or a key being printed). A person
 * pressing Ctrl-C again waits longer than this.
 */
export const REPEATED_SIGNAL_MS = 1000;

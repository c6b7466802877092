import t, { type Test } from 'tap';
import type { ProjectionRunner } from '../../projections/runner.js';
import { bearer, sessionToken, startTestCairn, type TestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';

/**
 * One read model held back while the others move on: the projects read model lags behind a project just
 * created (POST /projects then answers from its event). Queries must wait for every read model they read
 * (their readModels), and commands, which take no X-Min-Position, must not depend on one.
 */

/** Long enough for a restarted runner to catch up inside a wait on a busy machine; POST /projects waits this long. */
const TIMEOUT_MS = 3_000;

/** A projection runner of an app whose runners run in the HTTP thread (PROJECTIONS_THREAD=false): stopping it holds its read model back. */
function runnerOf(app: TestCairn, name: string): ProjectionRunner {
  const runner = (app.projections as unknown as { runners?: Map<string, ProjectionRunner> }).runners?.get(name);
  if (!runner) throw new Error(`no runner ${name} in the HTTP thread`);
  return runner;
}

async function projectWhileProjectsLag(t: Test) {
  const app = await startTestCairn({ PROJECTIONS_THREAD: 'false', CONSISTENCY_TIMEOUT_MS: String(TIMEOUT_MS) });
  const projects = runnerOf(app, 'projects');
  // Started again before the app stops (stopping waits for every read model to reach the log's head).
  t.teardown(async () => { await projects.start().catch(() => undefined); await app.stop(); });
  await projects.stop();
  const session = await sessionToken({ tenant_id: 'tenant-lagging' });
  const created = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'Lagging' } });
  t.equal(created.status, 200, 'created, answered from its event');
  const { project_id: projectId } = (await created.json()) as { project_id: string };
  t.equal(await app.reads.get('projects', projectId), undefined, 'the projects read model does not have it');
  return { app, projects, session, projectId, position: created.headers.get('x-event-position')! };
}

t.test('commands on a project just created find it although the projects read model lags', async (t) => {
  const { app, session, projectId } = await projectWhileProjectsLag(t);
  const key = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name: 'first' } });
  t.equal(key.status, 200, 'a key is created for it');
  const { key_id: keyId, key: secret } = (await key.json()) as { key_id: string; key: string };
  t.equal((await app.platform(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: bearer(secret), json: 'dark' })).status, 200, 'the key works');
  const revoked = await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(session) });
  t.equal(revoked.status, 200, 'and is revoked');
  t.equal((await app.platform(`/projects/${projectId}/config`, { headers: bearer(secret) })).status, 401, 'at once');
  // Isolation holds on the log as on the read model.
  const stranger = await sessionToken({ tenant_id: 'tenant-stranger' });
  t.equal((await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(stranger), json: {} })).status, 404, 'another tenant: 404');
  t.equal((await app.platform(`/projects/${projectId}/keys/${keyId}`, { method: 'DELETE', headers: bearer(stranger) })).status, 404);
  t.equal((await app.platform(`/projects/${crypto.randomUUID()}/keys`, { method: 'POST', headers: bearer(session), json: {} })).status, 404, 'no such project: 404');
});

t.test('listing a new project\'s keys with X-Min-Position waits for the projects read model too, not only for api-keys', async (t) => {
  const { app, projects, session, projectId, position } = await projectWhileProjectsLag(t);
  let answered = false;
  const listing = app.platform(`/projects/${projectId}/keys`, { headers: { ...bearer(session), 'X-Min-Position': position } })
    .finally(() => { answered = true; });
  await until('the listing answers or waits', () => answered || app.pendingWaits() > 0);
  t.notOk(answered, 'not answered (a 404) while the projects read model lacks the project');
  await projects.start();
  const res = await listing;
  t.equal(res.status, 200, 'answered once the projects read model has the project');
  t.same(await res.json(), []);
});

import t, { type Test } from 'tap';
import { connect } from 'node:net';
import { bearer, projectWithKey, sessionToken, startTestCairn, type TestCairn } from '../support/cairn.js';
import { until } from '../support/logs.js';

/**
 * One read model held back while the others move on: the projects read model lags behind a project just
 * created (POST /projects then answers from its event). Queries must wait for every read model they read
 * (their readModels), and commands, which take no X-Min-Position, must not depend on one.
 */

/** Long enough for a restarted runner to catch up inside a wait on a busy machine; POST /projects waits this long. */
const TIMEOUT_MS = 3_000;

async function projectWhileProjectsLag(t: Test) {
  const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: String(TIMEOUT_MS) });
  // Paused (ProjectionHost.pause) to hold its read model back; resumed before the app stops (stopping waits for
  // every read model to reach the log's head).
  t.teardown(async () => { await app.projections.resume('projects').catch(() => undefined); await app.stop(); });
  await app.projections.pause('projects');
  const session = await sessionToken({ tenant_id: 'tenant-lagging' });
  const created = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'Lagging' } });
  t.equal(created.status, 200, 'created, answered from its event');
  const { project_id: projectId } = (await created.json()) as { project_id: string };
  t.equal(await app.reads.get('projects', projectId), undefined, 'the projects read model does not have it');
  return { app, session, projectId, position: created.headers.get('x-event-position')! };
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
  const { app, session, projectId, position } = await projectWhileProjectsLag(t);
  let answered = false;
  const listing = app.platform(`/projects/${projectId}/keys`, { headers: { ...bearer(session), 'X-Min-Position': position } })
    .finally(() => { answered = true; });
  await until('the listing answers or waits', () => answered || app.pendingWaits() > 0);
  t.notOk(answered, 'not answered (a 404) while the projects read model lacks the project');
  await app.projections.resume('projects');
  const res = await listing;
  t.equal(res.status, 200, 'answered once the projects read model has the project');
  t.same(await res.json(), []);
});

t.test('X-Min-Position and min_position together: the request waits for the later of the two', async (t) => {
  const { app, session, projectId, position } = await projectWhileProjectsLag(t);
  let answered = false;
  // The header names an early position, the parameter the project's: taking either one alone (the header, as
  // before) would answer 404 at once.
  const listing = app.platform(`/projects/${projectId}/keys?min_position=${position}`, { headers: { ...bearer(session), 'X-Min-Position': '0' } })
    .finally(() => { answered = true; });
  await until('the listing answers or waits', () => answered || app.pendingWaits() > 0);
  t.notOk(answered, 'waiting for the parameter\'s position');
  await app.projections.resume('projects');
  t.equal((await listing).status, 200);
  const invalid = await app.platform(`/projects/${projectId}/keys?min_position=abc`, { headers: { ...bearer(session), 'X-Min-Position': position } });
  t.equal(invalid.status, 400, 'each is checked: a malformed parameter is refused beside a valid header');
  t.match(await invalid.json(), { errors: [{ location: 'query.min_position' }] });
});

t.test('a key whose creation answered before the api-keys read model had it works with X-Min-Position, on commands too', async (t) => {
  const app = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: String(TIMEOUT_MS) });
  t.teardown(async () => { await app.projections.resume('api-keys').catch(() => undefined); await app.stop(); });
  const session = await sessionToken({ tenant_id: 'tenant-new-key' });
  const project = await app.platform('/projects', { method: 'POST', headers: bearer(session), json: { name: 'New key' } });
  const { project_id: projectId } = (await project.json()) as { project_id: string };
  await app.projections.pause('api-keys');
  const created = await app.platform(`/projects/${projectId}/keys`, { method: 'POST', headers: bearer(session), json: { name: 'late' } });
  t.equal(created.status, 200, 'the key is returned although its read model did not apply it in time');
  const { key } = (await created.json()) as { key: string };
  const position = created.headers.get('x-event-position')!;
  const put = (headers: Record<string, string> = {}) => app.platform(`/projects/${projectId}/config/theme`, { method: 'PUT', headers: { ...bearer(key), ...headers }, json: 'dark' });
  t.equal((await put()).status, 401, 'without X-Min-Position: judged as the read model knows it (not yet)');
  let answered = false;
  const waiting = put({ 'X-Min-Position': position }).finally(() => { answered = true; });
  await until('the command answers or waits', () => answered || app.pendingWaits() > 0);
  t.notOk(answered, 'with the key\'s X-Event-Position: authentication waits for the api-keys read model');
  await app.projections.resume('api-keys');
  t.equal((await waiting).status, 200, 'and the key works once it has it');
  t.equal((await put({ 'X-Min-Position': 'abc' })).status, 200, 'a malformed position is left to the route (a command ignores the header)');
});

t.test('a body-less PUT is told its body is missing, not that its content type is wrong', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { projectId, key } = await projectWithKey(app, 'tenant-no-body');
  const { hostname, port } = new URL(app.platformUrl);
  // Neither Content-Length nor Transfer-Encoding: fetch cannot send that, a raw request can (curl -X PUT does).
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(`PUT /api/v1/projects/${projectId}/config/theme HTTP/1.1\r\nHost: x\r\n`
      + `Authorization: Bearer ${key}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n`));
    let text = '';
    socket.on('data', (chunk) => { text += chunk; }).on('end', () => resolve(text)).on('error', reject);
  });
  t.match(answer, /^HTTP\/1\.1 400 /);
  t.match(answer, /"detail":"request body is required"/);
});

import t from 'tap';
import { bearer, projectWithKey, startTestCairn } from '../support/cairn.js';

t.test('smoke', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const { key, projectId } = await projectWithKey(app);
  const res = await app.platform('/agents', { method: 'POST', headers: bearer(key), json: { name: 'Ava', big5: { openness: 1, conscientiousness: 0, extraversion: 0.5, agreeableness: 0.5, neuroticism: 0.2 } } });
  const body = await res.json();
  t.equal(res.status, 200, JSON.stringify(body));
  const pos = res.headers.get('x-event-position');
  const got = await app.platform(`/agents/Ava`, { headers: { ...bearer(key), 'X-Min-Position': pos! } });
  t.equal(got.status, 200);
  t.equal((await got.json()).project_id, projectId);
});

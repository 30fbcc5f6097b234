// The tally tour in Node.js: plain counters with ioredis (pinned by package-lock.json),
// derived counters over the HTTP API with fetch (built into Node 18+).
//
//   npm ci && TALLY_HOST=127.0.0.1 TALLY_PORT=6380 TALLY_HTTP_PORT=6381 node tour.mjs
//
// Run it against a fresh tallyd (`make run DATA=$(mktemp -d)`): it prints
// ../expected-output.txt.
import Redis from 'ioredis';

const host = process.env.TALLY_HOST ?? '127.0.0.1';
const port = Number(process.env.TALLY_PORT ?? 6380);
const api = `http://${host}:${process.env.TALLY_HTTP_PORT ?? 6381}`;

const DEFINITIONS = `
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
`;

// One call to the HTTP API: the decoded JSON reply, or an Error with tally's message.
async function call(method, path, body, headers = {}) {
  const response = await fetch(api + path, {
    method,
    headers,
    body: typeof body === 'string' || body === undefined ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(10000),
  });
  const reply = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${reply.error}`);
  return reply;
}

// A change: post `id` was created, published.
const post = (id, userId, blogId) => ({
  source: 'posts',
  new: { id, user_id: userId, blog_id: blogId, is_published: true },
});
const pairs = (items) => items.map(({ key, value }) => `${key}=${value}`).join(' ');

const redis = new Redis({ host, port });
try {
  // 1. A hot counter: many increments at once (ioredis pipelines them), one exact read.
  await Promise.all(Array.from({ length: 100 }, () => redis.incr('likes:post:7')));
  console.log(`likes:post:7 = ${await redis.get('likes:post:7')} after 100 increments`);

  // 2. A fixed-window rate limit: the first call of a window starts its 60 s clock (NX).
  const verdicts = [];
  for (let i = 0; i < 5; i++) {
    const calls = await redis.call('INCRBYEX', 'api:calls:alice', 1, 'EX', 60, 'NX');
    verdicts.push(calls <= 3 ? 'allowed' : 'denied');
  }
  console.log(`rate limit api:calls:alice, 3 a minute: ${verdicts.join(' ')}`);

  // 3. A derived counter: defined once as SQL, kept from the changes the app pushes. A change
  //    sent again with the same idempotency key is counted once.
  const { results } = await call('POST', '/v1/definitions', DEFINITIONS);
  console.log(`definitions: ${results.join(', ')}`);
  for (const label of ['push', 'resend']) {
    const reply = await call('POST', '/v1/changes', post(1, 3, 7), { 'Idempotency-Key': 'post-1' });
    console.log(`${label} post-1: applied ${reply.applied}, duplicates ${reply.duplicates}`);
  }
  const batch = await call('POST', '/v1/changes?id=posts-2-4', [post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)]);
  console.log(`push posts 2-4: applied ${batch.applied}, duplicates ${batch.duplicates}`);
  console.log(`blog_posts:7:3 = ${(await call('GET', '/v1/value/blog_posts/7/3')).value}`);

  // 4. A family (every author of blog 7) and its top-K.
  console.log(`family blog_posts:7: ${pairs((await call('GET', '/v1/list/blog_posts/7')).items)}`);
  console.log(`top 1 of blog 7: ${pairs((await call('GET', '/v1/top/blog_posts/7?k=1')).items)}`);

  // 5. Follow a counter live: its current value first, then each new value. A subscribed
  //    connection takes no other commands, hence a second one.
  const subscriber = new Redis({ host, port });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`live: only ${seen.join(' ')}`)), 10000);
    subscriber.on('message', (channel, value) => {
      seen.push(value);
      if (seen.length === 3) {
        clearTimeout(timer);
        resolve();
      } else {
        redis.incr('likes:post:7').catch(reject);
      }
    });
    subscriber.subscribe('likes:post:7').catch(reject);
  });
  subscriber.disconnect();
  console.log(`live likes:post:7: ${seen.join(' ')}`);
} finally {
  redis.disconnect();
}

// The tally tour in a web page: derived counters over the HTTP API with fetch, a counter
// followed live with EventSource (Server-Sent Events) and with a WebSocket. Plain counters
// (INCR, INCRBYEX) are the Redis protocol's, which a browser does not speak; a page pushes
// changes and reads and follows counters.
//
// The page must come from the origin of tallyd's HTTP API (tallyd sends no CORS headers):
// the calls below use relative URLs. It writes the tour into <pre id="output"> and sets
// <body data-done="ok"> (or "error: ...") at the end; tests/e2e/test_examples.py runs it in
// chromium and compares the text with expected-output.txt.
const DEFINITIONS = `
CREATE SOURCE posts (id bigint, user_id bigint, blog_id bigint, is_published boolean);
CREATE COUNTER blog_posts AS
  SELECT blog_id, user_id, count(*) FROM posts WHERE is_published GROUP BY blog_id, user_id;
`;

const output = document.getElementById('output');
const print = (line) => { output.textContent += `${line}\n`; };

// One call to the HTTP API: the decoded JSON reply, or an Error with tally's message.
async function call(method, path, body, headers = {}) {
  const response = await fetch(path, {
    method,
    headers,
    body: typeof body === 'string' || body === undefined ? body : JSON.stringify(body),
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

// Follows `key` over `transport` ('EventSource' or 'WebSocket'): collects `count` values,
// calling next() after each but the last (which makes the counter move on).
function follow(transport, key, count, next) {
  return new Promise((resolve, reject) => {
    const seen = [];
    const url = `/v1/${transport === 'EventSource' ? 'events' : 'subscribe'}?key=${encodeURIComponent(key)}`;
    const source = transport === 'EventSource'
      ? new EventSource(url)
      : new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${url}`);
    const timer = setTimeout(() => { source.close(); reject(new Error(`${transport}: only ${seen}`)); }, 10000);
    source.onmessage = (event) => {
      seen.push(JSON.parse(event.data).value);
      if (seen.length < count) {
        next(seen.length).catch(reject);
        return;
      }
      clearTimeout(timer);
      source.close();
      resolve(seen);
    };
    source.onerror = () => { clearTimeout(timer); source.close(); reject(new Error(`${transport} failed`)); };
  });
}

async function tour() {
  // A derived counter: defined once as SQL, kept from the changes the page pushes. A change
  // sent again with the same idempotency key (a retried click) is counted once.
  const { results } = await call('POST', '/v1/definitions', DEFINITIONS);
  print(`definitions: ${results.join(', ')}`);
  for (const label of ['push', 'resend']) {
    const reply = await call('POST', '/v1/changes', post(1, 3, 7), { 'Idempotency-Key': 'post-1' });
    print(`${label} post-1: applied ${reply.applied}, duplicates ${reply.duplicates}`);
  }
  const batch = await call('POST', '/v1/changes?id=posts-2-4', [post(2, 5, 7), post(3, 5, 7), post(4, 5, 8)]);
  print(`push posts 2-4: applied ${batch.applied}, duplicates ${batch.duplicates}`);
  print(`blog_posts:7:3 = ${(await call('GET', '/v1/value/blog_posts/7/3')).value}`);

  // A family (every author of blog 7) and its top-K.
  print(`family blog_posts:7: ${pairs((await call('GET', '/v1/list/blog_posts/7')).items)}`);
  print(`top 1 of blog 7: ${pairs((await call('GET', '/v1/top/blog_posts/7?k=1')).items)}`);

  // Follow a counter live: its current value first, then each new value (posts 5, 6, 7 by
  // author 5 in blog 7 make it move).
  let next = 5;
  const newPost = () => call('POST', '/v1/changes', post(next++, 5, 7));
  print(`live blog_posts:7:5 (EventSource): ${(await follow('EventSource', 'blog_posts:7:5', 3, newPost)).join(' ')}`);
  print(`live blog_posts:7:5 (WebSocket): ${(await follow('WebSocket', 'blog_posts:7:5', 2, newPost)).join(' ')}`);
}

tour().then(
  () => { document.body.dataset.done = 'ok'; },
  (error) => { print(String(error)); document.body.dataset.done = `error: ${error.message}`; },
);

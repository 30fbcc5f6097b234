// The dashboard in a real browser, driven by test_dashboard.py: Playwright (playwright-core
// from dashboard/node_modules) drives Debian's /usr/bin/chromium, headless, against a
// running tallyd started with --requirepass. It signs in, watches a plain counter and a
// derived counter's group, pushes increments (INCRBY with redis-cli, changes with POST
// /v1/changes), and checks that the page shows the counters' values, rate points above
// zero, the top-K of a family, the definitions and the source; then it saves a screenshot.
//
// Environment: DASHBOARD_URL, TALLY_PORT (Redis protocol), TALLY_PASSWORD, SCREENSHOT (a
// .png path), TALLY_DASHBOARD_DIR (where node_modules is), CHROMIUM (default
// /usr/bin/chromium). The last line printed is a JSON summary for the Python side. Every wait
// is bounded; the browser is closed on every path.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(join(process.env.TALLY_DASHBOARD_DIR, 'package.json'));
const { chromium } = require('playwright-core');

const URL = process.env.DASHBOARD_URL;
const PASSWORD = process.env.TALLY_PASSWORD;
const WAIT_MS = 20000;
const PLAIN = 'likes:post:7';
const GROUP = 'blog_posts:7:3';
const HOT = 'page:views';  // written far more often than anything else

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function redis(...args) {
  return execFileSync('redis-cli', ['-p', process.env.TALLY_PORT, '--no-auth-warning',
    '-a', PASSWORD, ...args], { encoding: 'utf8', timeout: 10000 }).trim();
}

async function api(method, path, body) {
  const response = await fetch(new globalThis.URL(path, URL), {
    method,
    headers: { Authorization: `Bearer ${PASSWORD}` },
    body,
    signal: AbortSignal.timeout(10000),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

function post(id, blog) {
  return JSON.stringify({ source: 'posts', id: `post-${id}`, new: {
    id, user_id: 7, blog_id: blog, rating: 4, is_published: true, is_deleted: false } });
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // As root, chromium runs only without its sandbox; a container's /dev/shm may be tiny.
  args: ['--disable-dev-shm-usage',
         ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [])],
  timeout: 30000,
});
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (error) => errors.push(error.message));

  // The page loads without the password; its data calls ask for it once.
  await page.goto(URL);
  await page.waitForSelector('#login[open]');
  await page.fill('#login-password', 'not-the-password');
  await page.press('#login-password', 'Enter');
  await page.waitForSelector('#login-error:not([hidden])');
  await page.fill('#login-password', PASSWORD);
  await page.press('#login-password', 'Enter');
  await page.waitForSelector('#login:not([open])', { state: 'attached' });
  check(await page.evaluate(() => sessionStorage.getItem('tally.token')) === PASSWORD,
    'the password is not kept in sessionStorage');

  for (const key of [PLAIN, GROUP]) {
    await page.fill('#watch-key', key);
    await page.press('#watch-key', 'Enter');
    await page.waitForSelector(`.card[data-key="${key}"]`);
  }

  // Increments spread over a few seconds, so that several of the page's once-a-second
  // samples see the counters grow.
  for (let round = 1; round <= 8; round++) {
    redis('INCRBY', PLAIN, String(round * 3));
    await api('POST', '/v1/changes', post(100 + round, round % 2 ? 3 : 4));
    await sleep(400);
  }
  const expected = { [PLAIN]: Number(redis('GET', PLAIN)), [GROUP]: Number(redis('GET', GROUP)) };
  check(expected[PLAIN] === 108 && expected[GROUP] === 4, `unexpected counter values ${JSON.stringify(expected)}`);

  // The values shown equal the counters' values.
  await page.waitForFunction((want) => Object.entries(want).every(([key, value]) =>
    document.querySelector(`.card[data-key="${key}"] .value`)?.dataset.value === String(value)),
  expected);

  // Each chart has rate points, some of them above zero.
  await page.waitForFunction((keys) => {
    const shown = window.tallyDashboard.watched();
    return keys.every((key) => {
      const entry = shown.find((e) => e.key === key);
      const points = Number(document.querySelector(`.card[data-key="${key}"] .chart`).dataset.points);
      return entry && points >= 2 && entry.rates.some((rate) => rate > 0);
    });
  }, [PLAIN, GROUP]);

  // Top-K of the family blog_posts:7, as GET /v1/top answers it.
  const top = await api('GET', '/v1/top/blog_posts/7?k=10');
  check(top.items.length === 2, `unexpected top-K ${JSON.stringify(top)}`);
  await page.selectOption('#top-counter', 'blog_posts');
  await page.fill('#top-prefix', '7');
  await page.press('#top-prefix', 'Enter');
  await page.waitForFunction((items) => {
    const rows = [...document.querySelectorAll('#top li[data-key]')];
    return rows.length === items.length && rows.every((row, i) =>
      row.dataset.key === items[i].key && row.dataset.value === String(items[i].value));
  }, top.items);

  // Definitions and the source.
  await page.waitForFunction(() => {
    const names = [...document.querySelectorAll('#definitions [data-counter]')].map((e) => e.dataset.counter);
    return names.includes('blog_posts') && names.includes('author_rating');
  });
  await page.waitForFunction(() => document.querySelector('#source-state')?.textContent === 'push' &&
    document.querySelector('#sources .tables')?.textContent.includes('posts'));

  // The live stream, and the hottest counters where this tallyd reports them (GET /v1/hot):
  // a key written 3,000 times comes first, whatever share of writes the sampler sees.
  const live = await page.getAttribute('#pill-live', 'data-state');
  let hot = false;
  try {
    await api('GET', '/v1/hot');
    hot = true;
  } catch {
    // No /v1/hot: the panel says so instead.
  }
  if (hot) {
    redis('-r', '3000', 'INCR', HOT);
    await page.waitForFunction((key) =>
      document.querySelector('#hot li[data-key]')?.dataset.key === key, HOT);
  }

  const displayed = await page.evaluate(() =>
    Object.fromEntries(window.tallyDashboard.watched().map((e) => [e.key, e.value])));
  await page.screenshot({ path: process.env.SCREENSHOT });
  console.log(`screenshot: ${process.env.SCREENSHOT}`);
  check(errors.length === 0, `errors in the page: ${errors.join('; ')}`);
  console.log(JSON.stringify({ displayed, expected, live, hot, top: top.items }));
} finally {
  await browser.close();
}

// The dashboard in a real browser, driven by test_dashboard.py: Playwright (playwright-core
// from dashboard/node_modules) drives Debian's /usr/bin/chromium, headless, against a
// running tallyd started with --requirepass. Two scenarios (SCENARIO):
//
// "main" (the default): two counters are written before the page opens. It signs in and
// finds them watched by itself (the hottest counters), with their live values and rate
// points. Then the user's choice: it adds a plain counter and a derived counter's group and
// removes the automatic cards, pushes increments (INCRBY with redis-cli, changes with POST
// /v1/changes), and checks that the page shows the counters' values, rate points above
// zero, the top-K of a family, the definitions and the source; a far hotter counter does not
// change the user's cards, which a reload brings back as they were; "choose automatically"
// watches the hottest counters again, also after a reload. It saves a screenshot.
//
// "restart": tallyd was restarted after changes were pushed, so nothing is hot; the first
// derived counter (by name, ALL_POSTS, which has no GROUP BY) has one group. The page
// watches that group by itself and lists it (definitions: 1 group; top groups); once a
// counter is written, the page watches it instead.
//
// Environment: DASHBOARD_URL, TALLY_PORT (Redis protocol), TALLY_PASSWORD (the scenario's
// writes use it), TALLY_PAGE_TOKEN (what the page signs in with: "user:password" for a user;
// default TALLY_PASSWORD), SCREENSHOT (a .png path; "main" only), SCENARIO, TALLY_DASHBOARD_DIR (where node_modules is), CHROMIUM
// (default /usr/bin/chromium), DASHBOARD_SELF_SIGNED (an HTTPS URL with the test's own CA).
// The last line printed is a JSON summary for the Python side.
// Every wait is bounded; the browser is closed on every path.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(join(process.env.TALLY_DASHBOARD_DIR, 'package.json'));
const { chromium } = require('playwright-core');

const URL = process.env.DASHBOARD_URL;
const PASSWORD = process.env.TALLY_PASSWORD;
const PAGE_TOKEN = process.env.TALLY_PAGE_TOKEN || PASSWORD;
const WAIT_MS = 20000;
const PLAIN = 'likes:post:7';
const GROUP = 'blog_posts:7:3';
const HOT = 'page:views';  // written far more often than anything else
const FIRST = ['visits:home', 'visits:about'];  // written before the page opens
const ALL_POSTS = 'all_posts';  // "restart": a derived counter without GROUP BY

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function redis(...args) {
  return execFileSync('redis-cli', ['-p', process.env.TALLY_PORT, '--no-auth-warning',
    '-a', PASSWORD, ...args], { encoding: 'utf8', timeout: 60000 }).trim();
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

// The watched cards' keys, in order.
const cardKeys = (page) => page.evaluate(() =>
  [...document.querySelectorAll('#cards .card')].map((card) => card.dataset.key));

// Waits until the cards show exactly `keys` (in any order) with these values.
async function waitForCards(page, values) {
  await page.waitForFunction((want) => {
    const cards = [...document.querySelectorAll('#cards .card')];
    return cards.length === Object.keys(want).length && cards.every((card) =>
      card.querySelector('.value')?.dataset.value === String(want[card.dataset.key]));
  }, values);
}

// Waits until every card of `keys` has at least two rate points, one of them above zero.
async function waitForRates(page, keys) {
  await page.waitForFunction((want) => {
    const shown = window.tallyDashboard.watched();
    return want.every((key) => {
      const entry = shown.find((e) => e.key === key);
      const points = Number(document.querySelector(`.card[data-key="${key}"] .chart`).dataset.points);
      return entry && points >= 2 && entry.rates.some((rate) => rate > 0);
    });
  }, keys);
}

const storedChoice = (page) => page.evaluate(() => localStorage.getItem('tally.watched'));

// Opens the page and signs in, first with a wrong password.
async function signIn(page) {
  await page.goto(URL);
  await page.waitForSelector('#login[open]');
  await page.fill('#login-password', 'not-the-password');
  await page.press('#login-password', 'Enter');
  await page.waitForSelector('#login-error:not([hidden])');
  // "user:password" goes in the two fields, a password alone in its own.
  const colon = PAGE_TOKEN.indexOf(':');
  await page.fill('#login-user', colon < 0 ? '' : PAGE_TOKEN.slice(0, colon));
  await page.fill('#login-password', colon < 0 ? PAGE_TOKEN : PAGE_TOKEN.slice(colon + 1));
  await page.press('#login-password', 'Enter');
  await page.waitForSelector('#login:not([open])', { state: 'attached' });
  check(await page.evaluate(() => sessionStorage.getItem('tally.token')) === PAGE_TOKEN,
    'the password is not kept in sessionStorage');
}

async function mainScenario(page) {
  // Before the page opens, two counters are written: they are the hottest.
  redis('-r', '400', 'INCR', FIRST[0]);
  redis('-r', '200', 'INCR', FIRST[1]);
  await signIn(page);

  // The first view watches them by itself, live, nothing stored as the user's choice.
  const firstValues = { [FIRST[0]]: 400, [FIRST[1]]: 200 };
  await waitForCards(page, firstValues);
  check(await page.evaluate(() => window.tallyDashboard.automatic()), 'not automatic at first');
  check(/^automatic: the hottest counters$/.test(await page.textContent('#watch-mode')),
    `watch mode says ${await page.textContent('#watch-mode')}`);
  check(await page.isHidden('#watch-auto'), '"choose automatically" shown while automatic');
  check(await storedChoice(page) === null, 'the automatic choice was stored');
  for (let round = 1; round <= 6; round++) {
    redis('INCRBY', FIRST[0], '5');
    await sleep(400);
  }
  await waitForRates(page, [FIRST[0]]);
  await waitForCards(page, { [FIRST[0]]: 430, [FIRST[1]]: 200 });
  const firstView = Object.fromEntries(
    (await page.evaluate(() => window.tallyDashboard.watched())).map((e) => [e.key, e.value]));

  // The user's choice: adding a key keeps the cards on screen and makes them theirs.
  await page.fill('#watch-key', PLAIN);
  await page.press('#watch-key', 'Enter');
  await page.waitForSelector(`.card[data-key="${PLAIN}"]`);
  check(!(await page.evaluate(() => window.tallyDashboard.automatic())), 'still automatic');
  check(await page.textContent('#watch-mode') === 'your choice', 'watch mode not "your choice"');
  await page.waitForSelector('#watch-auto:not([hidden])');
  check(JSON.stringify(JSON.parse(await storedChoice(page))) ===
    JSON.stringify([...FIRST, PLAIN]), `stored ${await storedChoice(page)}`);
  for (const key of FIRST) {
    await page.click(`.card[data-key="${key}"] .remove`);
    await page.waitForSelector(`.card[data-key="${key}"]`, { state: 'detached' });
  }
  await page.fill('#watch-key', GROUP);
  await page.press('#watch-key', 'Enter');
  await page.waitForSelector(`.card[data-key="${GROUP}"]`);
  check(await storedChoice(page) === JSON.stringify([PLAIN, GROUP]),
    `stored ${await storedChoice(page)}`);

  // Increments spread over a few seconds, so that several of the page's once-a-second
  // samples see the counters grow.
  for (let round = 1; round <= 8; round++) {
    redis('INCRBY', PLAIN, String(round * 3));
    await api('POST', '/v1/changes', post(100 + round, round % 2 ? 3 : 4));
    await sleep(400);
  }
  const expected = { [PLAIN]: Number(redis('GET', PLAIN)), [GROUP]: Number(redis('GET', GROUP)) };
  check(expected[PLAIN] === 108 && expected[GROUP] === 4, `unexpected counter values ${JSON.stringify(expected)}`);

  // The values shown equal the counters' values; each chart has rate points above zero.
  await waitForCards(page, expected);
  await waitForRates(page, [PLAIN, GROUP]);

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
  redis('-r', '3000', 'INCR', HOT);
  await page.waitForFunction((key) =>
    document.querySelector('#hot li[data-key]')?.dataset.key === key, HOT);
  const displayed = await page.evaluate(() =>
    Object.fromEntries(window.tallyDashboard.watched().map((e) => [e.key, e.value])));
  // The user's cards stay theirs, however hot another counter is; a reload brings them back.
  check(JSON.stringify(await cardKeys(page)) === JSON.stringify([PLAIN, GROUP]),
    `the user's cards changed: ${await cardKeys(page)}`);
  await page.reload();
  await waitForCards(page, expected);
  check(JSON.stringify(await cardKeys(page)) === JSON.stringify([PLAIN, GROUP]),
    `after a reload the cards are ${await cardKeys(page)}`);
  check(await page.textContent('#watch-mode') === 'your choice', 'the reload lost the choice');
  const reloaded = await cardKeys(page);

  // Back to automatic: the hottest counters, HOT first among them; a reload keeps it.
  await page.click('#watch-auto');
  await page.waitForSelector(`.card[data-key="${HOT}"]`);
  check(await storedChoice(page) === null, 'the choice is still stored');
  const hot = await api('GET', '/v1/hot');
  const hotKeys = hot.counters.map((c) => c.key);
  check(hotKeys[0] === HOT, `GET /v1/hot: ${JSON.stringify(hot)}`);
  const automatic = await cardKeys(page);
  check(automatic.length === Math.min(6, hotKeys.length) &&
    automatic.every((key) => hotKeys.includes(key)), `automatic cards ${automatic}, hot ${hotKeys}`);
  await page.reload();
  await page.waitForSelector(`.card[data-key="${HOT}"]`);
  check(await page.evaluate(() => window.tallyDashboard.automatic()), 'not automatic after a reload');
  await page.waitForFunction((key) => Number(
    document.querySelector(`.card[data-key="${key}"] .value`)?.dataset.value) >= 3000, HOT);
  for (let round = 1; round <= 6; round++) {
    redis('INCRBY', HOT, String(round * 10));
    await sleep(400);
  }
  await waitForRates(page, [HOT]);

  await page.screenshot({ path: process.env.SCREENSHOT });
  console.log(`screenshot: ${process.env.SCREENSHOT}`);
  const protocol = await page.evaluate(() => globalThis.location.protocol);
  return { displayed, expected, live, first_view: firstView, reloaded, automatic,
           top: top.items, protocol };
}

async function restartScenario(page) {
  await signIn(page);
  // Nothing is hot: the only group of the first counter is watched.
  const value = Number(redis('GET', ALL_POSTS));
  check(value > 0, `${ALL_POSTS} is ${value}`);
  await waitForCards(page, { [ALL_POSTS]: value });
  const mode = await page.textContent('#watch-mode');
  check(mode === `automatic: the largest groups of ${ALL_POSTS}`, `watch mode says ${mode}`);
  // Its definition counts its one group, and its top groups list it.
  await page.waitForFunction((name) => document.querySelector(
    `#definitions [data-counter="${name}"] .def-groups`)?.textContent === '1', ALL_POSTS);
  await page.selectOption('#top-counter', ALL_POSTS);
  await page.waitForFunction(([name, want]) => {
    const rows = [...document.querySelectorAll('#top li[data-key]')];
    return rows.length === 1 && rows[0].dataset.key === name &&
      rows[0].dataset.value === String(want);
  }, [ALL_POSTS, value]);
  // A counter written now is hot: the page watches it instead.
  redis('-r', '50', 'INCR', HOT);
  await waitForCards(page, { [HOT]: 50 });
  return { all_posts: value, mode };
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
  // DASHBOARD_SELF_SIGNED: an HTTPS page whose certificate's CA the test made (node trusts
  // it through NODE_EXTRA_CA_CERTS; chromium is told to take it).
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 },
                                       ignoreHTTPSErrors: !!process.env.DASHBOARD_SELF_SIGNED });
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (error) => errors.push(error.message));
  const summary = process.env.SCENARIO === 'restart' ? await restartScenario(page)
    : await mainScenario(page);
  check(errors.length === 0, `errors in the page: ${errors.join('; ')}`);
  console.log(JSON.stringify(summary));
} finally {
  await browser.close();
}

// Runs examples/browser/ in a real browser for test_examples.py: Playwright (playwright-core
// from dashboard/node_modules) drives Debian's chromium, headless. The page is opened at a
// URL on tallyd's own HTTP origin, whose two files are answered from examples/browser/ (as a
// web app's server would serve them next to the API); everything else the page asks for
// (fetch, EventSource, WebSocket) goes to tallyd itself.
//
// Environment: TALLY_HTTP (http://127.0.0.1:<port>), EXAMPLE_DIR (examples/browser),
// TALLY_DASHBOARD_DIR (where node_modules is), CHROMIUM (default /usr/bin/chromium).
// Prints one line of JSON: {"done": "ok" | "error: ...", "output": "<the page's text>"}.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(join(process.env.TALLY_DASHBOARD_DIR, 'package.json'));
const { chromium } = require('playwright-core');

const origin = process.env.TALLY_HTTP;
const files = {
  'index.html': 'text/html; charset=utf-8',
  'tour.js': 'text/javascript; charset=utf-8',
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // As root, chromium runs only without its sandbox; a container's /dev/shm may be tiny. The
  // page's document comes from Playwright's interception, not from the network, so Chromium's
  // Local Network Access checks would take it for a public page and block its WebSocket to
  // 127.0.0.1; a page served by a local server is not blocked, hence the flag.
  args: ['--disable-dev-shm-usage', '--disable-features=LocalNetworkAccessChecks',
         ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [])],
  timeout: 30000,
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.route(`${origin}/examples/browser/*`, (route) => {
    const name = new URL(route.request().url()).pathname.split('/').pop();
    if (!(name in files)) return route.fulfill({ status: 404, body: 'not an example file' });
    return route.fulfill({ status: 200, contentType: files[name],
                           body: readFileSync(join(process.env.EXAMPLE_DIR, name)) });
  });
  await page.goto(`${origin}/examples/browser/index.html`);
  await page.waitForSelector('body[data-done]', { timeout: 30000 });
  const done = await page.getAttribute('body', 'data-done');
  const output = await page.textContent('#output');
  console.log(JSON.stringify({ done: errors.length ? `page errors: ${errors}` : done, output }));
} finally {
  await browser.close();
}

// Builds the dashboard into OUT_DIR (the first argument):
//   index.html                  from src/index.html, naming the bundles below
//   assets/app-<hash>.js        src/main.js and its imports (uPlot included), minified
//   assets/app-<hash>.css       src/style.css and uPlot's stylesheet
//   manifest.tsv                one line per file tallyd serves:
//                               <url path> TAB <file> TAB <content type> TAB <Cache-Control>
// The bundles are named by their content, so tallyd may let browsers keep them for a year;
// index.html is revalidated on every load (ETag). Nothing is downloaded: esbuild and uPlot
// come from node_modules, which `make deps` installs with `npm ci`.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs OUT_DIR');
  process.exit(2);
}
for (const name of ['esbuild', 'uplot']) {
  if (!existsSync(join(here, 'node_modules', name, 'package.json'))) {
    console.error(`dashboard: ${join(here, 'node_modules', name)} is missing: run \`make deps\` ` +
                  `(it runs \`npm ci\` in ${here})`);
    process.exit(1);
  }
}
const esbuild = await import('esbuild');
// uPlot's copyright notice is a plain comment, which minifying drops: its MIT licence asks
// that it travel with the code.
const uplot = JSON.parse(readFileSync(join(here, 'node_modules', 'uplot', 'package.json'), 'utf8'));

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });

const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: 'src/main.js' },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome100', 'firefox100', 'safari15'],
  entryNames: '[name]-[hash]',
  outdir: join(out, 'assets'),
  metafile: true,
  banner: {
    js: `/*! tally dashboard; includes uPlot ${uplot.version}, (c) Leon Sorokin, MIT License */`,
  },
  logLevel: 'warning',
});

const IMMUTABLE = 'public, max-age=31536000, immutable';
const TYPES = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' };
const manifest = [];
const names = {};
for (const file of Object.keys(result.metafile.outputs)) {
  const name = basename(file);
  const extension = name.slice(name.lastIndexOf('.'));
  names[`app${extension}`] = `/assets/${name}`;
  manifest.push([`/assets/${name}`, relative(out, join(here, file)), TYPES[extension], IMMUTABLE]);
}

let html = readFileSync(join(here, 'src', 'index.html'), 'utf8');
html = html.replace(/\{\{(app\.(?:js|css))\}\}/g, (whole, name) => {
  if (!names[name]) throw new Error(`src/index.html names ${name}, which the build did not make`);
  return names[name];
});
writeFileSync(join(out, 'index.html'), html);
manifest.unshift(['/', 'index.html', 'text/html; charset=utf-8', 'no-cache']);

writeFileSync(join(out, 'manifest.tsv'), manifest.map((row) => row.join('\t')).join('\n') + '\n');
console.log(`dashboard: built ${manifest.length} files into ${out}`);

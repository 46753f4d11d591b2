#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// A tandem trace opened in a real viewer: speedscope (its npm release build) in headless
// Chromium, driven by playwright-core. Serves speedscope and the trace on a free localhost port,
// opens index.html#profileURL=..., and checks what the page shows: every worker track (and GPU
// track) that has spans in the trace is among speedscope's profiles, by its thread name; the
// sandwich view of the profiles lists the trace's task function names; and speedscope's import
// warned of nothing (an end it could not match to its begin, a frame left open).
//
//   node tests/trace_speedscope.js TRACE [--modules DIR] [--chromium PATH] [--screenshot PNG]
//                                        [--allow-warnings]
//
// DIR: the node_modules holding speedscope and playwright-core (default build-npm/node_modules,
// installed by scripts/deps.sh). --allow-warnings: speedscope's import warnings are printed, not
// failed on. Exits 77 (skipped) when Chromium or those modules are missing.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');

const SKIP = 77;
const RUNTIME_SPANS = new Set(['parked', 'spawn', 'resume', 'launch', 'done']); // not task runs

function args() {
  const a = process.argv.slice(2);
  const o = {
    modules: path.join(__dirname, '..', 'build-npm', 'node_modules'),
    chromium: process.env.CHROMIUM || '/usr/bin/chromium',
  };
  for (let i = 0; i < a.length; i++) {
    if (a[i] === '--modules') o.modules = a[++i];
    else if (a[i] === '--chromium') o.chromium = a[++i];
    else if (a[i] === '--screenshot') o.screenshot = a[++i];
    else if (a[i] === '--allow-warnings') o.allowWarnings = true;
    else if (!o.trace) o.trace = a[i];
    else throw new Error(`unknown argument ${a[i]}`);
  }
  if (!o.trace) throw new Error('usage: trace_speedscope.js TRACE [--modules DIR] ' +
                                '[--chromium PATH] [--screenshot PNG] [--allow-warnings]');
  return o;
}

// The trace's events: the object form a stop leaves, or the array form a run writes as it goes,
// unterminated where the run was killed (cut at its last whole line and closed, as the viewers
// read it).
function readEvents(file) {
  const text = fs.readFileSync(file, 'utf8');
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    if (!text.trimStart().startsWith('[')) throw err;
    doc = JSON.parse(text.slice(0, text.lastIndexOf('\n') + 1).trimEnd().replace(/,$/, '') + ']');
  }
  return Array.isArray(doc) ? doc : doc.traceEvents;
}

// What the page must show: the names of the threads that have spans (speedscope makes a
// profile of each), and the task names, most frequent first.
function expected(events) {
  const names = new Map(), spans = new Map(), tasks = new Map();
  for (const e of events) {
    const key = `${e.pid}:${e.tid}`;
    if (e.ph === 'M' && e.name === 'thread_name') names.set(key, e.args.name);
    if (e.ph === 'B' || e.ph === 'X') spans.set(key, (spans.get(key) || 0) + 1);
  }
  for (const e of events) {
    const track = names.get(`${e.pid}:${e.tid}`) || '';
    if (e.ph === 'B' && !RUNTIME_SPANS.has(e.name) && !track.startsWith('GPU '))
      tasks.set(e.name, (tasks.get(e.name) || 0) + 1);
  }
  const tracks = [...spans.keys()].map((k) => names.get(k)).filter(
      (n) => n && (n.startsWith('tandem worker') || n.startsWith('GPU ')));
  // The five most frequent: a trace of many functions would take long to look each up.
  const taskNames = [...tasks.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5).map((t) => t[0]);
  return {tracks, taskNames, profiles: spans.size};
}

function serve(root, trace) {
  const types = {'.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css',
                 '.json': 'application/json', '.wasm': 'application/wasm'};
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url.split(/[?#]/)[0]);
    const file = url === '/trace.json' ? trace
                                       : path.join(root, path.normalize(url === '/' ? 'index.html' : url));
    if (url !== '/trace.json' && !file.startsWith(root)) {
      res.writeHead(403);
      res.end();
      return;
    }
    fs.readFile(file, (err, data) => {
      if (err) {
        res.writeHead(404);
        res.end();
        return;
      }
      res.writeHead(200, {'Content-Type': types[path.extname(file)] || 'application/octet-stream'});
      res.end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function main() {
  const o = args();
  const root = path.join(o.modules, 'speedscope', 'dist', 'release');
  const pw = path.join(o.modules, 'playwright-core');
  for (const [what, p] of [['Chromium', o.chromium], ['speedscope', path.join(root, 'index.html')],
                           ['playwright-core', pw]])
    if (!fs.existsSync(p)) {
      console.log(`trace_speedscope: ${what} not found (${p}): skipped; scripts/deps.sh installs it`);
      return SKIP;
    }
  const {chromium} = require(pw);
  const speedscope = JSON.parse(fs.readFileSync(path.join(o.modules, 'speedscope', 'package.json')));
  const want = expected(readEvents(o.trace));
  if (want.tracks.length === 0 || want.taskNames.length === 0)
    throw new Error(`${o.trace}: no worker track with task spans to look for`);

  const server = await serve(root, path.resolve(o.trace));
  let browser;
  const warnings = [];
  try {
    // A fresh, empty profile (--user-data-dir) of playwright's own, removed at the close.
    browser = await chromium.launch({
      executablePath: o.chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const page = await browser.newPage({viewport: {width: 1400, height: 900}});
    page.on('console', (m) => {
      if (m.type() === 'warning' || m.type() === 'error') warnings.push(m.text());
    });
    page.on('pageerror', (err) => warnings.push(`page error: ${err.message}`));
    const base = `http://127.0.0.1:${server.address().port}`;
    await page.goto(`${base}/#profileURL=${encodeURIComponent(`${base}/trace.json`)}`);
    // The toolbar names the profile shown: "tandem (pid P), <thread name> (tid T) (1/N)".
    const title = page.getByText(`(1/${want.profiles})`);
    await title.waitFor({timeout: 60000});

    // The profile list: one row per thread with spans.
    await title.click();
    const list = await page.evaluate(() => document.body.innerText);
    const missingTracks = want.tracks.filter((t) => !new RegExp(`, ${t} \\(tid \\d+\\)`).test(list));
    await title.click(); // closes the list

    // The sandwich view of each profile in turn ('3'; 'n' goes to the next profile): the
    // function table lists the names of the frames.
    await page.keyboard.press('3');
    const shown = new Set();
    for (let i = 0; i < want.profiles; i++) {
      if (i > 0) await page.keyboard.press('n');
      await page.waitForTimeout(200);
      for (const name of want.taskNames)
        if ((await page.getByText(name, {exact: true}).count()) > 0) shown.add(name);
    }
    if (o.screenshot) await page.screenshot({path: o.screenshot});
    const missingTasks = want.taskNames.filter((n) => !shown.has(n));

    const bad = [];
    if (missingTracks.length) bad.push(`tracks not among the profiles: ${missingTracks.join(', ')}`);
    if (missingTasks.length) bad.push(`task names not in the sandwich view: ${missingTasks.join(', ')}`);
    const importWarnings = warnings.filter((w) => !/GL Driver Message|WebGL/.test(w));
    const warned = importWarnings.length ?
        `speedscope warned ${importWarnings.length} times, first: ${importWarnings[0]}` : '';
    if (warned && !o.allowWarnings) bad.push(warned);
    if (bad.length) {
      console.log(`trace_speedscope: FAIL ${o.trace} in speedscope ${speedscope.version}:\n  ` +
                  bad.join('\n  '));
      return 1;
    }
    console.log(`trace_speedscope: OK ${o.trace} in speedscope ${speedscope.version}: ` +
                `${want.profiles} profiles; tracks ${want.tracks.join(', ')}; ` +
                `task names ${want.taskNames.join(', ')}` + (warned ? `; but ${warned}` : ''));
    return 0;
  } finally {
    if (browser) await browser.close();
    server.close();
  }
}

main().then((rc) => process.exit(rc), (err) => {
  console.log(`trace_speedscope: FAIL: ${err.stack || err}`);
  process.exit(1);
});

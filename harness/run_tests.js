// run_tests.js — sandboxd's node test harness (run_tests, issue 17).
//
// Embedded into the daemon at build time (cmake/embed.cmake) and run
// inside the session's container as tenant code, through the ordinary
// execution path. The daemon appends one line calling sbxMain(marker,
// codeB64, testsB64).
//
// The tests use node:test and node:assert. They run in a child process that
// node:test's run() starts, and its event stream gives each test's outcome
// as data (never parsed from text). The harness keeps stdout for its
// records, "<marker> <json>" per line (the marker is random per run); what
// the tests print is written to stderr, which the daemon returns as
// `output`. The test file is the code followed by the tests, so the tests
// see the code's declarations; solution.js (or .mjs) holds the code alone.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ERROR_MAX = 4000;

function errorText(err) {
  if (!err) return null;
  const cause = err.cause !== undefined ? err.cause : err;
  let s = cause && cause.stack ? String(cause.stack) : String(cause && cause.message !== undefined ? cause.message : cause);
  return s.length > ERROR_MAX ? s.slice(0, ERROR_MAX) : s;
}

function sbxMain(marker, codeB64, testsB64) {
  const emit = (rec) => fs.writeSync(1, marker + ' ' + JSON.stringify(rec) + '\n');
  emit({ t: 'start' });
  let file;
  try {
    const code = Buffer.from(codeB64, 'base64').toString('utf8');
    const tests = Buffer.from(testsB64, 'base64').toString('utf8');
    const esm = /^\s*(import|export)\s/m.test(code + '\n' + tests);
    const ext = esm ? '.mjs' : '.js';
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-tests-'));
    fs.writeFileSync(path.join(dir, 'solution' + ext), code);
    file = path.join(dir, 'test_solution' + ext);
    fs.writeFileSync(file, code + '\n;\n' + tests);
  } catch (e) {
    emit({ t: 'error', error: errorText(e) });
    process.exit(1);
  }

  const { run } = require('node:test');
  const names = [];
  const childSeen = [];
  const started = [];
  let leaves = 0;
  let loadFailure = null;
  let stderrText = '';
  const stream = run({ files: [file] });
  stream.on('test:start', (d) => {
    names[d.nesting] = d.name;
    childSeen[d.nesting] = false;
    started[d.nesting] = Date.now();
    if (d.nesting > 0) childSeen[d.nesting - 1] = true;
  });
  const done = (passed) => (d) => {
    if (childSeen[d.nesting]) return; // a suite: its tests were reported
    const error = passed ? null : errorText(d.details && d.details.error);
    if (!passed && leaves === 0 && d.nesting === 0 && (d.name === file || d.name === path.basename(file))) {
      // the file itself failed before any test ran: a crash
      loadFailure = stderrText || error || 'the test file failed to load';
      return;
    }
    leaves++;
    const ms = d.details && typeof d.details.duration_ms === 'number' ? Math.round(d.details.duration_ms) : 0;
    emit({
      t: 'test',
      name: names.slice(0, d.nesting + 1).join(' > '),
      passed: passed || !!d.todo,
      skipped: !!d.skip,
      error,
      duration_ms: ms,
    });
  };
  stream.on('test:pass', done(true));
  stream.on('test:fail', done(false));
  stream.on('test:stdout', (d) => process.stderr.write(String(d.message)));
  stream.on('test:stderr', (d) => {
    const m = String(d.message);
    if (stderrText.length < ERROR_MAX) stderrText += m;
    process.stderr.write(m);
  });
  stream.on('data', () => {});
  stream.on('end', () => {
    if (loadFailure !== null && leaves === 0) {
      emit({ t: 'error', error: loadFailure.slice(0, ERROR_MAX) });
      process.exitCode = 1;
      return;
    }
    emit({ t: 'end' });
  });
}

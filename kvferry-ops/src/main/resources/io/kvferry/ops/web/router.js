// kvferry router status page: polls status.json once a second and renders it. Plain JavaScript, no build step, no
// library. Every value from the document is set as text (never as HTML): backend URLs and check results come from
// the router's flags, its /workers callers and its backends' answers. el, fill and num are common.js's (loaded first).
'use strict';

function count(n) {
  return n === undefined || n === null ? '–' : num(n);
}

function ms(n) {
  if (n === null || n === undefined) return '–';
  if (n < 1000) return (n < 10 ? Number(n).toFixed(1) : Math.round(n)) + ' ms';
  if (n < 60000) return (n / 1000).toFixed(1) + ' s';
  return (n / 60000).toFixed(1) + ' min';
}

// A per-minute limit: what its bucket holds now of it ("120 of 600"), "no limit" (0), or "–" where the document has
// none (a router older than its tenants' rates in its status).
function rate(remaining, perMinute) {
  if (perMinute === undefined || perMinute === null) return '–';
  if (!perMinute) return 'no limit';
  return {text: Number(remaining).toLocaleString('en-US') + ' of ' + Number(perMinute).toLocaleString('en-US'), cls: 'num'};
}

function pair(s) {
  return s && s.count > 0 ? ms(s.p50) + ' / ' + ms(s.p99) : '–';
}

function render(doc) {
  document.getElementById('title').textContent = 'kvferry router · ' + doc.model + ' · pid ' + doc.pid;
  const state = document.getElementById('state');
  state.textContent = doc.status;
  state.className = doc.status === 'ok' ? 'up' : 'down';
  document.getElementById('updated').textContent = 'updated ' + new Date(doc.now_ms).toLocaleTimeString();

  const req = doc.requests || {}, rates = doc.rates || {}, lat = doc.latency || {}, tokens = doc.tokens || {};
  document.getElementById('running').textContent = req.running;
  document.getElementById('waiting').textContent = req.waiting;
  document.getElementById('total').textContent = Number(req.total).toLocaleString('en-US');
  document.getElementById('rate').textContent = Number(rates.requests_per_s || 0).toFixed(2);
  document.getElementById('ttft').textContent = pair(lat.ttft_ms);
  document.getElementById('e2e').textContent = pair(lat.e2e_ms);
  document.getElementById('tokens').textContent = Number(tokens.prompt).toLocaleString('en-US') + ' / '
    + Number(tokens.generated).toLocaleString('en-US');

  // One added at run time (POST /workers, a registration) says so; the others were given at start (origin command_line).
  fill('backends', (doc.backends || []).map(b => ({cells: [b.origin === 'added' ? b.role + ' (added)' : b.role, b.url,
    // How long out (the health thread's record; a router older than the field: none): a full router's add replaces
    // the one of its role added at run time out the longest once that is config.replace_after_ms.
    b.healthy ? {text: 'in rotation', cls: 'up'} : {text: 'out of rotation' + (typeof b.out_of_rotation_ms === 'number'
      ? ' for ' + ms(b.out_of_rotation_ms) : ''), cls: 'down'}, num(b.in_flight),
    {text: b.last_check === null || b.last_check === undefined ? '–' : b.last_check, cls: 'reason'},
    b.last_check_age_ms === null || b.last_check_age_ms === undefined ? '–' : ms(b.last_check_age_ms) + ' ago',
    b.role === 'prefill' ? (b.bootstrap || '–') : ''], cls: 'backend-row'})), 'no backends');

  fill('by-status', Object.entries(req.by_status || {}).map(([s, n]) => ({cells: [{text: s, cls: s >= 500 ? 'down' : s >= 400 ? '' : 'up'},
    num(n)], cls: 'status-row'})), 'no request answered yet');

  document.getElementById('window').textContent = '(rates over the last ' + Math.round(rates.window_s || 0) + ' s, latencies over the last '
    + (lat.window_s || 60) + ' s)';
  const recent = [
    ['requests / s', Number(rates.requests_per_s || 0).toFixed(2)],
    ['server errors / s', Number(rates.server_errors_per_s || 0).toFixed(2)],
    ['prompt tokens / s', Number(rates.prompt_tokens_per_s || 0).toFixed(1)],
    ['generated tokens / s', Number(rates.generated_tokens_per_s || 0).toFixed(1)],
    ['TTFT p50', lat.ttft_ms && lat.ttft_ms.count ? ms(lat.ttft_ms.p50) : '–'],
    ['TTFT p99', lat.ttft_ms && lat.ttft_ms.count ? ms(lat.ttft_ms.p99) : '–'],
    ['end-to-end p50', lat.e2e_ms && lat.e2e_ms.count ? ms(lat.e2e_ms.p50) : '–'],
    ['end-to-end p99', lat.e2e_ms && lat.e2e_ms.count ? ms(lat.e2e_ms.p99) : '–'],
    ['requests measured', (lat.e2e_ms ? lat.e2e_ms.count : 0)],
  ];
  fill('recent', recent.map(([k, v]) => ({cells: [k, {text: v, cls: 'num'}]})), '');

  const c = doc.config || {};
  fill('config', [
    ['max concurrent requests', c.max_concurrent_requests ? c.max_concurrent_requests : 'no limit'],
    ['queue timeout', c.queue_timeout_ms ? ms(c.queue_timeout_ms) : '0 (over the limit: 429 at once)'],
    ['tenants', c.tenants ? 'yes (--tenants-file)' : 'no'],
    ['max backends', c.max_backends ? num(c.max_backends) : '–'],
    ['full: replaces one out of rotation for', c.replace_after_ms ? ms(c.replace_after_ms) : '–'],
  ].map(([k, v]) => ({cells: [k, v]})), '');

  // Once a drain began (status draining): the requests running then, ended since or cut at --drain-timeout-s.
  const drain = doc.drain;
  document.getElementById('drain-section').hidden = !drain || typeof drain !== 'object';
  if (drain && typeof drain === 'object') {
    fill('drain', [['completed', count(drain.completed)], ['cut', count(drain.cut)]].map(([k, v]) => ({cells: [k, v]})), '');
  }

  document.getElementById('outputs-section').hidden = !outputsTable('outputs', doc.structured_outputs);

  const tenants = doc.tenants;
  document.getElementById('tenants-section').hidden = !Array.isArray(tenants);
  if (Array.isArray(tenants)) {
    fill('tenants', tenants.map(t => ({cells: [t.name, num(t.running), num(t.waiting),
      t.max_concurrent_requests ? num(t.max_concurrent_requests) : 'no limit',
      rate(t.remaining_requests, t.requests_per_minute), rate(t.remaining_tokens, t.tokens_per_minute),
      count(t.rate_limited_requests), count(t.rate_limited_tokens)], cls: 'tenant-row'})), 'no tenants');
  }
}

// The structured-output compiler's figures (status.json's structured_outputs) as rows of the table tableId; false where the
// document has none (a router older than them).
function outputsTable(tableId, o) {
  if (!o || typeof o !== 'object') return false;
  const by = o.outcomes || {};
  const rows = Object.entries(by).map(([k, v]) => [k, count(v)]);
  rows.push(['waiting now', count(o.waiting)]);
  rows.push(['compilations run', count(o.compiles)]);
  rows.push(['mean compile time', o.mean_compile_ms === null || o.mean_compile_ms === undefined ? '–' : ms(o.mean_compile_ms)]);
  fill(tableId, rows.map(([k, v]) => ({cells: [k, v], cls: 'outputs-row'})), '');
  return true;
}

// Fetches status.json now and a second after each answer (common.js).
poll(render);

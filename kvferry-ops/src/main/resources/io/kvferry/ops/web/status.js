// kvferry status page: polls status.json once a second and renders it. Plain JavaScript, no build step, no
// library: the chart is drawn on a canvas by hand. Every value from the document is set as text (never as
// HTML), since session ids and failure reasons came from peers. el, fill and num are common.js's (loaded first).
'use strict';

const STATES = ['Bootstrapping', 'WaitingForInput', 'Transferring', 'Success', 'Failed'];
const WINDOW_MS = 120000;
const samples = []; // {t: ms, gbps}
let previous = null; // {t, bytes}

function bytes(n) {
  if (n < 1e6) return n + ' B';
  if (n < 1e9) return (n / 1e6).toFixed(1) + ' MB';
  return (n / 1e9).toFixed(2) + ' GB';
}

function ms(n) {
  if (n < 1000) return n + ' ms';
  if (n < 60000) return (n / 1000).toFixed(1) + ' s';
  return (n / 60000).toFixed(1) + ' min';
}

function rankName(r) {
  return r.role + ' tp' + r.tp_rank + ' pp' + r.pp_rank + ' dp' + r.dp_rank + (r.cp_rank ? ' cp' + r.cp_rank : '');
}

/** Every process document in the view: the one of this process, or those a cluster view fetched. */
function processesOf(doc) {
  if (doc.kind === 'cluster') return (doc.processes || []).filter(p => p.ok).map(p => ({url: p.url, status: p.status}));
  return [{url: 'status.json', status: doc}];
}

function render(doc) {
  const procs = processesOf(doc);
  const ranks = [];
  for (const p of procs) for (const r of p.status.ranks || []) ranks.push({rank: r, url: p.url});

  document.getElementById('title').textContent = doc.kind === 'cluster'
    ? 'kvferry cluster · registry ' + doc.registry
    : 'kvferry ' + doc.role + ' process ' + doc.pid;
  document.getElementById('updated').textContent = 'updated ' + new Date(doc.now_ms).toLocaleTimeString();

  // Cards and the rooms-by-state table.
  const byState = {};
  for (const s of STATES) byState[s] = 0;
  let concluded = 0, failures = 0;
  const byKind = {};
  for (const {rank} of ranks) {
    for (const [s, n] of Object.entries(rank.rooms_by_state || {})) byState[s] = (byState[s] || 0) + n;
    concluded += rank.rooms_concluded;
    for (const [k, n] of Object.entries(rank.failures_by_kind || {})) {
      byKind[k] = (byKind[k] || 0) + n;
      failures += n;
    }
  }
  const inFlight = byState.Bootstrapping + byState.WaitingForInput + byState.Transferring;
  document.getElementById('rooms-in-flight').textContent = inFlight;
  document.getElementById('rooms-concluded').textContent = concluded;
  document.getElementById('failures-total').textContent = failures;
  fill('rooms-by-state', STATES.map(s => ({cells: [{text: s, cls: 'state-' + s}, num(byState[s])], cls: 'state-row'})), '');
  for (const tr of document.querySelectorAll('#rooms-by-state tbody tr')) tr.dataset.state = tr.cells[0].textContent;
  fill('failures-by-kind', Object.entries(byKind).sort((a, b) => b[1] - a[1]).map(([k, n]) => ({cells: [k, num(n)]})),
    'no failures');

  // Bandwidth: the prefill ranks' data-path bytes (a decode counts the same bytes again), else the decode's.
  const prefill = ranks.filter(x => x.rank.role === 'prefill');
  const counted = prefill.length > 0 ? prefill : ranks;
  const total = counted.reduce((a, x) => a + x.rank.bytes_moved, 0);
  document.getElementById('bytes-total').textContent = bytes(total);
  if (previous !== null && doc.now_ms > previous.t) {
    const delta = total >= previous.bytes ? total - previous.bytes : total; // a restarted process starts from 0
    samples.push({t: doc.now_ms, gbps: delta / (doc.now_ms - previous.t) / 1e6});
  }
  previous = {t: doc.now_ms, bytes: total};
  while (samples.length > 0 && samples[0].t < doc.now_ms - WINDOW_MS) samples.shift();
  const last = samples.length ? samples[samples.length - 1].gbps : 0;
  document.getElementById('bw-now').textContent = last < 1 ? (last * 1000).toFixed(1) + ' MB/s' : last.toFixed(2) + ' GB/s';
  drawChart(doc.now_ms);

  // Topology: the registry's ranks (cluster view), with the data paths their process reports.
  const topoSection = document.getElementById('topology-section');
  if (doc.kind === 'cluster') {
    topoSection.hidden = false;
    const t = doc.topology;
    document.getElementById('topology-summary').textContent = t
      ? '(tp ' + t.attn_tp_size + ', cp ' + t.attn_cp_size + ', dp ' + t.dp_size + ', pp ' + t.pp_size + ', page ' + t.page_size
        + ', ' + t.kv_cache_dtype + '; ' + t.registered + '/' + t.expected + ' registered' + (t.ready ? ', ready)' : ', not ready)')
      : '(no prefill rank registered yet)';
    fill('topology', (doc.prefill_ranks || []).map(r => {
      const match = ranks.find(x => x.rank.role === 'prefill' && x.rank.tp_rank === r.tp && x.rank.pp_rank === r.pp
        && x.rank.dp_rank === r.dp && x.rank.cp_rank === r.cp && x.url === r.status_url);
      const paths = match ? [...new Set(match.rank.peers.map(p => p.data_path))].join(', ') : '';
      return {cells: [r.dp, r.cp, r.tp, r.pp, r.endpoint, paths || '–', r.status_url || '–'], cls: 'rank-row'};
    }), 'no prefill rank registered');
  } else {
    topoSection.hidden = true;
  }

  fill('ranks', ranks.map(({rank}) => {
    const rooms = STATES.filter(s => rank.rooms_by_state[s]).map(s => s + ' ' + rank.rooms_by_state[s]).join(', ');
    return {cells: [rankName(rank), rank.backend, rank.endpoint || '–', rooms || '0', num(rank.rooms_concluded), bytes(rank.bytes_moved),
      num(rank.peers.length)]};
  }), 'no ranks');

  // The reference engine's processes: their KV pages and the prompt tokens their prefix caches served.
  const engines = procs.filter(p => p.status.engine !== null && typeof p.status.engine === 'object');
  document.getElementById('engines-section').hidden = engines.length === 0;
  fill('engines', engines.map(p => {
    const e = p.status.engine, pages = e.kv_pages || {};
    return {cells: [p.status.role + ' ' + p.status.pid, num(pages.used ?? 0), num(pages.cached ?? 0), num(pages.free ?? 0),
      num(e.cached_tokens ?? 0), e.prompt_tokens === undefined ? '–' : num(e.prompt_tokens),
      e.prefix_deferrals === undefined ? '–' : num(e.prefix_deferrals), drainState(e)], cls: 'engine-row'};
  }), 'no engine');

  // Their structured-output compilers: specs by outcome since start, waiting now, mean compile time.
  const compilers = engines.filter(p => p.status.engine.structured_outputs !== null && typeof p.status.engine.structured_outputs === 'object');
  document.getElementById('outputs-section').hidden = compilers.length === 0;
  fill('outputs', compilers.map(p => {
    const o = p.status.engine.structured_outputs, by = o.outcomes || {};
    return {cells: [p.status.role + ' ' + p.status.pid, num(by.compiled ?? 0), num(by.cached ?? 0), num(by.refused ?? 0),
      num(by.deadline ?? 0), num(by.busy ?? 0), num(o.waiting ?? 0),
      o.mean_compile_ms === null || o.mean_compile_ms === undefined ? '–' : Number(o.mean_compile_ms).toFixed(2) + ' ms'], cls: 'outputs-row'};
  }), 'no compiler');

  const peers = [];
  for (const {rank} of ranks) for (const p of rank.peers) {
    // The note says why offers were passed over, or why the path kept is slower than tcp (PROTOCOL.md, HELLO_ACK).
    const path = p.data_path_note ? {text: p.data_path + ' — ' + p.data_path_note, cls: 'reason'} : p.data_path;
    peers.push({cells: [rankName(rank), p.name, p.address, path, num(p.rooms), ms(p.silent_millis)]});
  }
  fill('peers', peers, 'no peers connected');

  const oldest = [];
  for (const {rank} of ranks) for (const r of rank.oldest_rooms) oldest.push({rank, r});
  oldest.sort((a, b) => b.r.age_millis - a.r.age_millis);
  fill('oldest', oldest.slice(0, 15).map(({rank, r}) => ({cells: [rankName(rank), String(r.room),
    {text: r.state, cls: 'state-' + r.state}, ms(r.age_millis), ms(r.in_state_millis), r.peers || '–']})), 'no room in flight');

  const fails = [];
  for (const {rank} of ranks) for (const f of rank.recent_failures) fails.push({rank, f});
  fails.sort((a, b) => b.f.at_epoch_millis - a.f.at_epoch_millis);
  fill('failures', fails.slice(0, 25).map(({rank, f}) => ({cells: [new Date(f.at_epoch_millis).toLocaleTimeString(), rankName(rank),
    String(f.room), f.kind, f.stage, f.peer || '–', {text: f.reason, cls: 'reason'}]})), 'no failures');

  const procSection = document.getElementById('processes-section');
  procSection.hidden = doc.kind !== 'cluster';
  if (doc.kind === 'cluster') {
    fill('processes', (doc.processes || []).map(p => ({cells: [p.url, p.ok ? p.status.role : '–',
      p.ok ? num(p.status.ranks.length) : '–', p.ok ? {text: 'up', cls: 'up'} : {text: 'down: ' + p.error, cls: 'down'}]})),
      'no process published a status URL');
  }
}

function drawChart(now) {
  const c = document.getElementById('bandwidth');
  const g = c.getContext('2d');
  const w = c.width, h = c.height, left = 48, bottom = 22, top = 10, right = 10;
  g.clearRect(0, 0, w, h);
  const max = Math.max(0.001, ...samples.map(s => s.gbps)) * 1.15;
  g.strokeStyle = '#dde1e8';
  g.fillStyle = '#6b7385';
  g.font = '11px system-ui, sans-serif';
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + (h - top - bottom) * i / 4;
    g.beginPath();
    g.moveTo(left, y);
    g.lineTo(w - right, y);
    g.stroke();
    g.fillText((max * (4 - i) / 4).toFixed(max < 1 ? 3 : 1), 4, y + 4);
  }
  for (let s = 0; s <= WINDOW_MS / 1000; s += 30) {
    const x = left + (w - left - right) * (1 - s * 1000 / WINDOW_MS);
    g.fillText(s === 0 ? 'now' : '-' + s + 's', x - 12, h - 6);
  }
  if (samples.length > 0) {
    const at = s => [left + (w - left - right) * (1 - (now - s.t) / WINDOW_MS), top + (h - top - bottom) * (1 - s.gbps / max)];
    const base = h - bottom;
    // The area under the line, then the line, then a dot per sample: a run of one or two samples still shows.
    g.fillStyle = 'rgba(47, 111, 222, 0.15)';
    g.beginPath();
    samples.forEach((s, i) => {
      const [x, y] = at(s);
      if (i === 0) g.moveTo(x, base);
      g.lineTo(x, y);
      if (i === samples.length - 1) g.lineTo(x, base);
    });
    g.closePath();
    g.fill();
    g.strokeStyle = '#2f6fde';
    g.lineWidth = 2;
    g.beginPath();
    samples.forEach((s, i) => {
      const [x, y] = at(s);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
    g.fillStyle = '#2f6fde';
    samples.forEach(s => {
      const [x, y] = at(s);
      g.beginPath();
      g.arc(x, y, 2.5, 0, 2 * Math.PI);
      g.fill();
    });
  }
  c.dataset.samples = String(samples.length);
  c.dataset.lastGbps = samples.length ? samples[samples.length - 1].gbps.toFixed(4) : '0';
  c.dataset.nonZero = String(samples.filter(s => s.gbps > 0).length);
}

// Fetches status.json now and a second after each answer (common.js).
poll(render);

// An engine's drain: '–' (a document without it), 'no', or the requests its drain met (completed, cut at --drain-timeout-s).
function drainState(e) {
  if (typeof e.draining !== 'boolean') return '–';
  if (!e.draining) return 'no';
  const d = e.drain || {};
  return {text: 'draining: ' + Number(d.completed ?? 0).toLocaleString('en-US') + ' completed, '
    + Number(d.cut ?? 0).toLocaleString('en-US') + ' cut', cls: 'down'};
}

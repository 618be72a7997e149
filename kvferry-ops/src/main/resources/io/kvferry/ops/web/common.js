// kvferry status pages' shared helpers and refresh loop (the process and cluster page's status.js, the router
// page's router.js; each page loads this script first). Plain JavaScript, no build step, no library. Values are set
// as text (never as HTML): what the pages show came from peers, the router's flags and its backends.
'use strict';

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fill(tableId, rows, empty) {
  const body = document.querySelector('#' + tableId + ' tbody');
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = el('tr', null, 'empty');
    const td = el('td', empty);
    td.colSpan = document.querySelectorAll('#' + tableId + ' thead th').length;
    tr.appendChild(td);
    body.appendChild(tr);
    return;
  }
  for (const r of rows) {
    const tr = el('tr', null, r.cls || '');
    for (const c of r.cells) {
      const td = el('td');
      if (c !== null && typeof c === 'object') {
        td.textContent = String(c.text);
        if (c.cls) td.className = c.cls;
      } else {
        td.textContent = c === null || c === undefined ? '' : String(c);
      }
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function num(n) {
  return {text: Number(n).toLocaleString('en-US'), cls: 'num'};
}

// How long one fetch of status.json (its answer and body) may take: a server that hangs would otherwise leave the page
// waiting for ever, its last figures shown as if current.
const POLL_TIMEOUT_MS = 3000;
// When the page last rendered a status.json (ms since the epoch; null: not yet).
let lastRendered = null;

// The pages' refresh: fetches status.json at once, renders it, and fetches it again a second after each answer (or
// failure), so a slow answer never stacks requests. A fetch that fails, answers other than 200, or takes more than
// POLL_TIMEOUT_MS (it is aborted) leaves the figures as they were and marks the page stale: #error says
// "not updated for N s: <why>" (N since the last document rendered) and the body has the class "stale" (the figures
// dimmed), until a fetch succeeds again. Each page calls it last.
async function poll(render) {
  const error = document.getElementById('error');
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), POLL_TIMEOUT_MS);
  try {
    const r = await fetch('status.json', {cache: 'no-store', signal: ctl.signal});
    if (!r.ok) throw new Error('status.json answered HTTP ' + r.status);
    render(await r.json()); // the body is read under the same limit
    lastRendered = Date.now();
    error.hidden = true;
    document.body.classList.remove('stale');
  } catch (e) {
    const why = ctl.signal.aborted ? 'status.json did not answer within ' + POLL_TIMEOUT_MS / 1000 + ' s' : String(e.message || e);
    error.textContent = (lastRendered === null ? 'not updated yet: '
        : 'not updated for ' + Math.round((Date.now() - lastRendered) / 1000) + ' s: ') + why;
    error.hidden = false;
    document.body.classList.add('stale');
  } finally {
    clearTimeout(timer);
  }
  setTimeout(() => poll(render), 1000);
}

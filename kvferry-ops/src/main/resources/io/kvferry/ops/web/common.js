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

// The pages' refresh: fetches status.json at once, renders it (or shows why it failed in the page's #error), and
// fetches it again a second after each answer, so a slow answer never stacks requests. Each page calls it last.
async function poll(render) {
  const error = document.getElementById('error');
  try {
    const r = await fetch('status.json', {cache: 'no-store'});
    if (!r.ok) throw new Error('status.json answered HTTP ' + r.status);
    render(await r.json());
    error.hidden = true;
  } catch (e) {
    error.textContent = String(e.message || e);
    error.hidden = false;
  }
  setTimeout(() => poll(render), 1000);
}

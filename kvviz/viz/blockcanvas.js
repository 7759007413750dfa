// kvviz block-map heatmap (kvviz/viz/blockcanvas.py builds its data).
//
// Streamlit custom component v2: Streamlit calls the default export when the element mounts
// and again each time its data changes; the DOM under parentElement stays, so the canvas,
// its listeners and the hover box persist and each call only repaints.
//
// data.meta: title, subtitle, summary, rows, cols, cells, run, start, stop, num_blocks,
//            block_size, colours[], labels[] (index = state code; the last is "past the end"),
//            count_columns[]
// data.cells: Arrow table, one row per cell: state, then owner/filled/allocated/refcount
//             (run == 1) or n_<state>, owner (the first owner) and owners (run > 1); and
//             alt (meta.alt: a contiguous map) = 1 where the owning sequence is drawn in
//             the darker of two shades, so neighbouring sequences stay apart
// meta.unit: "slot" (cells of one slot: a contiguous lane) or "block"
//
// Drag across cells to zoom: the component sends a "zoom" trigger {start, stop} (blocks, stop
// exclusive) that the page turns into its address-range slider; a double click sends
// {reset: true}. The selection is drawn on an overlay canvas, the map is not repainted.
//
// Hover: the box names the cell under the mouse and is redrawn after every paint, from the
// mouse's page position and where the canvas is at that moment, so it stays right under a
// still mouse when the data changes or the canvas moves.
//
// The root element carries data-draws (paints so far), data-digest (a hash of the state
// column) and data-rows / data-cols, for tests and benchmarks.

const M = { l: 86, r: 14, t: 6, b: 44 }; // plot margins, px
const FONT = '12px "Source Sans", sans-serif';
const INK = "#808495";
const MAX_PLOT_H = 470;
const OWNED = new Set([2, 3, 4, 5]); // used, tail, slack, shared (kvviz/viz/cellstate.py codes)
const SHADE = 0.8; // the darker shade of every other sequence in a contiguous map

function rgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

function digest(a) { // FNV-1a over the state codes
  let h = 0x811c9dc5;
  for (let i = 0; i < a.length; i++) { h ^= a[i] & 255; h = Math.imul(h, 0x01000193); }
  return (h >>> 0).toString(16);
}

function fmt(n) { return Number(n).toLocaleString("en-US"); }

function setup(parent) {
  const root = document.createElement("div");
  root.className = "kvmap";
  const title = document.createElement("div");
  title.className = "kvmap-title";
  const sub = document.createElement("div");
  sub.className = "kvmap-sub";
  const plot = document.createElement("div");
  plot.className = "kvmap-plot";
  const canvas = document.createElement("canvas");
  canvas.setAttribute("role", "img");
  const overlay = document.createElement("canvas");
  overlay.className = "kvmap-overlay";
  const tip = document.createElement("div");
  tip.className = "kvmap-tip";
  tip.hidden = true;
  plot.append(canvas, overlay, tip);
  const hint = document.createElement("div");
  hint.className = "kvmap-hint";
  hint.textContent = "Drag across cells to zoom into that address range; double-click: " +
    "the whole map.";
  root.append(title, sub, plot, hint);
  parent.appendChild(root);
  const s = { root, title, sub, plot, canvas, overlay, tip, meta: null, cols: null,
              mouse: null, // [clientX, clientY] while over the canvas
              width: 0, geo: null, draws: 0, drag: null, send: null };
  const track = (e) => {
    s.mouse = [e.clientX, e.clientY];
    if (s.drag) { s.drag.i1 = cellAt(s, ...at(s), true); selection(s); }
    hover(s);
  };
  canvas.addEventListener("mousemove", track);
  canvas.addEventListener("mouseenter", track); // also when the canvas moves under the mouse
  canvas.addEventListener("mouseleave", () => { s.mouse = null; hover(s); });
  canvas.addEventListener("mousedown", (e) => {
    const i = e.button === 0 ? cellAt(s, e.offsetX, e.offsetY, false) : -1;
    if (i >= 0) { s.drag = { i0: i, i1: i }; e.preventDefault(); }
  });
  s.onUp = () => {
    const d = s.drag;
    s.drag = null;
    selection(s);
    if (!d || d.i0 === d.i1 || !s.send) return;
    const m = s.meta;
    const a = Math.min(d.i0, d.i1);
    const b = Math.max(d.i0, d.i1);
    s.send("zoom", { start: m.start + a * m.run,
                     stop: Math.min(m.stop, m.start + (b + 1) * m.run) });
  };
  window.addEventListener("mouseup", s.onUp);
  canvas.addEventListener("dblclick", () => { if (s.send) s.send("zoom", { reset: true }); });
  s.resize = new ResizeObserver(() => {
    if (s.meta && root.clientWidth !== s.width) paint(s);
  });
  s.resize.observe(root);
  return s;
}

// The mouse over the canvas, in canvas pixels, from where the canvas is now: a canvas that
// moved or grew under a still mouse (the page's layout changed above it) gets no mousemove,
// and the block under the mouse is then another one than at the last event.
function at(s) {
  const r = s.canvas.getBoundingClientRect();
  return [s.mouse[0] - r.left, s.mouse[1] - r.top];
}

function cellAt(s, x, y, clamp) { // the cell index under (x, y); -1 outside unless clamped
  const { meta, geo: g } = s;
  if (!meta || !g) return -1;
  let c = Math.floor((x - M.l) / g.cw);
  let r = Math.floor((y - M.t) / g.ch);
  if (clamp) {
    c = Math.max(0, Math.min(meta.cols - 1, c));
    r = Math.max(0, Math.min(meta.rows - 1, r));
    return Math.min(meta.cells - 1, r * meta.cols + c);
  }
  if (c < 0 || r < 0 || c >= meta.cols || r >= meta.rows) return -1;
  const i = r * meta.cols + c;
  return i < meta.cells ? i : -1;
}

function selection(s) { // the dragged range, in reading order, shaded on the overlay
  const { overlay: ov, canvas: cv, meta, geo: g } = s;
  if (ov.width !== cv.width || ov.height !== cv.height) {
    ov.width = cv.width;
    ov.height = cv.height;
    ov.style.width = cv.style.width;
    ov.style.height = cv.style.height;
  }
  const ctx = ov.getContext("2d");
  const dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, ov.width, ov.height);
  if (!s.drag || !meta || !g) return;
  const a = Math.min(s.drag.i0, s.drag.i1);
  const b = Math.max(s.drag.i0, s.drag.i1);
  ctx.fillStyle = "rgba(255, 75, 75, 0.30)";
  ctx.strokeStyle = "rgba(200, 30, 30, 0.9)";
  for (let r = Math.floor(a / meta.cols); r <= Math.floor(b / meta.cols); r++) {
    const c0 = r === Math.floor(a / meta.cols) ? a % meta.cols : 0;
    const c1 = r === Math.floor(b / meta.cols) ? b % meta.cols : meta.cols - 1;
    ctx.fillRect(M.l + c0 * g.cw, M.t + r * g.ch, (c1 - c0 + 1) * g.cw, g.ch);
  }
}

function column(table, name) {
  const c = table.getChild(name);
  if (c === null) throw new Error(`block map data has no column "${name}"`);
  return c.toArray();
}

function geometry(meta, width) {
  const plotW = Math.max(40, width - M.l - M.r);
  const cw = plotW / meta.cols;
  let ch = Math.min(24, Math.max(3, cw));
  if (ch * meta.rows > MAX_PLOT_H) ch = MAX_PLOT_H / meta.rows;
  return { plotW, plotH: ch * meta.rows, cw, ch, width };
}

function paint(s) {
  const meta = s.meta;
  const width = s.root.clientWidth || 600;
  const g = geometry(meta, width);
  s.width = width;
  s.geo = g;
  const height = Math.ceil(M.t + g.plotH + M.b);
  const dpr = window.devicePixelRatio || 1;
  const cv = s.canvas;
  if (cv.width !== Math.round(width * dpr) || cv.height !== Math.round(height * dpr)) {
    cv.width = Math.round(width * dpr);
    cv.height = Math.round(height * dpr);
    cv.style.width = `${width}px`;
    cv.style.height = `${height}px`;
  }
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);

  // cells: one pixel each in an offscreen image, scaled up without smoothing
  const state = s.cols.state;
  const lut = meta.colours.map(rgb);
  const dark = lut.map((c) => c.map((v) => Math.round(v * SHADE)));
  const alt = s.cols.alt;
  const pad = lut[lut.length - 1];
  const img = new ImageData(meta.cols, meta.rows);
  const px = img.data;
  const total = meta.rows * meta.cols;
  for (let i = 0; i < total; i++) {
    const k = i < state.length ? state[i] : -1;
    const c = k < 0 ? pad : (alt && alt[i] && OWNED.has(k) ? dark[k] : lut[k]) || pad;
    const o = i * 4;
    px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
  }
  if (!s.off) s.off = document.createElement("canvas");
  s.off.width = meta.cols;
  s.off.height = meta.rows;
  s.off.getContext("2d").putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(s.off, M.l, M.t, g.plotW, g.plotH);
  if (g.cw >= 6 && g.ch >= 6) { // gaps between big cells, as a grid of thin white lines
    ctx.fillStyle = meta.colours[meta.colours.length - 1];
    for (let c = 1; c < meta.cols; c++) ctx.fillRect(M.l + c * g.cw - 0.5, M.t, 1, g.plotH);
    for (let r = 1; r < meta.rows; r++) ctx.fillRect(M.l, M.t + r * g.ch - 0.5, g.plotW, 1);
  }
  axes(ctx, meta, g);

  s.draws += 1;
  s.root.dataset.draws = String(s.draws);
  s.root.dataset.digest = digest(state);
  s.root.dataset.rows = String(meta.rows);
  s.root.dataset.cols = String(meta.cols);
  hover(s);
}

function every(px, minPx) { // label every k-th row/column, k a power of two
  let k = 1;
  while (k * px < minPx) k *= 2;
  return k;
}

function axes(ctx, meta, g) {
  const slotsPerCell = meta.run * meta.block_size;
  ctx.font = FONT;
  ctx.fillStyle = INK;
  ctx.strokeStyle = "#e6eaf1";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  const kr = every(g.ch, 18);
  for (let r = 0; r < meta.rows; r += kr) {
    const y = M.t + (r + 0.5) * g.ch;
    const addr = (meta.start + r * meta.cols * meta.run) * meta.block_size;
    ctx.fillText(fmt(addr), M.l - 9, y);
    ctx.fillRect(M.l - 6, y - 0.5, 5, 1);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const kc = every(g.cw, 64);
  for (let c = 0; c < meta.cols; c += kc) {
    const x = M.l + (c + 0.5) * g.cw;
    ctx.fillText(fmt(c * slotsPerCell), x, M.t + g.plotH + 5);
  }
  ctx.font = '11px "Source Sans", sans-serif';
  ctx.fillText("+ slots", M.l + g.plotW / 2, M.t + g.plotH + 25);
  ctx.save();
  ctx.translate(12, M.t + g.plotH / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = "middle";
  ctx.fillText("slot address of row", 0, 0);
  ctx.restore();
}

function line(parent, parts) { // parts: [text, bold?] pairs; text only, never HTML
  const div = document.createElement("div");
  for (const [text, bold] of parts) {
    const el = document.createElement(bold ? "b" : "span");
    el.textContent = text;
    div.appendChild(el);
  }
  parent.appendChild(div);
}

function hover(s) {
  const { meta, geo: g, tip } = s;
  if (!s.mouse || !meta || !g || s.drag) { tip.hidden = true; return; }
  const [x, y] = at(s);
  const i = cellAt(s, x, y, false);
  if (i < 0) { tip.hidden = true; return; }
  const label = meta.labels[s.cols.state[i]];
  const first = meta.start + i * meta.run;
  tip.replaceChildren();
  const unit = meta.unit || "block";
  if (meta.run === 1) {
    const owner = s.cols.owner[i];
    line(tip, [[`${unit} ${fmt(first)}: `], [label, true]]);
    line(tip, [[`owner seq ${owner < 0 ? "none" : owner}`]]);
    line(tip, [[`filled ${s.cols.filled[i]} / ${s.cols.allocated[i]} slots`]]);
    line(tip, [[`refcount ${s.cols.refcount[i]}`]]);
  } else {
    const last = Math.min(first + meta.run, meta.stop) - 1;
    line(tip, [[`${unit}s ${fmt(first)}-${fmt(last)}: mostly `], [label, true]]);
    const owner = s.cols.owner[i];
    const many = s.cols.owners[i];
    line(tip, [[owner < 0 ? "owner seq none" : many > 1
      ? `owner seq ${owner} and ${many - 1} more` : `owner seq ${owner}`]]);
    meta.count_columns.forEach((name, k) => {
      const n = s.cols[name][i];
      if (n > 0) line(tip, [[`${meta.labels[k]}: ${n}`]]);
    });
  }
  tip.hidden = false;
  const w = tip.offsetWidth;
  const left = x + 14 + w > g.width ? x - 14 - w : x + 14;
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, y - 10)}px`;
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let s = parentElement.__kvmap;
  if (!s) {
    s = setup(parentElement);
    parentElement.__kvmap = s;
  }
  const meta = data.meta;
  const cols = { state: column(data.cells, "state") };
  const extra = meta.run === 1 ? ["owner", "filled", "allocated", "refcount"]
    : [...meta.count_columns, "owner", "owners"];
  if (meta.alt) extra.push("alt");
  for (const name of extra) cols[name] = column(data.cells, name);
  s.meta = meta;
  s.cols = cols;
  s.send = setTriggerValue;
  s.title.textContent = meta.title;
  s.sub.textContent = meta.subtitle;
  s.canvas.setAttribute("aria-label",
    `${meta.title}: ${meta.subtitle}. ${meta.summary}`);
  paint(s);
  return () => { // on unmount: nothing left listening, a later mount starts afresh
    window.removeEventListener("mouseup", s.onUp);
    s.resize.disconnect();
    s.root.remove();
    delete parentElement.__kvmap;
  };
}

// Feature superposition, in the browser: no libraries, no network.
// Random unit vectors (seeded), their pairwise angles against the exact density
// sin(theta)^(d-2), a band of tolerance, query and pairs modes, a 3-D view, and
// features stored in superposition read back by dot products.
"use strict";

const $ = (id) => document.getElementById(id);
const BAND = "rgba(242, 193, 78, 0.35)";
const BLUE = "#6c8ead";
const RED = "#d1495b";

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function gaussians(random, count) {
  const out = new Float64Array(count);
  for (let i = 0; i < count; i += 2) {
    const u = 1 - random();
    const v = random();
    const r = Math.sqrt(-2 * Math.log(u));
    out[i] = r * Math.cos(2 * Math.PI * v);
    if (i + 1 < count) out[i + 1] = r * Math.sin(2 * Math.PI * v);
  }
  return out;
}

function unitVectors(count, dim, seed) {
  const v = gaussians(mulberry32(seed), count * dim);
  for (let i = 0; i < count; i++) {
    let norm = 0;
    for (let k = 0; k < dim; k++) norm += v[i * dim + k] ** 2;
    norm = Math.sqrt(norm);
    for (let k = 0; k < dim; k++) v[i * dim + k] /= norm;
  }
  return v;
}

function dot(v, i, j, dim) {
  let s = 0;
  for (let k = 0; k < dim; k++) s += v[i * dim + k] * v[j * dim + k];
  return s;
}

const degrees = (c) => (Math.acos(Math.max(-1, Math.min(1, c))) * 180) / Math.PI;

function angles(v, count, dim, mode, query) {
  const out = [];
  if (mode === "query") {
    for (let j = 0; j < count; j++) if (j !== query) out.push(degrees(dot(v, query, j, dim)));
  } else {
    for (let i = 0; i < count; i++)
      for (let j = i + 1; j < count; j++) out.push(degrees(dot(v, i, j, dim)));
  }
  return out;
}

// log Gamma by the Lanczos approximation (g = 7), enough for the density's constant.
const LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028,
  771.32342877765313, -176.61502916214059, 12.507343278686905,
  -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
function logGamma(x) {
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  x -= 1;
  let a = LANCZOS[0];
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += LANCZOS[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

// Density per degree of the angle between two random unit vectors in dim dimensions.
function density(deg, dim) {
  const s = Math.sin((deg * Math.PI) / 180);
  if (s <= 0) return 0;
  const logNorm = logGamma(dim / 2) - logGamma((dim - 1) / 2) - 0.5 * Math.log(Math.PI);
  return Math.exp(logNorm + (dim - 2) * Math.log(s)) * (Math.PI / 180);
}

function expectedInBand(theta, dim) {
  const steps = 2000;
  const h = (180 - 2 * theta) / steps;
  let sum = 0;
  for (let i = 0; i <= steps; i++) {
    const w = i === 0 || i === steps ? 0.5 : 1;
    sum += w * density(theta + i * h, dim);
  }
  return Math.min(1, sum * h);
}

function summary(values, theta) {
  const n = values.length;
  let mean = 0;
  for (const a of values) mean += a;
  mean /= n;
  let sq = 0;
  let inBand = 0;
  for (const a of values) {
    sq += (a - mean) ** 2;
    if (a >= theta && a <= 180 - theta) inBand++;
  }
  return { n, mean, sd: Math.sqrt(sq / n), inBand: inBand / n };
}

function axes(ctx, w, h, pad, yMax, label) {
  ctx.strokeStyle = "#444";
  ctx.fillStyle = "#222";
  ctx.font = "11px system-ui, sans-serif";
  ctx.beginPath();
  ctx.moveTo(pad, 8);
  ctx.lineTo(pad, h - pad);
  ctx.lineTo(w - 8, h - pad);
  ctx.stroke();
  for (const t of [0, 45, 90, 135, 180]) {
    const x = pad + ((w - pad - 8) * t) / 180;
    ctx.fillText(`${t}\u00b0`, x - (t === 180 ? 24 : 8), h - pad + 14);
  }
  ctx.fillText(label, pad + 4, 18);
  ctx.fillText(yMax.toPrecision(2), 2, 14);
}

function drawHistogram(values, theta, dim) {
  const canvas = $("histogram");
  const ctx = canvas.getContext("2d");
  const { width: w, height: h } = canvas;
  const pad = 34;
  const bins = 90;
  const counts = new Array(bins).fill(0);
  for (const a of values) counts[Math.min(bins - 1, Math.floor(a / 2))]++;
  const scale = values.length * 2; // counts per bin = density * n * width
  let peak = Math.max(...counts) / scale;
  for (let d = 0; d <= 180; d += 0.5) peak = Math.max(peak, density(d, dim));
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, w, h);
  const x = (deg) => pad + ((w - pad - 8) * deg) / 180;
  const y = (dens) => h - pad - ((h - pad - 24) * dens) / peak;
  ctx.fillStyle = BAND;
  ctx.fillRect(x(theta), 8, x(180 - theta) - x(theta), h - pad - 8);
  ctx.fillStyle = BLUE;
  counts.forEach((c, i) => {
    const top = y(c / scale);
    ctx.fillRect(x(2 * i) + 0.5, top, x(2) - x(0) - 1, h - pad - top);
  });
  ctx.strokeStyle = "#111";
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let d = 0; d <= 180; d += 0.5) {
    const py = y(density(d, dim));
    if (d === 0) ctx.moveTo(x(d), py);
    else ctx.lineTo(x(d), py);
  }
  ctx.stroke();
  ctx.lineWidth = 1;
  axes(ctx, w, h, pad, peak, `density per degree, d = ${dim} (line: exact)`);
}

const view = { yaw: 0.6, pitch: 0.4, dragging: null };

function drawSphere(v, count, dim, mode, query, theta) {
  const canvas = $("sphere");
  const ctx = canvas.getContext("2d");
  const { width: w, height: h } = canvas;
  const r = Math.min(w, h) * 0.42;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = "#bbb";
  ctx.beginPath();
  ctx.arc(w / 2, h / 2, r, 0, 2 * Math.PI);
  ctx.stroke();
  const [cy, sy, cp, sp] = [Math.cos(view.yaw), Math.sin(view.yaw), Math.cos(view.pitch), Math.sin(view.pitch)];
  const points = [];
  for (let i = 0; i < count; i++) {
    const [a, b, c] = [v[i * dim], v[i * dim + 1], v[i * dim + 2]];
    const x1 = cy * a + sy * c;
    const z1 = -sy * a + cy * c;
    const y2 = cp * b - sp * z1;
    const z2 = sp * b + cp * z1;
    points.push({ i, x: w / 2 + r * x1, y: h / 2 - r * y2, z: z2 });
  }
  points.sort((p, q) => p.z - q.z);
  for (const p of points) {
    let color = BLUE;
    if (mode === "query") {
      const a = degrees(dot(v, query, p.i, dim));
      color = p.i === query ? RED : a >= theta && a <= 180 - theta ? "#3a7d44" : "#aaa";
    }
    ctx.globalAlpha = p.z >= 0 ? 1 : 0.35;
    ctx.strokeStyle = color;
    ctx.beginPath();
    ctx.moveTo(w / 2, h / 2);
    ctx.lineTo(p.x, p.y);
    ctx.stroke();
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.arc(p.x, p.y, p.i === query && mode === "query" ? 4 : 2.2, 0, 2 * Math.PI);
    ctx.fill();
  }
  ctx.globalAlpha = 1;
}

function superpose(dim, features, active, tolerance, seed) {
  const f = unitVectors(features, dim, seed + 1);
  const random = mulberry32(seed + 2);
  const order = Array.from({ length: features }, (_, i) => i);
  for (let i = features - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const chosen = order.slice(0, active).sort((a, b) => a - b);
  const x = new Float64Array(dim);
  for (const i of chosen) for (let k = 0; k < dim; k++) x[k] += f[i * dim + k];
  const values = [];
  for (let j = 0; j < features; j++) {
    let s = 0;
    for (let k = 0; k < dim; k++) s += f[j * dim + k] * x[k];
    values.push(s);
  }
  const decoded = values.flatMap((s, j) => (s > tolerance ? [j] : []));
  return { chosen, values, decoded };
}

function drawReadout(result, tolerance) {
  const canvas = $("readout");
  const ctx = canvas.getContext("2d");
  const { width: w, height: h } = canvas;
  const pad = 34;
  const lo = Math.min(0, ...result.values);
  const hi = Math.max(tolerance, ...result.values) * 1.1;
  const y = (s) => h - pad - ((h - pad - 12) * (s - lo)) / (hi - lo);
  const step = (w - pad - 8) / result.values.length;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, w, h);
  const active = new Set(result.chosen);
  result.values.forEach((s, j) => {
    ctx.fillStyle = active.has(j) ? RED : BLUE;
    const [a, b] = [y(Math.max(s, 0)), y(Math.min(s, 0))];
    ctx.fillRect(pad + j * step, a, Math.max(step - 1, 1), b - a);
  });
  ctx.strokeStyle = "#111";
  ctx.setLineDash([5, 4]);
  ctx.beginPath();
  ctx.moveTo(pad, y(tolerance));
  ctx.lineTo(w - 8, y(tolerance));
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.fillStyle = "#222";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(`readout x\u00b7f_j per feature (red: active; dashed: tolerance ${tolerance})`, pad + 4, 12);
  ctx.fillText(hi.toFixed(2), 2, 14);
  ctx.fillText(lo.toFixed(2), 2, h - pad);
}

function read() {
  const mode = document.querySelector("input[name=mode]:checked").value;
  const count = Number($("vectors").value);
  return {
    dim: Number($("dimension").value),
    count,
    theta: Number($("theta").value),
    seed: Math.max(0, Math.floor(Number($("seed").value) || 0)),
    mode,
    query: Math.min(count - 1, Math.max(0, Math.floor(Number($("query").value) || 0))),
    features: Math.max(1, Math.floor(Number($("features").value) || 1)),
    active: Math.max(1, Math.floor(Number($("active").value) || 1)),
    tolerance: Number($("tolerance").value),
  };
}

let last = null;

function render() {
  const o = read();
  o.active = Math.min(o.active, o.features);
  $("vectors-out").textContent = o.count;
  $("theta-out").textContent = `${o.theta}\u00b0`;
  $("tolerance-out").textContent = o.tolerance.toFixed(2);
  const v = unitVectors(o.count, o.dim, o.seed);
  const values = angles(v, o.count, o.dim, o.mode, o.query);
  const s = summary(values, o.theta);
  const expected = expectedInBand(o.theta, o.dim);
  drawHistogram(values, o.theta, o.dim);
  drawSphere(v, o.count, o.dim, o.mode, o.query, o.theta);
  $("stats").textContent =
    `${s.n.toLocaleString()} angles (${o.mode === "query" ? `from vector ${o.query}` : "all pairs"}): ` +
    `mean ${s.mean.toFixed(2)}\u00b0, sd ${s.sd.toFixed(2)}\u00b0 (about 57.3/\u221ad = ${(57.2958 / Math.sqrt(o.dim)).toFixed(2)}\u00b0)\n` +
    `${(100 * s.inBand).toFixed(2)}% within [${o.theta}\u00b0, ${180 - o.theta}\u00b0]; exact ${(100 * expected).toFixed(2)}%`;
  $("sphere-caption").textContent = o.dim === 3
    ? "the vectors on the sphere (drag to turn)"
    : `the first three of ${o.dim} coordinates (drag to turn)`;
  const result = superpose(o.dim, o.features, o.active, o.tolerance, o.seed);
  drawReadout(result, o.tolerance);
  const hits = result.decoded.filter((j) => result.chosen.includes(j)).length;
  $("readout-caption").textContent =
    `${o.features} features in ${o.dim} dimensions, ${o.active} active: decoded ${result.decoded.length} ` +
    `(${hits} right, ${result.decoded.length - hits} false, ${o.active - hits} missed)`;
  last = { options: o, stats: s, expected, decoded: result.decoded, active: result.chosen };
  window.superposition = last;
  document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
}

let pending = 0;
function schedule() {
  cancelAnimationFrame(pending);
  pending = requestAnimationFrame(render);
}

for (const el of document.querySelectorAll("input, select")) el.addEventListener("input", schedule);

const sphere = $("sphere");
sphere.addEventListener("pointerdown", (e) => { view.dragging = [e.clientX, e.clientY]; });
window.addEventListener("pointerup", () => { view.dragging = null; });
window.addEventListener("pointermove", (e) => {
  if (!view.dragging || !last) return;
  view.yaw += (e.clientX - view.dragging[0]) * 0.01;
  view.pitch += (e.clientY - view.dragging[1]) * 0.01;
  view.dragging = [e.clientX, e.clientY];
  const o = last.options;
  drawSphere(unitVectors(o.count, o.dim, o.seed), o.count, o.dim, o.mode, o.query, o.theta);
});

render();

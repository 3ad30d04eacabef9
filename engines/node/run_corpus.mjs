// A float64 engine in JavaScript, checked against a resverify corpus with no Python at all.
//
//   resverify vectors export corpus/          (once, by whoever has Python)
//   node engines/node/run_corpus.mjs corpus/  (in the engine's own test suite)
//
// The engine (the forward pass, reverse mode and forward mode -- the output tangent J·t --
// for add, residual_add, scale, linear, relu, tanh, mul and sum in float64) is the part a
// real engine replaces; the rest is what any consumer needs: read the manifest, skip what
// the engine does not claim, run each request, and apply the entry's checks with the
// corpus's one comparison rule, |actual - exact| <= budget compared exactly (BigInt
// rationals). A group (a law relating several answers) runs each of its requests and checks
// each linear relation, |sum of coef * weight * value| <= bound, exactly too; the sample
// variance identity, whose bound is the spec's budget of the engine's own merge, is skipped.
// Output is TAP: one "ok" / "not ok" line per entry. Exit 0 when nothing failed and
// something ran, else 1. `--bug` plants a bug (residual_add forgets its identity edge, in
// reverse and in forward mode), `--bug=alpha-twice` another (scale multiplies by α², in
// every mode: the output is no longer affine in α), `--bug=swapped-shapes` a third (a refused
// merge names its two shapes in the wrong order), `--bug=sticky-refusal` a fourth (a refused
// merge leaves a small offset on every later output: the refusal changed the engine's
// state), to show the checks fail them.
import { readFileSync } from "node:fs";
import { join } from "node:path";

const OPS = new Set(["add", "residual_add", "scale", "linear", "relu", "tanh", "mul", "sum"]);
const BUG = process.argv.includes("--bug"); // residual_add forgets its identity edge
const ALPHA_TWICE = process.argv.includes("--bug=alpha-twice"); // scale multiplies by α²
const SWAPPED = process.argv.includes("--bug=swapped-shapes"); // a mismatch names b, a
const STICKY = process.argv.includes("--bug=sticky-refusal"); // a refusal shifts later outputs
let offset = 0; // what the sticky-refusal bug adds to every output after a refusal

// ---- numbers: hex floats in, exact comparison out ----------------------------------------
function hexFloat(text) {
  const t = text.toLowerCase();
  if (t === "inf" || t === "-inf") return t[0] === "-" ? -Infinity : Infinity;
  if (t === "nan" || t === "-nan") return NaN;
  const [mant, exp] = hexParts(t);
  return Number(mant) * 2 ** exp; // a double's mantissa times a power of two: exact
}

function hexParts(text) { // "-0x1.8p+1" -> [BigInt mantissa (signed), binary exponent]
  const m = /^(-?)0x([0-9a-f]*)\.?([0-9a-f]*)p([+-]?\d+)$/.exec(text);
  if (!m) throw new Error(`not a hex float: ${text}`);
  const mant = BigInt("0x" + (m[2] + m[3] || "0")) * (m[1] ? -1n : 1n);
  return [mant, Number(m[4]) - 4 * m[3].length];
}

function doubleParts(x) { // a finite double as [BigInt mantissa (signed), exponent], exactly
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const biased = Number((bits >> 52n) & 0x7ffn);
  let mant = bits & ((1n << 52n) - 1n);
  if (biased !== 0) mant |= 1n << 52n;
  return [bits >> 63n ? -mant : mant, (biased || 1) - 1075];
}

// exact rationals as [numerator, denominator] BigInt pairs, denominator > 0
function rational(text) { const [p, q = "1"] = text.split("/"); return [BigInt(p), BigInt(q)]; }
function exactDouble(x) { // a finite double as an exact rational
  const [m, e] = doubleParts(x);
  return e >= 0 ? [m << BigInt(e), 1n] : [m, 1n << BigInt(-e)];
}
const radd = ([a, b], [c, d]) => [a * d + c * b, b * d];
const rmul = ([a, b], [c, d]) => [a * c, b * d];
const rabs = ([a, b]) => [a < 0n ? -a : a, b];
const rle = ([a, b], [c, d]) => a * d <= c * b;

function within(actual, exactText, boundText) { // spec/compare.py's rule
  if (boundText === "inf") return true;
  if (!Number.isFinite(actual)) return false;
  const [p, q = 1n] = exactText.split("/").map(BigInt);
  const [ma, ea] = doubleParts(actual);
  const [mb, eb] = hexParts(boundText);
  const e = Math.min(ea, eb, 0); // scale everything to integers by 2^-e
  const a = ma << BigInt(ea - e), b = mb << BigInt(eb - e), exact = p << BigInt(-e);
  const diff = a * q - exact;
  return (diff < 0n ? -diff : diff) <= b * q;
}

// ---- the engine ---------------------------------------------------------------------------
const size = (shape) => shape.reduce((n, d) => n * d, 1);
const same = (a, b) => a.length === b.length && a.every((d, i) => d === b[i]);

class Mismatch extends Error {
  constructor(a, b) { super("shape mismatch"); this.shapes = SWAPPED ? [b, a] : [a, b]; }
}

function broadcastShape(a, b) {
  const rank = Math.max(a.length, b.length), out = [];
  for (let k = 0; k < rank; k++) {
    const x = a[a.length - rank + k] ?? 1, y = b[b.length - rank + k] ?? 1;
    if (x !== y && x !== 1 && y !== 1) throw new Mismatch(a, b);
    out.push(x === 1 ? y : x);
  }
  return out;
}

function sourceIndex(i, out, shape) { // flat index into `shape` broadcast to `out`
  let src = 0, stride = 1;
  for (let k = out.length - 1, j = shape.length - 1; k >= 0; k--, j--) {
    const coord = i % out[k];
    i = Math.floor(i / out[k]);
    if (j >= 0) { if (shape[j] !== 1) src += coord * stride; stride *= shape[j]; }
  }
  return src;
}

function elementwise(a, b, f, shape) {
  const data = new Float64Array(size(shape));
  for (let i = 0; i < data.length; i++) {
    data[i] = f(a.data[sourceIndex(i, shape, a.shape)], b.data[sourceIndex(i, shape, b.shape)]);
  }
  return { shape, data };
}

function unbroadcast(g, shape, outShape) { // sum g over the axes `shape` was broadcast along
  const data = new Float64Array(size(shape));
  for (let i = 0; i < g.length; i++) data[sourceIndex(i, outShape, shape)] += g[i];
  return data;
}

function linear(x, w, transposeW) { // x (..., n) @ w (n, m), or x (..., m) @ w^T
  const [n, m] = transposeW ? [w.shape[1], w.shape[0]] : w.shape;
  const rows = size(x.shape) / n || 0, data = new Float64Array(rows * m);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < m; j++) {
      let s = 0;
      for (let i = 0; i < n; i++) s += x.data[r * n + i] * w.data[transposeW ? j * n + i : i * m + j];
      data[r * m + j] = s;
    }
  }
  return { shape: [...x.shape.slice(0, -1), m], data };
}

function forward(node, args) {
  const [a, b] = args;
  switch (node.op) {
    case "residual_add":
      if (!same(a.shape, b.shape)) throw new Mismatch(a.shape, b.shape);
      return elementwise(a, b, (x, y) => x + y, a.shape);
    case "add": return elementwise(a, b, (x, y) => x + y, broadcastShape(a.shape, b.shape));
    case "mul": return elementwise(a, b, (x, y) => x * y, broadcastShape(a.shape, b.shape));
    case "scale": return { shape: a.shape, data: a.data.map((x) => x * alpha(node)) };
    case "relu": return { shape: a.shape, data: a.data.map((x) => (x > 0 ? x : 0)) };
    case "tanh": return { shape: a.shape, data: a.data.map(Math.tanh) };
    case "sum": return { shape: [], data: Float64Array.of(a.data.reduce((s, x) => s + x, 0)) };
    case "linear":
      if (b.shape.length !== 2 || a.shape.length < 1 || a.shape.at(-1) !== b.shape[0]) {
        throw new Mismatch(a.shape, b.shape);
      }
      return linear(a, b, false);
  }
  throw new Error(`unsupported op ${node.op}`);
}

function alpha(node) {
  const [p, q = "1"] = String(node.alpha).split("/");
  const a = Number(p) / Number(q);
  return ALPHA_TWICE ? a * a : a;
}

function backward(node, args, out, g) { // the gradient parts of node's arguments
  const [a, b] = args;
  switch (node.op) {
    case "residual_add":
      return [BUG ? new Float64Array(g.length) : g.slice(), g.slice()];
    case "add": return [unbroadcast(g, a.shape, out.shape), unbroadcast(g, b.shape, out.shape)];
    case "mul": {
      const ga = g.map((v, i) => v * b.data[sourceIndex(i, out.shape, b.shape)]);
      const gb = g.map((v, i) => v * a.data[sourceIndex(i, out.shape, a.shape)]);
      return [unbroadcast(ga, a.shape, out.shape), unbroadcast(gb, b.shape, out.shape)];
    }
    case "scale": return [g.map((v) => v * alpha(node))];
    case "relu": return [g.map((v, i) => (a.data[i] > 0 ? v : 0))];
    case "tanh": return [g.map((v, i) => v * (1 - out.data[i] * out.data[i]))];
    case "sum": return [new Float64Array(a.data.length).fill(g[0])];
    case "linear": {
      const gx = linear({ shape: out.shape, data: g }, b, true).data;
      const n = b.shape[0], m = b.shape[1], rows = out.data.length / m || 0;
      const gw = new Float64Array(n * m);
      for (let r = 0; r < rows; r++) {
        for (let i = 0; i < n; i++) for (let j = 0; j < m; j++) gw[i * m + j] += a.data[r * n + i] * g[r * m + j];
      }
      return [gx, gw];
    }
  }
  throw new Error(`unsupported op ${node.op}`);
}

function pushTangent(node, args, out, ts) { // the tangent of node's output, J·t (forward mode)
  const [a, b] = args, [ta, tb] = ts;
  switch (node.op) {
    case "residual_add":
      return BUG ? tb.data.slice() : elementwise(ta, tb, (x, y) => x + y, out.shape).data;
    case "add": return elementwise(ta, tb, (x, y) => x + y, out.shape).data;
    case "mul": {
      const left = elementwise(ta, b, (x, y) => x * y, out.shape).data;
      return elementwise(a, tb, (x, y) => x * y, out.shape).data.map((v, i) => left[i] + v);
    }
    case "scale": return ta.data.map((v) => v * alpha(node));
    case "relu": return ta.data.map((v, i) => (a.data[i] > 0 ? v : 0));
    case "tanh": return ta.data.map((v, i) => v * (1 - out.data[i] * out.data[i]));
    case "sum": return Float64Array.of(ta.data.reduce((s, x) => s + x, 0));
    case "linear": {
      const left = linear(ta, b, false).data, right = linear(a, tb, false).data;
      return left.map((v, i) => v + right[i]);
    }
  }
  throw new Error(`unsupported op ${node.op}`);
}

function run(request) { // -> {output, grads[, tangent]} or {error, shapes}
  const env = new Map();
  for (const { name, shape } of request.program.inputs) {
    env.set(name, { shape, data: Float64Array.from(request.inputs[name].data, hexFloat) });
  }
  try {
    for (const node of request.program.nodes) env.set(node.name, forward(node, node.args.map((n) => env.get(n))));
  } catch (err) {
    if (err instanceof Mismatch) {
      if (STICKY) offset += 2 ** -20;
      return { error: "shape_mismatch", shapes: err.shapes };
    }
    throw err;
  }
  const found = env.get(request.program.output);
  const out = offset ? { shape: found.shape, data: found.data.map((v) => v + offset) } : found;
  let tangent;
  if (request.tangents) {
    const tan = new Map(request.program.inputs.map(({ name, shape }) =>
      [name, { shape, data: Float64Array.from(request.tangents[name].data, hexFloat) }]));
    for (const node of request.program.nodes) {
      const args = node.args.map((n) => env.get(n)), ts = node.args.map((n) => tan.get(n));
      tan.set(node.name, { shape: env.get(node.name).shape, data: pushTangent(node, args, env.get(node.name), ts) });
    }
    tangent = tan.get(request.program.output).data;
  }
  const grads = new Map([[request.program.output, Float64Array.from(request.cotangent.data, hexFloat)]]);
  for (const node of [...request.program.nodes].reverse()) {
    const g = grads.get(node.name);
    if (!g) continue;
    const args = node.args.map((n) => env.get(n));
    backward(node, args, env.get(node.name), g).forEach((part, k) => {
      const name = node.args[k], held = grads.get(name);
      grads.set(name, held ? held.map((v, i) => v + part[i]) : part);
    });
  }
  const inputGrads = {};
  for (const { name, shape } of request.program.inputs) inputGrads[name] = grads.get(name) ?? new Float64Array(size(shape));
  return { output: out, grads: inputGrads, tangent };
}

// ---- the corpus ---------------------------------------------------------------------------
function bits(values) { return Array.from(values, (x) => doubleParts(x).join(",") + (Object.is(x, -0) ? "-" : "")); }

function compare(what, actual, expected) {
  for (let i = 0; i < expected.exact.length; i++) {
    if (!within(actual[i], expected.exact[i], expected.budget[i])) {
      return `${what}[${i}] = ${actual[i]}, exact ${expected.exact[i]}, budget ${expected.budget[i]}`;
    }
  }
  return null;
}

const bitwise = (answer) => JSON.stringify(answer, (k, v) => (v instanceof Float64Array ? bits(v) : v));

function refusal(entry, first) { // the checks of an expected error, each on its own
  const { expect, checks } = entry;
  if (checks.includes("error") && first.error !== expect.error) return `gives ${first.error ?? "a value"}, spec gives ${expect.error}`;
  // shapes: where the answer is the expected error, the shapes it names (another answer is error's to judge)
  if (checks.includes("shapes") && first.error === expect.error && JSON.stringify(first.shapes) !== JSON.stringify(expect.shapes)) {
    return `names shapes ${JSON.stringify(first.shapes)}, spec names ${JSON.stringify(expect.shapes)}`;
  }
  return null;
}

function check(entry) { // null when the entry passes, else what failed
  const { request, expect, checks } = entry;
  const sent = JSON.stringify(request);
  const before = checks.includes("state") ? [run(entry.probe), run(entry.probe)] : [];
  const first = run(request);
  if (checks.includes("deterministic") && bitwise(first) !== bitwise(run(request))) return "two runs differ";
  if (checks.includes("untouched") && JSON.stringify(request) !== sent) return "changed its inputs";
  if (checks.includes("state")) {
    const probes = [...before, run(entry.probe)].map(bitwise);
    if (probes[0] !== probes[1]) return "the probe gives two answers before the request";
    if (probes[2] !== probes[0]) return "the probe's answer changed after the request: the request changed the engine's state";
  }
  if (expect.kind === "error") return refusal(entry, first);
  if (!checks.some((c) => ["form", "output", "grads", "tangent"].includes(c))) return null;
  if (first.error) return `refused: ${first.error}`;
  if (!same(first.output.shape, expect.output.shape)) return `output shape ${first.output.shape}`;
  const found = checks.includes("output") ? compare("output", first.output.data, expect.output) : null;
  if (found) return found;
  for (const [name, want] of checks.includes("grads") ? Object.entries(expect.grads) : []) {
    const bad = compare(`grads[${name}]`, first.grads[name], want);
    if (bad) return bad;
  }
  return checks.includes("tangent") && expect.tangent ? compare("tangent", first.tangent, expect.tangent) : null;
}

// ---- groups: a law relating several answers ----------------------------------------------
function pick(answer, array) {
  if (array === "output") return answer.output.data;
  if (array === "tangent") return answer.tangent;
  return answer.grads[array.slice("grads/".length)];
}

function linearRelation(rel, answers) { // null when |sum of coef * weight * value| <= bound
  const size = rel.bound.bound.length, sum = rel.reduce === "sum";
  if (sum && rel.bound.bound[0] === "inf") return null;
  const weight = (term, i) => (term.weights ? rational(term.weights.exact[i]) : [1n, 1n]);
  const needed = (term, i) => rel.finite === "all" || (sum ? weight(term, i)[0] !== 0n : rel.bound.bound[i] !== "inf");
  for (const term of rel.terms) {
    const values = pick(answers[term.request], term.array);
    for (let i = 0; i < values.length; i++) {
      if (!Number.isFinite(values[i]) && needed(term, i)) return `${rel.law}: ${term.array}[${i}] of request ${term.request} = ${values[i]}`;
    }
  }
  const part = (term, i) => { // coef * weight * value, exactly; a zero weight adds nothing
    const w = weight(term, i);
    return w[0] === 0n ? [0n, 1n] : rmul(rmul(rational(term.coef), w), exactDouble(pick(answers[term.request], term.array)[i]));
  };
  const gap = (i) => rel.terms.reduce((acc, term) => radd(acc, part(term, i)), [0n, 1n]);
  if (sum) {
    let total = [0n, 1n];
    for (const term of rel.terms) {
      const n = pick(answers[term.request], term.array).length;
      for (let i = 0; i < n; i++) total = radd(total, part(term, i));
    }
    return rle(rabs(total), rational(rel.bound.bound[0])) ? null : `${rel.law}: sum beyond its bound ${rel.bound.bound[0]}`;
  }
  for (let i = 0; i < size; i++) {
    if (rel.bound.bound[i] !== "inf" && !rle(rabs(gap(i)), rational(rel.bound.bound[i]))) {
      return `${rel.law}[${i}]: beyond its bound ${rel.bound.bound[i]}`;
    }
  }
  return null;
}

function checkGroup(group) { // null when the group passes, "SKIP ..." or what failed
  const unknown = group.relations.find((rel) => rel.kind !== "linear");
  if (unknown) return `SKIP relation ${unknown.kind} (its bound is the spec's budget of the engine's own answer)`;
  const answers = [];
  for (const request of group.requests) {
    const answer = run(request);
    if (answer.error) return `refused: ${answer.error}`;
    answers.push(answer);
  }
  for (const rel of group.relations) {
    const failure = linearRelation(rel, answers);
    if (failure) return failure;
  }
  return null;
}

const dir = process.argv.slice(2).find((a) => !a.startsWith("--"));
if (!dir) { console.error("usage: node run_corpus.mjs CORPUS_DIR [--bug[=alpha-twice|=swapped-shapes|=sticky-refusal]]"); process.exit(2); }
const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
const listed = manifest.entries;
let passed = 0, failed = 0, skipped = 0;
console.log(`1..${listed.length}`);
listed.forEach((listing, k) => {
  if (listing.dtype !== "float64" || !listing.ops.every((op) => OPS.has(op))) {
    skipped++;
    console.log(`ok ${k + 1} ${listing.id} # SKIP ${listing.dtype} ${listing.ops.join(",")}`);
    return;
  }
  const doc = JSON.parse(readFileSync(join(dir, listing.file), "utf8"));
  const failure = listing.expect === "group" ? checkGroup(doc) : check(doc);
  if (failure && failure.startsWith("SKIP")) { skipped++; console.log(`ok ${k + 1} ${listing.id} # ${failure}`); return; }
  if (failure) { failed++; console.log(`not ok ${k + 1} ${listing.id} - ${failure}`); } else { passed++; console.log(`ok ${k + 1} ${listing.id}`); }
});
console.log(`# ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed || !passed ? 1 : 0);

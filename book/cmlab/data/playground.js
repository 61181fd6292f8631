/* ChainMark attack playground: edit a watermarked text and watch the model-free detector answer.
 *
 * chainmark.playground writes a div.cm-playground holding its data as a JSON script element
 * (the packed byte-level BPE tokenizer, the state of every token id under the reference key,
 * the sample texts), followed by an inline script: mount.js (the glue shared with the
 * explorers), this file, then ChainMarkPlayground.mountFrom(document.currentScript, id).
 * Everything runs here: tokenizer, state lookup, phi, z, p-value, token-level Levenshtein,
 * the window scan and the anytime e-value. No external script, font or request. The tests check
 * the tokenizer against the Python one, the scores against chainmark.detect and the e-value
 * against chainmark.auditor.anytime.
 */
(function () {
  "use strict";
  var VERSION = "3";
  if (window.ChainMarkPlayground && window.ChainMarkPlayground.version === VERSION) {
    return;
  }
  var PG = { version: VERSION, instances: {} };
  var el = window.ChainMarkMount.el, svg = window.ChainMarkMount.svg;

  // ------------------------------------------------------------------ the tokenizer

  /* Whitespace as the Rust tokenizers' regex engine (Oniguruma) reads \s: the Unicode
   * White_Space characters, written out because JavaScript's \s also holds U+FEFF and
   * lacks U+0085. */
  var WS = "\\t\\n\\v\\f\\r \\x85\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
  /* GPT-2's split, which the ByteLevel pre-tokenizer applies (use_regex = true). */
  var SPLIT = new RegExp("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + WS + "\\p{L}\\p{N}]+|[" + WS +
    "]+(?![^" + WS + "])|[" + WS + "]+", "gu");
  var POS_BITS = 16777216; // 2^24: heap keys are rank * 2^24 + position

  function decodeBase64(text, idBytes) {
    var bin = atob(text), n = bin.length, bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) { bytes[i] = bin.charCodeAt(i); }
    return idBytes === 2 ? new Uint16Array(bytes.buffer) : new Uint32Array(bytes.buffer);
  }

  /* A byte-level BPE tokenizer from chainmark.playground.tokenizer_payload. */
  function Tokenizer(p) {
    var V = p.vocab_size, i;
    this.vocabSize = V;
    this.base = Int32Array.from(p.base);
    this.added = p.added.slice().sort(function (a, b) { return b.content.length - a.content.length; });
    var flat = decodeBase64(p.merges, p.id_bytes);
    var nm = p.n_merges;
    this.rankOf = new Map();
    this.result = new Int32Array(nm);
    this.left = new Int32Array(V).fill(-1);
    this.right = new Int32Array(V).fill(-1);
    for (i = 0; i < nm; i++) {
      var a = flat[3 * i], b = flat[3 * i + 1], r = flat[3 * i + 2];
      var key = a * V + b;
      if (!this.rankOf.has(key)) { this.rankOf.set(key, i); }
      this.result[i] = r;
      this.left[r] = a;
      this.right[r] = b;
    }
    this.byteOf = new Int32Array(V).fill(-1);
    for (i = 0; i < 256; i++) { if (this.base[i] >= 0) { this.byteOf[this.base[i]] = i; } }
    this.addedText = {};
    for (i = 0; i < p.added.length; i++) { this.addedText[p.added[i].id] = p.added[i].content; }
    this.cache = new Map();
    this.shown = new Map();
    this.encoder = new TextEncoder();
  }

  /* Ids of one pre-tokenized piece: its UTF-8 bytes as base tokens (bytes missing from the
   * vocabulary are dropped), then merges applied lowest rank first, leftmost first among
   * equal ranks, exactly as the Rust Word::merge_all does with its priority queue. */
  Tokenizer.prototype.bpe = function (piece) {
    var bytes = this.encoder.encode(piece), V = this.vocabSize;
    var c = [], i, id;
    for (i = 0; i < bytes.length; i++) {
      id = this.base[bytes[i]];
      if (id >= 0) { c.push(id); }
    }
    var n = c.length;
    if (n < 2) { return c; }
    var prev = new Int32Array(n), next = new Int32Array(n), gone = new Uint8Array(n);
    var heap = [], rankOf = this.rankOf, result = this.result, r;
    for (i = 0; i < n; i++) { prev[i] = i - 1; next[i] = i + 1 < n ? i + 1 : -1; }
    for (i = 0; i + 1 < n; i++) {
      r = rankOf.get(c[i] * V + c[i + 1]);
      if (r !== undefined) { heapPush(heap, r * POS_BITS + i); }
    }
    while (heap.length) {
      var top = heapPop(heap), rank = Math.floor(top / POS_BITS), pos = top - rank * POS_BITS;
      if (gone[pos]) { continue; }
      var nx = next[pos];
      if (nx < 0) { continue; }
      r = rankOf.get(c[pos] * V + c[nx]);
      if (r === undefined || result[r] !== result[rank]) { continue; } // an expired entry
      c[pos] = result[rank];
      gone[nx] = 1;
      next[pos] = next[nx];
      if (next[nx] >= 0) { prev[next[nx]] = pos; }
      if (prev[pos] >= 0) {
        r = rankOf.get(c[prev[pos]] * V + c[pos]);
        if (r !== undefined) { heapPush(heap, r * POS_BITS + prev[pos]); }
      }
      if (next[pos] >= 0) {
        r = rankOf.get(c[pos] * V + c[next[pos]]);
        if (r !== undefined) { heapPush(heap, r * POS_BITS + pos); }
      }
    }
    var out = [];
    for (i = 0; i >= 0; i = next[i]) { out.push(c[i]); }
    return out;
  };

  function heapPush(h, x) {
    var i = h.length;
    h.push(x);
    while (i > 0) {
      var parent = (i - 1) >> 1;
      if (h[parent] <= x) { break; }
      h[i] = h[parent];
      i = parent;
    }
    h[i] = x;
  }

  function heapPop(h) {
    var top = h[0], last = h.pop(), n = h.length, i = 0;
    if (n === 0) { return top; }
    while (true) {
      var l = 2 * i + 1, r = l + 1, m = i, mv = last;
      if (l < n && h[l] < mv) { m = l; mv = h[l]; }
      if (r < n && h[r] < mv) { m = r; mv = h[r]; }
      if (m === i) { break; }
      h[i] = h[m];
      i = m;
    }
    h[i] = last;
    return top;
  }

  /* The text split around special tokens (leftmost match, the longest where several start
   * at the same place): [{text} | {id}] in order. */
  Tokenizer.prototype.splitAdded = function (text) {
    var parts = [], at = 0;
    while (at < text.length) {
      var best = -1, bestToken = null;
      for (var k = 0; k < this.added.length; k++) {
        var j = text.indexOf(this.added[k].content, at);
        if (j >= 0 && (best < 0 || j < best)) { best = j; bestToken = this.added[k]; }
      }
      if (best < 0) { break; }
      if (best > at) { parts.push({ text: text.slice(at, best) }); }
      parts.push({ id: bestToken.id });
      at = best + bestToken.content.length;
    }
    if (at < text.length) { parts.push({ text: text.slice(at) }); }
    return parts;
  };

  /* Token ids of a text, as tokenizer.encode(text, add_special_tokens=False). */
  Tokenizer.prototype.encode = function (text) {
    var ids = [], parts = this.splitAdded(text);
    if (this.cache.size > 100000) { this.cache.clear(); }
    for (var k = 0; k < parts.length; k++) {
      if (parts[k].text === undefined) { ids.push(parts[k].id); continue; }
      var pieces = parts[k].text.match(SPLIT) || [];
      for (var i = 0; i < pieces.length; i++) {
        var got = this.cache.get(pieces[i]);
        if (got === undefined) { got = this.bpe(pieces[i]); this.cache.set(pieces[i], got); }
        for (var j = 0; j < got.length; j++) { ids.push(got[j]); }
      }
    }
    return ids;
  };

  /* The bytes a token id stands for. */
  Tokenizer.prototype.bytesOf = function (id) {
    if (this.byteOf[id] >= 0) { return [this.byteOf[id]]; }
    if (this.left[id] >= 0) { return this.bytesOf(this.left[id]).concat(this.bytesOf(this.right[id])); }
    if (this.addedText[id] !== undefined) { return Array.from(this.encoder.encode(this.addedText[id])); }
    return [];
  };

  var strictUtf8 = new TextDecoder("utf-8", { fatal: true });
  var looseUtf8 = new TextDecoder("utf-8");

  /* A token as text for its tile: bytes that are not whole characters are shown in hex. */
  Tokenizer.prototype.label = function (id) {
    var s = this.shown.get(id);
    if (s !== undefined) { return s; }
    var bytes = this.bytesOf(id);
    try {
      s = strictUtf8.decode(new Uint8Array(bytes));
    } catch (e) {
      s = "‹" + bytes.map(function (b) { return b.toString(16).padStart(2, "0"); }).join(" ") + "›";
    }
    this.shown.set(id, s);
    return s;
  };

  /* Text of a sequence of ids (what tokenizer.decode gives, invalid bytes as U+FFFD). */
  Tokenizer.prototype.decode = function (ids) {
    var all = [];
    for (var i = 0; i < ids.length; i++) { Array.prototype.push.apply(all, this.bytesOf(ids[i])); }
    return looseUtf8.decode(new Uint8Array(all));
  };

  PG.Tokenizer = Tokenizer;

  // ------------------------------------------------------------------ statistics

  /* erfc(x) for x >= 0: a positive series for erf below 2.5, a continued fraction above
   * (modified Lentz); relative error about 1e-13 or better. */
  function erfcPositive(x) {
    if (x < 2.5) {
      var term = x, sum = x, n = 0, x2 = x * x;
      while (Math.abs(term) > 1e-17 * sum) {
        n += 1;
        term *= 2 * x2 / (2 * n + 1);
        sum += term;
      }
      return 1 - 2 / Math.sqrt(Math.PI) * Math.exp(-x2) * sum;
    }
    var tiny = 1e-300, f = x, C = x, D = 0;
    for (var j = 1; j < 500; j++) {
      var a = j / 2;
      D = x + a * D;
      D = D === 0 ? 1 / tiny : 1 / D;
      C = x + a / C;
      if (C === 0) { C = tiny; }
      var delta = C * D;
      f *= delta;
      if (Math.abs(delta - 1) < 1e-16) { break; }
    }
    return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
  }

  /* One-sided normal tail 1 - Phi(z) (scipy's ndtr(-z)). */
  function normSf(z) {
    if (z !== z) { return NaN; }
    if (z === Infinity) { return 0; }
    if (z === -Infinity) { return 1; }
    var x = z / Math.SQRT2;
    return x >= 0 ? 0.5 * erfcPositive(x) : 1 - 0.5 * erfcPositive(-x);
  }

  /* z_alpha: the z whose upper tail is alpha (bisection on normSf to the last bit). */
  function zAlpha(alpha) {
    var lo = -40, hi = 40;
    for (var i = 0; i < 200; i++) {
      var mid = (lo + hi) / 2;
      if (mid === lo || mid === hi) { break; }
      if (normSf(mid) > alpha) { lo = mid; } else { hi = mid; }
    }
    return (lo + hi) / 2;
  }

  /* chainmark.detect on the clockwork: every transition scored, p0 = 1/S. */
  function score(ids, table, S, alpha) {
    var n = ids.length, states = new Uint8Array(n), i;
    for (i = 0; i < n; i++) { states[i] = table[ids[i]]; }
    var valid = new Uint8Array(n); // valid[i]: the step into token i is legal
    if (n < 2) {
      return { n: n, m: 0, c: 0, phi: 0, z: 0, p: 1, flagged: false, states: states, valid: valid };
    }
    var c = 0;
    for (i = 1; i < n; i++) {
      var d = states[i] - states[i - 1];
      if (d === 1 || d === 1 - S) { valid[i] = 1; c++; }
    }
    var m = n - 1, p0 = 1 / S, phi = c / m;
    var z = (phi - p0) / Math.sqrt(p0 * (1.0 - p0) / m);
    var p = normSf(z);
    return { n: n, m: m, c: c, phi: phi, z: z, p: p, flagged: p < alpha, states: states, valid: valid };
  }

  /* Token-level Levenshtein distance (insertions, deletions, substitutions cost 1). */
  function levenshtein(a, b) {
    var n = a.length, m = b.length;
    if (n === 0) { return m; }
    if (m === 0) { return n; }
    var row = new Int32Array(m + 1), j;
    for (j = 0; j <= m; j++) { row[j] = j; }
    for (var i = 1; i <= n; i++) {
      var diag = row[0], ai = a[i - 1];
      row[0] = i;
      for (j = 1; j <= m; j++) {
        var up = row[j];
        var best = diag + (ai === b[j - 1] ? 0 : 1);
        if (up + 1 < best) { best = up + 1; }
        if (row[j - 1] + 1 < best) { best = row[j - 1] + 1; }
        row[j] = best;
        diag = up;
      }
    }
    return row[m];
  }

  /* chainmark.attacks.edit_fraction: distance / original length. */
  function editFraction(original, edited) {
    if (original.length === 0) { return edited.length ? NaN : 0; }
    return levenshtein(original, edited) / original.length;
  }

  /* The fewest token substitutions that can flip a flagged text to "not detected": each
   * one breaks at most two legal steps, and the verdict flips once the legal count falls
   * to p0 m + z_alpha sqrt(p0 (1 - p0) m). */
  function perfectAttackEdits(res, S, za) {
    var p0 = 1 / S, excess = res.c - p0 * res.m, allowed = za * Math.sqrt(p0 * (1 - p0) * res.m);
    return Math.max(0, Math.ceil((excess - allowed) / 2));
  }

  /* The fewest substitutions that can make an unflagged text flagged (two legal steps each). */
  function perfectForgeEdits(res, S, za) {
    if (res.m === 0) { return 0; }
    var p0 = 1 / S, excess = res.c - p0 * res.m, allowed = za * Math.sqrt(p0 * (1 - p0) * res.m);
    return Math.max(0, Math.floor((allowed - excess) / 2) + 1);
  }

  /* The window scan of chainmark.auditor.segments._spans_above, step for step: windows of minWindow, 2 minWindow, ...
     transitions at every start, flagged when z > threshold; flagged windows that overlap or touch joined into
     regions; each region, padded by its longest flagged window, segmented in two states (legal at p0, or at
     the rate of the region's strongest window; a switch costs log(m)); runs of at least minWindow that
     overlap a flagged window become spans; spans closer than minWindow joined.
     valid[i] (i >= 1) is the legal step into token i, so transition t is valid[t + 1]. */
  function markedRuns(valid, lo, hi, p0, p1, penalty) {
    var up = Math.log(p1 / p0), down = Math.log((1 - p1) / (1 - p0)), plain = 0, marked = 0, i;
    var came0 = new Uint8Array(Math.max(hi - lo, 0)), came1 = new Uint8Array(Math.max(hi - lo, 0));
    for (i = 0; i < hi - lo; i++) {
      var stay0 = plain, switch0 = marked - penalty, stay1 = marked, switch1 = plain - penalty;
      came0[i] = switch0 > stay0 ? 1 : 0;
      came1[i] = switch1 > stay1 ? 1 : 0;
      plain = Math.max(stay0, switch0);
      marked = Math.max(stay1, switch1) + (valid[lo + i + 1] ? up : down);
    }
    var state = marked > plain ? 1 : 0, runs = [], end = null;
    for (i = hi - lo - 1; i >= 0; i--) {
      if (state === 1 && end === null) { end = lo + i + 1; }
      var switched = (state === 1 ? came1[i] : came0[i]) === 1;
      if (state === 1 && (switched || i === 0)) { runs.push([lo + i, end]); end = null; }
      if (switched) { state = 1 - state; }
    }
    return runs.reverse();
  }

  function findSpans(valid, S, threshold, minWindow) {
    var m = valid.length - 1, p0 = 1 / S, t, w, a;
    if (m < minWindow) { return []; }
    var csum = new Int32Array(m + 1);
    for (t = 0; t < m; t++) { csum[t + 1] = csum[t] + valid[t + 1]; }
    var flagged = [];
    for (w = minWindow; w <= m; w *= 2) {
      var sd = Math.sqrt(w * p0 * (1 - p0));
      for (a = 0; a + w <= m; a++) {
        var z = (csum[a + w] - csum[a] - w * p0) / sd;
        if (z > threshold) { flagged.push([z, a, w]); }
      }
    }
    flagged.sort(function (x, y) { return y[0] - x[0] || x[1] - y[1] || x[2] - y[2]; });
    var byStart = flagged.map(function (f) { return [f[1], f[1] + f[2]]; });
    byStart.sort(function (x, y) { return x[0] - y[0] || x[1] - y[1]; });
    var regions = [];
    byStart.forEach(function (iv) {
      var last = regions[regions.length - 1];
      if (last && iv[0] <= last[1]) { last[1] = Math.max(last[1], iv[1]); } else { regions.push([iv[0], iv[1]]); }
    });
    var penalty = Math.log(Math.max(m, 2)), spans = [];
    regions.forEach(function (region) {
      var lo = region[0], hi = region[1];
      var inside = flagged.filter(function (f) { return lo <= f[1] && f[1] + f[2] <= hi; });
      var top = inside[0], p1 = Math.min((csum[top[1] + top[2]] - csum[top[1]]) / top[2], 0.99);
      if (p1 <= p0) { return; }
      var pad = Math.max.apply(null, inside.map(function (f) { return f[2]; }));
      markedRuns(valid, Math.max(0, lo - pad), Math.min(m, hi + pad), p0, p1, penalty).forEach(function (run) {
        var s = run[0], e = run[1];
        var support = inside.filter(function (f) { return f[1] < e && s < f[1] + f[2]; });
        if (e - s >= minWindow && support.length) { spans.push([s, e + 1, support[0][0], support[0][2]]); }
      });
    });
    spans.sort(function (x, y) { return x[0] - y[0] || x[1] - y[1] || x[2] - y[2] || x[3] - y[3]; });
    var merged = [];
    spans.forEach(function (sp) {
      var last = merged[merged.length - 1];
      if (last && sp[0] - last[1] < minWindow) {
        var best = last[2] >= sp[2] ? last : sp;
        merged[merged.length - 1] = [last[0], Math.max(last[1], sp[1]), best[2], best[3]];
      } else {
        merged.push(sp);
      }
    });
    return merged;
  }

  /* The threshold of the smallest length class that holds n tokens (the largest class beyond it). */
  function segmentThreshold(n, seg) {
    for (var k = 0; k < seg.lengths.length; k++) { if (n <= seg.lengths[k]) { return seg.thresholds[k]; } }
    return seg.thresholds[seg.thresholds.length - 1];
  }

  /* The anytime e-process of chainmark.auditor.anytime, step for step: a transition is scored only when it
     reaches a token's first occurrence in the text; after h legal among m scored transitions
       log E = logsumexp_i [log w_i + h log(q_i/p0) + (m - h) log((1 - q_i)/(1 - p0))]
     over GRID_POINTS rates q_i = p0 + (1 - p0) u_i, u_i = (i + 0.5)/GRID_POINTS, weighted by the Beta(a, b)
     density in u (_default_prior: mean rho clipped into [0.05, 0.95], a + b = PRIOR_STRENGTH). Sums are numpy's
     pairwise sums and logsumexp is scipy's (maximum split out, log1p of the rest), so the numbers agree with
     the package to rounding. */
  var GRID_POINTS = 100, PRIOR_STRENGTH = 4.0, DEFAULT_RHO = 0.5;

  /* numpy's pairwise summation (pairwise_sum in loops_utils.h): below 8 terms in order, up to 128 in eight
     running sums, above that halves split at a multiple of 8. */
  function pairwiseSum(a, lo, n) {
    var res, i;
    if (n < 8) {
      res = -0.0;
      for (i = 0; i < n; i++) { res += a[lo + i]; }
      return res;
    }
    if (n <= 128) {
      var r0 = a[lo], r1 = a[lo + 1], r2 = a[lo + 2], r3 = a[lo + 3], r4 = a[lo + 4], r5 = a[lo + 5],
        r6 = a[lo + 6], r7 = a[lo + 7];
      for (i = 8; i < n - (n % 8); i += 8) {
        r0 += a[lo + i]; r1 += a[lo + i + 1]; r2 += a[lo + i + 2]; r3 += a[lo + i + 3];
        r4 += a[lo + i + 4]; r5 += a[lo + i + 5]; r6 += a[lo + i + 6]; r7 += a[lo + i + 7];
      }
      res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
      for (; i < n; i++) { res += a[lo + i]; }
      return res;
    }
    var n2 = Math.floor(n / 2);
    n2 -= n2 % 8;
    return pairwiseSum(a, lo, n2) + pairwiseSum(a, lo + n2, n - n2);
  }

  /* scipy.special.logsumexp of a finite array: the largest terms split out (k of them), the rest summed
     as exp(x - max), then log1p(s / k) + log(k) + max. `scratch` (same length) is overwritten. */
  function logSumExp(x, scratch) {
    var n = x.length, top = -Infinity, ties = 0, i;
    for (i = 0; i < n; i++) { if (x[i] > top) { top = x[i]; } }
    for (i = 0; i < n; i++) {
      if (x[i] === top) { ties += 1; scratch[i] = 0; } else { scratch[i] = Math.exp(x[i] - top); }
    }
    var s = pairwiseSum(scratch, 0, n);
    if (s !== 0) { s = s / ties; }
    return Math.log1p(s) + Math.log(ties) + top;
  }

  /* chainmark.auditor.anytime._default_prior. */
  function defaultPrior(rho) {
    var mean = Math.min(Math.max(rho, 0.05), 0.95);
    return [PRIOR_STRENGTH * mean, PRIOR_STRENGTH * (1.0 - mean)];
  }

  var grids = {};
  /* chainmark.auditor.anytime.bet_grid(p0, rho): the rates q, their log weights (summing to 1) and each
     rate's log-likelihood ratio for a legal (up) and an illegal (down) transition. */
  function betGrid(p0, rho) {
    var name = p0 + "|" + rho;
    if (grids[name]) { return grids[name]; }
    var ab = defaultPrior(rho), a = ab[0], b = ab[1], n = GRID_POINTS, i;
    var u = new Float64Array(n), dens = new Float64Array(n), scratch = new Float64Array(n);
    for (i = 0; i < n; i++) {
      u[i] = (i + 0.5) / n;
      dens[i] = (a - 1.0) * Math.log(u[i]) + (b - 1.0) * Math.log1p(-u[i]);
    }
    var norm = logSumExp(dens, scratch), base = Math.log1p(-p0);
    var g = { p0: p0, prior: ab, u: u, q: new Float64Array(n), logWeights: new Float64Array(n),
      up: new Float64Array(n), down: new Float64Array(n), terms: new Float64Array(n), scratch: scratch,
      cache: new Map() };
    for (i = 0; i < n; i++) {
      g.logWeights[i] = dens[i] - norm;
      g.q[i] = p0 + (1.0 - p0) * u[i];
      g.up[i] = Math.log(g.q[i] / p0);
      g.down[i] = Math.log1p(-g.q[i]) - base;
    }
    grids[name] = g;
    return g;
  }

  /* BetGrid.log_e: log E after h legal among m scored transitions. Remembered per (h, m): an edit leaves
     the counts before it as they were, so after a keystroke only the steps past the caret may need computing. */
  function logE(grid, h, m) {
    var name = m * 67108864 + h, got = grid.cache.get(name);
    if (got !== undefined) { return got; }
    var t = grid.terms, w = grid.logWeights, up = grid.up, down = grid.down;
    for (var i = 0; i < t.length; i++) { t[i] = (w[i] + h * up[i]) + (m - h) * down[i]; }
    got = logSumExp(t, grid.scratch);
    if (grid.cache.size >= 200000) { grid.cache.clear(); }
    grid.cache.set(name, got);
    return got;
  }

  /* chainmark.auditor.anytime.anytime_detect on the clockwork (p0 = 1/S): valid[i] is the legal step into
     token i (score's array). Returns log E at the end and at its largest (E_0 = 1 included), the first token
     whose step took E to 1/alpha or above (null if none), m scored and h legal transitions, and log E after
     each token (track[i], 0 before the first scored one). */
  function anytime(ids, valid, S, alpha, rho) {
    var n = ids.length, grid = betGrid(1 / S, rho === undefined ? DEFAULT_RHO : rho);
    var bound = Math.log(1.0 / alpha), seen = new Set(), track = new Float64Array(n);
    var m = 0, h = 0, now = 0, top = 0, crossing = null;
    for (var i = 0; i < n; i++) {
      var fresh = !seen.has(ids[i]);
      if (fresh) { seen.add(ids[i]); }
      if (i > 0 && fresh) {
        m += 1;
        if (valid[i]) { h += 1; }
        now = logE(grid, h, m);
        if (now > top) { top = now; }
        if (crossing === null && now >= bound) { crossing = i; }
      }
      track[i] = now;
    }
    return { logE: now, maxLogE: top, crossing: crossing, crossed: crossing !== null, m: m, h: h, n: n,
      bound: bound, track: track, prior: grid.prior };
  }

  PG.math = { normSf: normSf, zAlpha: zAlpha, score: score, levenshtein: levenshtein,
    editFraction: editFraction, perfectAttackEdits: perfectAttackEdits, perfectForgeEdits: perfectForgeEdits,
    findSpans: findSpans, segmentThreshold: segmentThreshold, pairwiseSum: pairwiseSum, logSumExp: logSumExp,
    defaultPrior: defaultPrior, betGrid: betGrid, logE: logE, anytime: anytime, DEFAULT_RHO: DEFAULT_RHO };

  // ------------------------------------------------------------------ formatting and DOM

  var SUP = { "-": "⁻", "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹" };
  function power(e) { return "10" + String(e).split("").map(function (ch) { return SUP[ch]; }).join(""); }

  function fmtP(p, z) {
    if (p === 0) { // below the smallest double: say its order from the normal tail's asymptote
      var log10 = (-z * z / 2 - Math.log(z * Math.sqrt(2 * Math.PI))) / Math.LN10;
      return "≈ " + power(Math.floor(log10));
    }
    if (p >= 0.001) { return p.toFixed(p >= 0.1 ? 2 : 4); }
    var parts = p.toExponential(1).split("e");
    return parts[0] + " × " + power(parseInt(parts[1], 10));
  }

  /* E from its natural log: three digits between 10⁻³ and 10³, else m.m × 10ᵏ (from the log, so values past a
     double's range are shown too). */
  function fmtE(logE) {
    var log10 = logE / Math.LN10;
    if (log10 > -3 && log10 < 3) { return Math.exp(logE).toPrecision(3); }
    var k = Math.floor(log10), mant = Math.pow(10, log10 - k).toFixed(1);
    if (mant === "10.0") { mant = "1.0"; k += 1; }
    return mant + " × " + power(k);
  }

  function pct(x) { return (100 * x).toFixed(1) + "%"; }

  function escapeHtml(s) {
    return s.replace(/&/g, "&amp;").replace(/[<]/g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function shownToken(s) {
    var t = s.replace(/\r\n/g, "⏎").replace(/[\n\r]/g, "⏎").replace(/\t/g, "⇥");
    return escapeHtml(t).replace(/ /g, "&nbsp;") || "&nbsp;";
  }

  function readout(container, field, label, title) {
    var value = el("span", { "class": "cm-value", "data-field": field, "data-value": "" });
    container.appendChild(el("div", { "class": "cm-readout", title: title || "" },
      [el("span", { "class": "cm-label", text: label }), value]));
    return function (x, text) {
      value.setAttribute("data-value", String(x));
      value.textContent = text;
    };
  }

  function textColour(hex) { // black or white, whichever reads better on the colour
    var v = parseInt(hex.slice(1), 16), r = (v >> 16) / 255, g = (v >> 8 & 255) / 255, b = (v & 255) / 255;
    var lin = function (u) { return u <= 0.03928 ? u / 12.92 : Math.pow((u + 0.055) / 1.055, 2.4); };
    var L = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
    return (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) ? "#000" : "#fff";
  }

  function stateStyles(uid, S, colours) {
    var rules = [];
    for (var s = 0; s < S; s++) {
      var c = colours[s % colours.length];
      rules.push("#" + uid + " .cm-s" + s + "{background:" + c + "33;border-color:" + c + "}" +
        "#" + uid + " .cm-s" + s + " .cm-d{background:" + c + ";color:" + textColour(c) + "}");
    }
    return el("style", { text: rules.join("\n") });
  }

  // ------------------------------------------------------------------ the plot

  function plot(box, st) {
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var W = 460, H = 250, L = 46, R = 12, T = 12, B = 38;
    // a forger works near the start: show the challenge's budget and a little more
    var xmax = Math.max(st.flagged0 ? 1 : st.budget + 0.05, Math.ceil(st.delta * 10) / 10 || 0);
    var zTop = Math.max(st.z0, st.res.z, st.za + (st.flagged0 ? 0 : 3)) * 1.08 + 0.5;
    var zBot = Math.min(-3, st.res.z - 0.5);
    var X = function (d) { return L + d / xmax * (W - L - R); };
    var Y = function (z) { return T + (zTop - z) / (zTop - zBot) * (H - T - B); };
    var s = svg("svg", { "class": "cm-plot", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
      "aria-label": "z against the edit fraction" });
    s.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fff", stroke: "#c9ced8" }));
    var i, d;
    for (i = 0; i <= 5; i++) {
      d = xmax * i / 5;
      s.appendChild(svg("text", { x: X(d), y: H - B + 14, "text-anchor": "middle", "class": "cm-tick" },
        (Math.round(1000 * d) / 10) + "%"));
    }
    var step = (zTop - zBot) > 30 ? 10 : 5;
    for (var zt = Math.ceil(zBot / step) * step; zt <= zTop; zt += step) {
      s.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(zt), y2: Y(zt), stroke: "#eef0f4" }));
      s.appendChild(svg("text", { x: L - 5, y: Y(zt) + 4, "text-anchor": "end", "class": "cm-tick" }, String(zt)));
    }
    s.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "class": "cm-axis" },
      "edit fraction δ (token-level Levenshtein / original length)"));
    s.appendChild(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", "class": "cm-axis",
      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" }, "z (standard deviations)"));
    // the detection threshold
    s.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(st.za), y2: Y(st.za), stroke: "#D55E00", "stroke-dasharray": "6 3" }));
    s.appendChild(svg("text", { x: W - R - 4, y: Y(st.za) - 4, "text-anchor": "end", "class": "cm-tick", fill: "#9a3d00" },
      "z_α = " + st.za.toFixed(2)));
    if (st.flagged0) { // random edits: z0 (1 - delta)^2
      var pts = [];
      for (i = 0; i <= 60; i++) {
        d = xmax * i / 60;
        pts.push(X(d).toFixed(1) + "," + Y(d < 1 ? st.z0 * (1 - d) * (1 - d) : 0).toFixed(1));
      }
      s.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: "#0072B2", "stroke-width": 2 }));
    }
    if (st.perfectSlope > 0) { // the best attacker: two legal steps fewer (or more) per edited token
      var sign = st.flagged0 ? -1 : 1;
      var dEnd = Math.min(xmax, ((st.flagged0 ? st.z0 - zBot : zTop - st.z0)) / st.perfectSlope);
      s.appendChild(svg("line", { x1: X(0), y1: Y(st.z0), x2: X(dEnd), y2: Y(st.z0 + sign * st.perfectSlope * dEnd),
        stroke: "#009E73", "stroke-width": 2, "stroke-dasharray": "2 3" }));
    }
    st.history.forEach(function (h) {
      s.appendChild(svg("circle", { cx: X(Math.min(h[0], xmax)), cy: Y(h[1]), r: 2.5, fill: "#7f8794", "fill-opacity": 0.5 }));
    });
    s.appendChild(svg("rect", { x: X(Math.min(st.delta, xmax)) - 5, y: Y(st.res.z) - 5, width: 10, height: 10,
      fill: "#000", "class": "cm-you" }));
    box.appendChild(s);
    box.appendChild(el("div", { "class": "cm-plot-legend" }, [
      st.flagged0 ? el("span", { "class": "cm-key cm-key-random", text: "random edits, predicted z₀(1−δ)²" }) : null,
      el("span", { "class": "cm-key cm-key-perfect",
        text: st.flagged0 ? "perfect targeted attack (bound)" : "perfect forgery (bound)" }),
      el("span", { "class": "cm-key cm-key-threshold", text: "threshold z_α (α = " + st.alpha + ")" }),
      el("span", { "class": "cm-key cm-key-you", text: "■ your text now, ● earlier versions" })]));
  }

  /* log10 E after each token, with 1/alpha dashed and the crossing marked by a tick and a flag. */
  function sparkline(box, any) {
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var W = 220, H = 46, P = 3, n = any.track.length, bound = any.bound / Math.LN10, i;
    var lo = 0, hi = Math.max(bound, any.maxLogE / Math.LN10);
    for (i = 0; i < n; i++) { lo = Math.min(lo, any.track[i] / Math.LN10); }
    hi += 0.08 * (hi - lo);
    var X = function (t) { return P + (n > 1 ? t / (n - 1) : 0) * (W - 2 * P); };
    var Y = function (v) { return P + (hi - v) / (hi - lo) * (H - 2 * P); };
    var s = svg("svg", { "class": "cm-spark", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
      "aria-label": "log10 E after each token: " + (any.crossed ? "reaches 1/α at token " + any.crossing :
        "stays below 1/α") + ", largest E = " + fmtE(any.maxLogE) });
    s.appendChild(svg("line", { x1: P, x2: W - P, y1: Y(bound), y2: Y(bound), stroke: "#D55E00", "stroke-dasharray": "4 2" }));
    s.appendChild(svg("line", { x1: P, x2: W - P, y1: Y(0), y2: Y(0), stroke: "#c9ced8" }));
    var step = Math.max(1, Math.ceil(n / 400)), pts = [];
    for (i = 0; i < n; i += step) { pts.push(X(i).toFixed(1) + "," + Y(any.track[i] / Math.LN10).toFixed(1)); }
    if (n && (n - 1) % step) { pts.push(X(n - 1).toFixed(1) + "," + Y(any.track[n - 1] / Math.LN10).toFixed(1)); }
    if (pts.length) { s.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: "#0072B2", "stroke-width": 1.5 })); }
    if (any.crossed) {
      var x = X(any.crossing);
      s.appendChild(svg("line", { x1: x, x2: x, y1: P, y2: H - P, stroke: "#1d1f24", "stroke-dasharray": "2 2" }));
      s.appendChild(svg("text", { x: Math.min(x + 2, W - 12), y: 11, "class": "cm-tick" }, "⚑"));
    }
    box.appendChild(s);
  }

  // ------------------------------------------------------------------ the playground

  function randomGenerator(seed) { // mulberry32
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6D2B79F5) >>> 0;
      var t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function mountPlayground(root, body, data) {
    var S = data.S, alpha = data.alpha, tok = new Tokenizer(data.tokenizer), rho = DEFAULT_RHO;
    var table = new Uint8Array(data.states.length);
    for (var i = 0; i < table.length; i++) { table[i] = data.states.charCodeAt(i) - 48; }
    var za = zAlpha(alpha);
    var st = { alpha: alpha, za: za, history: [], z0: 0, delta: 0, res: null, perfectSlope: 0, rho: rho, anytime: null };
    var solved = {}; // "challenge|sample" -> best delta
    var randomPool = null, randomRuns = 0;

    body.appendChild(stateStyles(root.id, S, data.colours));
    var controls = el("div", { "class": "cm-controls" });
    var menu = el("select", { "class": "cm-sample", "aria-label": "sample text" });
    data.samples.forEach(function (s, k) { menu.appendChild(el("option", { value: String(k), text: s.label })); });
    var reset = el("button", { type: "button", "class": "cm-reset", text: "restore the original" });
    var rate = el("select", { "class": "cm-rate", "aria-label": "share of tokens to replace at random" });
    [0.1, 0.2, 0.3, 0.5].forEach(function (r) { rate.appendChild(el("option", { value: String(r), text: pct(r).replace(".0", "") })); });
    var randomButton = el("button", { type: "button", "class": "cm-random", text: "random substitution" });
    controls.appendChild(el("label", {}, [el("span", { text: "text: " }), menu]));
    controls.appendChild(reset);
    controls.appendChild(el("span", { "class": "cm-sep" }, [randomButton, el("span", { text: " of " }), rate,
      el("span", { text: " of the original's tokens" })]));
    body.appendChild(controls);
    var prompt = el("div", { "class": "cm-prompt" });
    body.appendChild(prompt);
    var box = el("textarea", { "class": "cm-text", rows: "9", spellcheck: "false", "aria-label": "text to attack" });
    body.appendChild(box);

    var outputs = el("div", { "class": "cm-outputs" });
    body.appendChild(outputs);
    var show = {
      n: readout(outputs, "n_tokens", "tokens n", "tokens after re-tokenizing the text in your browser"),
      legal: readout(outputs, "n_valid", "legal steps", "transitions s → s+1 (mod S) among the n − 1"),
      phi: readout(outputs, "phi", "φ", "share of legal transitions"),
      z: readout(outputs, "z", "z", "(φ − p₀)·√(n−1) / √(p₀(1−p₀)), p₀ = 1/S"),
      p: readout(outputs, "p_value", "p-value", "one-sided normal tail"),
      verdict: readout(outputs, "verdict", "verdict at α = " + pct(alpha).replace(".0", ""), "flagged when p < α"),
      delta: readout(outputs, "delta", "edit fraction δ", "token-level Levenshtein distance to the original / its length"),
      pred: readout(outputs, "predicted_z", "random edits: z₀(1−δ)²", "what random substitution at this δ leaves, on average"),
      gap: readout(outputs, "gap", "your z − prediction", "negative: your edits hurt the watermark more than random ones"),
      segs: readout(outputs, "segments", "watermarked spans (approx.)", "boxed below: windows of 16, 32, 64, … tokens " +
        "whose z passes the scan's threshold for a text of this length without repeated tokens (approximate for a " +
        "text that repeats itself; chainmark detect --segments computes this text's own)"),
      ms: readout(outputs, "ms", "re-score time", "tokenize, look up states, score, compare with the original, redraw")
    };
    var verdictBox = outputs.querySelector("[data-field=verdict]").parentNode;
    var anyRow = el("div", { "class": "cm-outputs cm-anytime" });
    body.appendChild(anyRow);
    var threshold = fmtE(Math.log(1 / alpha));
    show.logE = readout(anyRow, "log_e", "anytime evidence", "E: a mixture of bets that a step into a token's first " +
      "occurrence is legal more often than p₀ = 1/" + S + " (weights centred at ρ = " + rho + "); steps into a " +
      "repeated token are skipped");
    show.maxLogE = readout(anyRow, "max_log_e", "largest E along the text", "E after the token where it was highest (1 before any step)");
    show.crossing = readout(anyRow, "e_crossing", "anytime flag: E ≥ 1/α = " + threshold,
      "the first token (counted from 0) whose step took E to 1/α or above: flagged there, with false-positive " +
      "rate at most α however often E is read");
    show.scored = readout(anyRow, "e_legal", "steps E counts", "legal steps among the steps into a token's first occurrence");
    var crossingBox = anyRow.querySelector("[data-field=e_crossing]").parentNode;
    var scoredValue = anyRow.querySelector("[data-field=e_legal]");
    var spark = el("div", { "class": "cm-readout cm-sparkbox", title: "log₁₀ E after each token; dashed: 1/α; ⚑: where E first reached it" },
      [el("span", { "class": "cm-label", text: "log₁₀ E along the text (dashed: 1/α)" })]);
    var sparkPlot = el("div", {});
    spark.appendChild(sparkPlot);
    anyRow.appendChild(spark);
    var legend = el("div", { "class": "cm-legend" });
    for (var s = 0; s < S; s++) {
      legend.appendChild(el("span", { "class": "cm-tok cm-s" + s }, [el("span", { "class": "cm-d", text: String(s) }),
        document.createTextNode("state " + s)]));
    }
    legend.appendChild(el("span", { "class": "cm-tok cm-ok", text: "underlined: legal step from the token before (s → s+1 mod " + S + ")" }));
    legend.appendChild(el("span", { "class": "cm-tok cm-seg", text: "ringed in orange: inside a watermarked span the window scan finds (approximate threshold)" }));
    legend.appendChild(el("span", { "class": "cm-tok cm-cross", text: "dashed outline and ⚑: the token whose step first took E to 1/α" }));
    legend.appendChild(el("div", { "class": "cm-help", text: "Anytime evidence E bets that steps into a token's " +
      "first occurrence are legal more often than chance (p₀ = 1/" + S + "), with weights centred at ρ = " + rho +
      ", the package's default budget (also the reference run's); steps into a repeated token are skipped. " +
      "Unlike re-checking the p-value after each edit, E may be read after every keystroke without raising the " +
      "false-positive rate: by Ville's inequality an unwatermarked text ever reaches E ≥ 1/α with probability at most α." }));
    body.appendChild(legend);
    var tiles = el("div", { "class": "cm-tokens", "aria-live": "off" });
    body.appendChild(tiles);
    var lower = el("div", { "class": "cm-lower" });
    var plotBox = el("div", { "class": "cm-plotbox" });
    var panel = el("div", { "class": "cm-challenges" });
    lower.appendChild(plotBox);
    lower.appendChild(panel);
    body.appendChild(lower);

    var sample = null, original = [], originalRes = null, lastText = null;

    function choose(k) {
      sample = data.samples[k];
      box.value = sample.text;
      original = tok.encode(sample.text);
      originalRes = score(original, table, S, alpha);
      st.z0 = originalRes.z;
      st.history = [];
      lastText = null;
      var edits = perfectAttackEdits(originalRes, S, za);
      st.perfectMin = original.length ? edits / original.length : 0;
      st.forgeMin = original.length && !originalRes.flagged ? perfectForgeEdits(originalRes, S, za) / original.length : 0;
      st.flagged0 = originalRes.flagged;
      st.perfectSlope = originalRes.m ? 2 * original.length / Math.sqrt((1 / S) * (1 - 1 / S) * originalRes.m) : 0;
      st.budget = data.budget; // the erase budget: raised where even a perfect attack needs more
      if (originalRes.flagged && st.perfectMin + 0.05 > data.budget) {
        st.budget = Math.ceil((st.perfectMin + 0.05) * 20) / 20;
      }
      prompt.textContent = (sample.prompt ? "prompt: " + sample.prompt.replace(/\s+/g, " ").slice(0, 220) +
        (sample.prompt.length > 220 ? "…" : "") + "  ·  " : "") + (sample.source || "");
      update();
    }

    function renderTiles(ids, res, spans, crossing) {
      var html = [], inSpan = new Uint8Array(ids.length);
      spans.forEach(function (sp) { for (var t = sp[0]; t < sp[1]; t++) { inSpan[t] = 1; } });
      for (var i = 0; i < ids.length; i++) {
        var sv = res.states[i], cross = i === crossing;
        html.push('<span class="cm-tok cm-s' + sv + (res.valid[i] ? " cm-ok" : "") + (inSpan[i] ? " cm-seg" : "") +
          (cross ? " cm-cross" : "") + '" title="token ' + i + ", id " + ids[i] +
          ", state " + sv + (i ? (res.valid[i] ? ", legal step" : ", broken step") : "") +
          (cross ? ", E reached 1/α here" : "") + '"><span class="cm-d">' + sv +
          "</span>" + shownToken(tok.label(ids[i])) + "</span>");
      }
      tiles.innerHTML = html.join("");
    }

    function challenges(res, delta) {
      var key = sample.label, list = [];
      var erase = originalRes.flagged, forge = !originalRes.flagged;
      if (erase && !res.flagged && delta <= st.budget) { keep("erase", key, delta, st.budget); }
      if (forge && res.flagged && delta <= data.budget) { keep("forge", key, delta, data.budget); }
      while (panel.firstChild) { panel.removeChild(panel.firstChild); }
      var total = 0, count = 0;
      Object.keys(solved).forEach(function (k) {
        total += 100 + Math.round(100 * (solved[k].budget - solved[k].delta));
        count += 1;
      });
      panel.appendChild(el("div", { "class": "cm-score", "data-field": "score", "data-value": String(total),
        text: "Score: " + total + " points (" + count + " solved)" }));
      var randomNeed = originalRes.z > za ? 1 - Math.sqrt(za / originalRes.z) : 0;
      list.push(card("erase", "1 · Erase",
        "Start from a ChainMark text and make the verdict read \"not detected\" while changing at most " +
        pct(st.budget).replace(".0", "") + " of its tokens." +
        (erase ? " On this text random edits would need δ ≈ " + pct(randomNeed) + "; a perfect targeted attack at least " +
          pct(st.perfectMin) + "." + (st.budget > data.budget ? " (" + pct(data.budget).replace(".0", "") +
            " is out of reach on this text, so its budget is raised.)" : "")
          : " Pick a ChainMark text in the menu to play."),
        erase, "erase|" + key));
      list.push(card("forge", "2 · Forge",
        "Start from a text without the watermark and make the detector flag it (p < " + alpha +
        ") while changing at most " + pct(data.budget).replace(".0", "") + " of its tokens." +
        (forge ? " A perfect forger needs at least " + pct(st.forgeMin) +
          ": look for words whose state digit continues the cycle." :
          " Pick the unwatermarked or the KGW text in the menu to play."),
        forge, "forge|" + key));
      list.forEach(function (c) { panel.appendChild(c); });
      panel.appendChild(el("div", { "class": "cm-scoring",
        text: "A solved challenge scores 100 points per text, plus one for every percentage point of the budget left unused." }));
    }

    function keep(kind, key, delta, budget) {
      var k = kind + "|" + key;
      if (!solved[k] || delta < solved[k].delta) { solved[k] = { delta: delta, budget: budget }; }
    }

    function card(kind, title, text, active, k) {
      var done = solved[k];
      return el("div", { "class": "cm-card" + (active ? "" : " cm-inactive") + (done ? " cm-done" : ""),
        "data-challenge": kind, "data-solved": done ? "1" : "0" }, [
        el("div", { "class": "cm-card-title", text: title + (done ? "  ✓ solved at δ = " + pct(done.delta) : active ? "  · open" : "") }),
        el("div", { text: text })]);
    }

    function update() {
      var t0 = performance.now();
      var text = box.value;
      var ids = tok.encode(text);
      var res = score(ids, table, S, alpha);
      var delta = editFraction(original, ids);
      st.res = res;
      st.delta = delta;
      var pred = delta < 1 ? st.z0 * (1 - delta) * (1 - delta) : 0;
      show.n(res.n, String(res.n));
      show.legal(res.c, res.c + " of " + res.m);
      show.phi(res.phi, res.phi.toFixed(3));
      show.z(res.z, res.z.toFixed(2));
      show.p(res.p, fmtP(res.p, res.z));
      show.verdict(res.flagged ? 1 : 0, res.flagged ? "watermarked" : "not detected");
      verdictBox.className = "cm-readout " + (res.flagged ? "cm-flagged" : "cm-clear");
      show.delta(delta, isNaN(delta) ? "—" : pct(delta));
      show.pred(pred, pred.toFixed(2));
      show.gap(res.z - pred, (res.z - pred >= 0 ? "+" : "") + (res.z - pred).toFixed(2));
      var spans = data.segments ? findSpans(res.valid, S, segmentThreshold(res.n, data.segments), data.segments.min_window) : [];
      st.spans = spans;
      show.segs(spans.length, spans.length ? spans.map(function (sp) { return sp[0] + "–" + sp[1]; }).join(", ") : "none");
      var any = anytime(ids, res.valid, S, alpha, rho);
      st.anytime = any;
      show.logE(any.logE, "E = " + fmtE(any.logE));
      show.maxLogE(any.maxLogE, fmtE(any.maxLogE));
      show.crossing(any.crossed ? any.crossing : -1, any.crossed ? "crossed at token " + any.crossing : "not crossed");
      crossingBox.className = "cm-readout " + (any.crossed ? "cm-flagged" : "cm-clear");
      show.scored(any.h, any.h + " legal of " + any.m);
      scoredValue.setAttribute("data-scored", String(any.m));
      sparkline(sparkPlot, any);
      renderTiles(ids, res, spans, any.crossing);
      if (text !== lastText) {
        if (lastText !== null) { st.history.push([delta, res.z]); }
        if (st.history.length > 400) { st.history.shift(); }
        lastText = text;
      }
      plot(plotBox, st);
      challenges(res, delta);
      var ms = performance.now() - t0;
      show.ms(ms, ms.toFixed(1) + " ms");
      return ms;
    }

    function randomSubstitution() {
      if (!randomPool) { // replacement words: a space and 3 to 10 lower-case letters
        randomPool = [];
        for (var id = 0; id < tok.vocabSize; id++) {
          if (/^ [a-z]{3,10}$/.test(tok.label(id))) { randomPool.push(id); }
        }
      }
      randomRuns += 1;
      var rng = randomGenerator(43 + 7919 * randomRuns), ids = original.slice(), n = ids.length;
      var k = Math.round(parseFloat(rate.value) * n), order = [];
      for (var i = 0; i < n; i++) { order.push(i); }
      for (i = 0; i < k; i++) { // partial Fisher-Yates: k distinct positions
        var j = i + Math.floor(rng() * (n - i)), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
        ids[order[i]] = randomPool[Math.floor(rng() * randomPool.length)];
      }
      box.value = tok.decode(ids);
      update();
    }

    menu.addEventListener("change", function () { choose(parseInt(menu.value, 10)); });
    reset.addEventListener("click", function () { box.value = sample.text; update(); });
    randomButton.addEventListener("click", randomSubstitution);
    box.addEventListener("input", update);
    if (data.samples.length) { choose(0); }
    return { tokenizer: tok, table: table, update: update, choose: choose, textarea: box, state: st };
  }

  PG.mount = function (root) {
    window.ChainMarkMount.mount(root, function (body, data) { PG.instances[root.id] = mountPlayground(root, body, data); });
  };

  /* Mount the playground just before the <script> that calls this. */
  PG.mountFrom = function (script, id) {
    PG.mount(window.ChainMarkMount.blockBefore(script, id, "cm-playground"));
  };

  window.ChainMarkPlayground = PG;
})();

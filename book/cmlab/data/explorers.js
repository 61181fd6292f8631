/* ChainMark explorers: sliders that work on a static page, with no kernel and no network.
 *
 * Each explorer block that chainmark.widgets writes into a notebook output is a
 * div.cm-explorer (data-kind = calibration | embedding | robustness) holding its data
 * as a JSON script element, followed by an inline script: mount.js (the glue shared
 * with the playground), this file, then a call
 * ChainMarkExplorers.mountFrom(document.currentScript, id).
 * The closed forms of chainmark.calibrate are re-implemented below (tests check
 * them against the Python functions); everything a model computed is in DATA,
 * precomputed when the book was built. No external script, font or request.
 */
(function () {
  "use strict";
  var VERSION = "2";
  if (window.ChainMarkExplorers && window.ChainMarkExplorers.version === VERSION) {
    return;
  }
  var CM = { version: VERSION };
  var el = window.ChainMarkMount.el, svg = window.ChainMarkMount.svg;

  // ------------------------------------------------------------------ math

  /* Inverse of the standard normal CDF: Wichura's algorithm AS 241 (PPND16),
   * relative accuracy about 1e-16 over (0, 1). */
  function normPpf(p) {
    if (!(p > 0 && p < 1)) {
      return p === 0 ? -Infinity : p === 1 ? Infinity : NaN;
    }
    var q = p - 0.5, r, x;
    if (Math.abs(q) <= 0.425) {
      r = 0.180625 - q * q;
      return q * (((((((2509.0809287301226727 * r + 33430.575583588128105) * r +
        67265.770927008700853) * r + 45921.953931549871457) * r + 13731.693765509461125) * r +
        1971.5909503065514427) * r + 133.14166789178437745) * r + 3.387132872796366608) /
        (((((((5226.495278852545925 * r + 28729.085735721942674) * r + 39307.89580009271061) * r +
        21213.794301586595867) * r + 5394.1960214247511077) * r + 687.1870074920579083) * r +
        42.313330701600911252) * r + 1.0);
    }
    r = q < 0 ? p : 1 - p;
    r = Math.sqrt(-Math.log(r));
    if (r <= 5) {
      r -= 1.6;
      x = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r +
        0.24178072517745061177) * r + 1.27045825245236838258) * r + 3.64784832476320460504) * r +
        5.7694972214606914055) * r + 4.6303378461565452959) * r + 1.42343711074968357734) /
        (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r +
        0.0151986665636164571966) * r + 0.14810397642748007459) * r + 0.68976733498510000455) * r +
        1.6763848301838038494) * r + 2.05319162663775882187) * r + 1.0);
    } else {
      r -= 5;
      x = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r +
        0.0012426609473880784386) * r + 0.026532189526576123093) * r + 0.29656057182850489123) * r +
        1.7848265399172913358) * r + 5.4637849111641143699) * r + 6.6579046435011037772) /
        (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r +
        1.8463183175100546818e-5) * r + 7.868691311456132591e-4) * r + 0.0148753612908506148525) * r +
        0.13692988092273580531) * r + 0.59983220655588793769) * r + 1.0);
    }
    return q < 0 ? -x : x;
  }

  /* The closed forms of chainmark.calibrate (k-regular topology, p0 = k/S). */
  var EPS = 1e-9;  // the same guard against float noise in ceilings as calibrate.py
  var forms = {
    zAlpha: function (alpha) { return -normPpf(alpha); },
    p0: function (S, k) { return k / S; },
    predictedZ: function (n, rho, S, k) {
      var p0 = k / S;
      return rho * Math.sqrt((1 - p0) * (n - 1) / p0);
    },
    midpointThreshold: function (rho, S, k) {
      var p0 = k / S;
      return p0 + 0.5 * rho * (1 - p0);
    },
    hoeffdingFprBound: function (n, rho, S, k) {
      var gap = forms.midpointThreshold(rho, S, k) - k / S, m = Math.floor((n - 1) / 2);
      return 2 * Math.exp(-2 * m * gap * gap);
    },
    sStar: function (n, rho, alpha, k) {
      var z = -normPpf(alpha);
      if (z <= 0) { return Math.max(2, k + 1); }
      var bound = k * (4 * z * z / (rho * rho * (n - 1)) + 1);
      return Math.max(2, k + 1, Math.ceil(bound - EPS));
    },
    zRatio: function (delta) { return (1 - delta) * (1 - delta); },
    deltaStar: function () { return 1 - 1 / Math.SQRT2; }
  };
  CM.normPpf = normPpf;
  CM.forms = forms;

  // ------------------------------------------------------------------ DOM helpers

  function fmt(x, digits) {
    if (x === null || x === undefined || isNaN(x)) { return "—"; }
    if (!isFinite(x)) { return x > 0 ? "∞" : "−∞"; }
    if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e6)) {
      var parts = x.toExponential(Math.max(1, digits - 1)).split("e");
      var sup = { "-": "⁻", "+": "", "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴",
        "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹" };
      return parts[0] + " × 10" + parts[1].split("").map(function (c) { return sup[c]; }).join("");
    }
    return x.toFixed(digits);
  }
  CM.fmt = fmt;

  /* A read-out: label, formatted value; data-value keeps full precision for tests. */
  function readout(container, field, label, title) {
    var value = el("span", { "class": "cm-value", "data-field": field });
    var box = el("div", { "class": "cm-readout", title: title || "" },
      [el("span", { "class": "cm-label", text: label }), value]);
    container.appendChild(box);
    return function (x, digits, text) {
      value.setAttribute("data-value", String(x));
      value.textContent = text !== undefined ? text : fmt(x, digits === undefined ? 3 : digits);
    };
  }

  /* A slider over a list of values (index-valued range input). */
  function slider(container, name, label, values, start, format, onChange) {
    var idx = values.indexOf(start);
    if (idx < 0) { idx = 0; }
    var input = el("input", {
      type: "range", min: "0", max: String(values.length - 1), step: "1", value: String(idx),
      "data-param": name, "aria-label": label
    });
    var shown = el("span", { "class": "cm-slider-value", "data-param-value": name });
    var row = el("label", { "class": "cm-slider" },
      [el("span", { "class": "cm-label", text: label }), input, shown]);
    container.appendChild(row);
    function value() { return values[parseInt(input.value, 10)]; }
    function sync() { shown.textContent = format ? format(value()) : String(value()); }
    input.addEventListener("input", function () { sync(); onChange(); });
    input.addEventListener("change", function () { sync(); onChange(); });
    sync();
    return value;
  }

  // ------------------------------------------------------------------ plots (inline SVG)

  function niceTicks(lo, hi, count) {
    var span = hi - lo;
    if (!(span > 0)) { return [lo]; }
    var step = Math.pow(10, Math.floor(Math.log10(span / count)));
    var err = span / count / step;
    if (err >= 7.5) { step *= 10; } else if (err >= 3.5) { step *= 5; } else if (err >= 1.5) { step *= 2; }
    var ticks = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
      ticks.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    }
    return ticks;
  }

  function tickLabel(t) {
    var a = Math.abs(t);
    if (a !== 0 && (a < 1e-2 || a >= 1e5)) { return t.toExponential(0); }
    return String(+t.toPrecision(6));
  }

  /* Draw a line plot into an <svg>. spec: {width, height, xlabel, ylabel, logY, xmin, xmax,
   * ymin, ymax, series: [{xs, ys, color, label, dash, dots}], vlines: [{x, color, label}],
   * hlines: [{y, color, label}], title} */
  function plot(root, spec) {
    while (root.firstChild) { root.removeChild(root.firstChild); }
    var W = spec.width || 320, H = spec.height || 230;
    var L = 58, R = 12, T = spec.title ? 24 : 10, B = 42;
    root.setAttribute("viewBox", "0 0 " + W + " " + H);
    root.setAttribute("width", W);
    root.setAttribute("height", H);
    var ty = spec.logY ? function (y) { return Math.log10(y); } : function (y) { return y; };
    var ylo = ty(spec.ymin), yhi = ty(spec.ymax);
    if (!(yhi > ylo)) { yhi = ylo + 1; }
    var X = function (x) { return L + (x - spec.xmin) / (spec.xmax - spec.xmin) * (W - L - R); };
    var Y = function (y) {
      var v = Math.min(Math.max(ty(y), ylo), yhi);
      return T + (1 - (v - ylo) / (yhi - ylo)) * (H - T - B);
    };
    root.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B,
      fill: "#fbfbfd", stroke: "#c8c8d0" }));
    if (spec.title) {
      root.appendChild(svg("text", { x: L, y: 15, "font-size": 12, "font-weight": "bold",
        fill: "#222" }, spec.title));
    }
    niceTicks(spec.xmin, spec.xmax, 6).forEach(function (t) {
      var x = X(t);
      root.appendChild(svg("line", { x1: x, x2: x, y1: T, y2: H - B, stroke: "#e6e6ec" }));
      root.appendChild(svg("text", { x: x, y: H - B + 14, "font-size": 10, "text-anchor": "middle",
        fill: "#444" }, tickLabel(t)));
    });
    var yt;
    if (spec.logY) {
      yt = [];
      var stepDec = Math.max(1, Math.ceil((yhi - ylo) / 6));
      for (var d = Math.ceil(ylo); d <= Math.floor(yhi); d += stepDec) { yt.push(Math.pow(10, d)); }
    } else {
      yt = niceTicks(spec.ymin, spec.ymax, 5);
    }
    yt.forEach(function (t) {
      var y = Y(t);
      root.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#e6e6ec" }));
      root.appendChild(svg("text", { x: L - 5, y: y + 3, "font-size": 10, "text-anchor": "end",
        fill: "#444" }, spec.logY ? "1e" + Math.round(Math.log10(t)) : tickLabel(t)));
    });
    root.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 8, "font-size": 11,
      "text-anchor": "middle", fill: "#222" }, spec.xlabel || ""));
    root.appendChild(svg("text", { x: 12, y: (T + H - B) / 2, "font-size": 11, "text-anchor": "middle",
      fill: "#222", transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" }, spec.ylabel || ""));
    (spec.hlines || []).forEach(function (h) {
      var y = Y(h.y);
      root.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: h.color || "#888",
        "stroke-dasharray": "4 3" }));
      if (h.label) {
        root.appendChild(svg("text", { x: W - R - 3, y: y - 3, "font-size": 10, "text-anchor": "end",
          fill: h.color || "#888" }, h.label));
      }
    });
    (spec.vlines || []).forEach(function (v) {
      if (v.x < spec.xmin || v.x > spec.xmax) { return; }
      var x = X(v.x);
      root.appendChild(svg("line", { x1: x, x2: x, y1: T, y2: H - B, stroke: v.color || "#888",
        "stroke-width": v.width || 1.5, "stroke-dasharray": v.dash || "" }));
      if (v.label) {
        root.appendChild(svg("text", { x: x + 3, y: T + 11 + (v.row || 0) * 12, "font-size": 10,
          fill: v.color || "#888" }, v.label));
      }
    });
    var nLegend = (spec.series || []).filter(function (s) { return s.label; }).length;
    var pos = spec.legend || "tr";
    var legendY = pos.charAt(0) === "b" ? H - B - 8 - 13 * nLegend : T + 6;
    (spec.series || []).forEach(function (s) {
      var pts = [];
      for (var i = 0; i < s.xs.length; i++) {
        var yv = s.ys[i];
        if (yv === null || yv === undefined || !isFinite(yv) || (spec.logY && yv <= 0)) { continue; }
        pts.push([X(s.xs[i]), Y(yv)]);
      }
      if (!s.dots && pts.length > 1) {
        root.appendChild(svg("polyline", { points: pts.map(function (p) { return p[0].toFixed(1) + "," + p[1].toFixed(1); }).join(" "),
          fill: "none", stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || "" }));
      }
      if (s.dots) {
        pts.forEach(function (p) {
          root.appendChild(svg("circle", { cx: p[0], cy: p[1], r: 3.2, fill: s.color, stroke: "#fff" }));
        });
      }
      if (s.label) {
        legendY += 13;
        var lx = pos.charAt(1) === "l" ? L + 8 : W - R - 130;
        root.appendChild(s.dots ? svg("circle", { cx: lx + 8, cy: legendY - 4, r: 3.2, fill: s.color })
          : svg("line", { x1: lx, x2: lx + 16, y1: legendY - 4, y2: legendY - 4, stroke: s.color,
            "stroke-width": 2, "stroke-dasharray": s.dash || "" }));
        root.appendChild(svg("text", { x: lx + 21, y: legendY, "font-size": 10, fill: "#222" }, s.label));
      }
    });
    (spec.marks || []).forEach(function (m) {
      if (m.y === null || m.y === undefined || !isFinite(m.y)) { return; }
      root.appendChild(svg("circle", { cx: X(m.x), cy: Y(m.y), r: 5, fill: "none", stroke: m.color,
        "stroke-width": 2 }));
    });
  }
  CM.plot = plot;

  function plotBox(container) {
    var s = svg("svg", { "class": "cm-plot", role: "img" });
    container.appendChild(s);
    return s;
  }

  // ------------------------------------------------------------------ tokens

  function tokensView(container, tokens, states, forced, colours, substituted) {
    while (container.firstChild) { container.removeChild(container.firstChild); }
    for (var i = 0; i < tokens.length; i++) {
      var text = tokens[i].replace(/\n/g, "↵");
      if (!text.trim()) { text = text.replace(/ /g, "\u00a0") || "\u00a0"; }
      var c = states ? colours[states[i] % colours.length] : "#cccccc";
      var span = el("span", { "class": "cm-tok", text: text,
        style: "background:" + c + "55;border:1px solid " + c + "aa;",
        title: (states ? "state " + states[i] : "") + (forced && forced[i] ? " (forced)" : "") +
          (substituted && substituted[i] ? " (substituted)" : "") });
      if (states) {  // the state's digit too: colour never carries the state alone
        span.appendChild(el("sub", { "class": "cm-digit", text: String(states[i]) }));
      }
      if (forced && forced[i]) {
        span.className += " cm-forced";
        container.appendChild(el("span", { "class": "cm-arrow", text: "⇁" }));
      }
      if (substituted && substituted[i]) { span.className += " cm-subst"; }
      container.appendChild(span);
    }
  }

  function legend(container, S, colours) {
    var row = el("div", { "class": "cm-legend" }, [el("span", { text: "states: " })]);
    for (var s = 0; s < S; s++) {
      var c = colours[s % colours.length];
      row.appendChild(el("span", { "class": "cm-tok", text: "s" + s,
        style: "background:" + c + "55;border:1px solid " + c + "aa;" }));
    }
    row.appendChild(el("span", { text: "  underlined with ⇁ = forced (gated) step" }));
    container.appendChild(row);
  }

  // ------------------------------------------------------------------ the explorers

  var explorers = {};

  /* Calibration: (alpha, n, rho, k) -> S*, predicted z, midpoint threshold, FPR bound. */
  explorers.calibration = function (root, data) {
    var controls = el("div", { "class": "cm-controls" });
    var outputs = el("div", { "class": "cm-outputs" });
    var plots = el("div", { "class": "cm-plots" });
    root.appendChild(controls);
    root.appendChild(outputs);
    root.appendChild(plots);
    var upd = function () { update(); };
    var alpha = slider(controls, "alpha", "false-positive target α", data.alphas, data.start.alpha,
      function (a) { return String(a); }, upd);
    var n = slider(controls, "n", "text length n (tokens)", data.ns, data.start.n, null, upd);
    var rho = slider(controls, "rho", "gate density ρ", data.rhos, data.start.rho,
      function (r) { return r.toFixed(2); }, upd);
    var k = slider(controls, "k", "successors per state k", data.ks, data.start.k, null, upd);
    var out = {
      zAlpha: readout(outputs, "z_alpha", "z_α", "one-sided normal quantile at α"),
      sStar: readout(outputs, "s_star", "S*", "smallest state count meeting α at the midpoint threshold"),
      z: readout(outputs, "predicted_z", "predicted z at S*", "ρ(1−p0)/sqrt(p0(1−p0)/(n−1))"),
      mid: readout(outputs, "midpoint_threshold", "midpoint threshold on φ at S*", "p0 + (ρ/2)(1−p0)"),
      fpr: readout(outputs, "fpr_bound", "Hoeffding FPR bound at S*",
        "2 exp(−2⌊(n−1)/2⌋((ρ/2)(1−p0))²)")
    };
    var zPlot = plotBox(plots), fPlot = plotBox(plots);
    function update() {
      var a = alpha(), nn = n(), r = rho(), kk = k();
      var za = forms.zAlpha(a), ss = forms.sStar(nn, r, a, kk);
      out.zAlpha(za, 3);
      out.sStar(ss, 0, String(ss));
      out.z(forms.predictedZ(nn, r, ss, kk), 3);
      out.mid(forms.midpointThreshold(r, ss, kk), 4);
      var fb = forms.hoeffdingFprBound(nn, r, ss, kk);
      out.fpr(fb, 3, fb >= 1 ? fmt(fb, 2) + " (vacuous)" : fmt(fb, 3));
      var smax = Math.max(2 * ss, kk + 30), step = Math.max(1, Math.floor((smax - kk - 1) / 200));
      var xs = [], zs = [], fs = [];
      for (var S = kk + 1; S <= smax; S += step) {
        xs.push(S); zs.push(forms.predictedZ(nn, r, S, kk)); fs.push(forms.hoeffdingFprBound(nn, r, S, kk));
      }
      var zmax = Math.max(zs[zs.length - 1], 2 * za) * 1.1;
      plot(zPlot, { title: "predicted z = ρ√((S−k)(n−1)/k)", xlabel: "number of states S",
        ylabel: "z (standard deviations)", xmin: kk + 1, xmax: smax, ymin: 0, ymax: zmax,
        series: [{ xs: xs, ys: zs, color: "#1F6AD1" }],
        hlines: [{ y: 2 * za, color: "#E15A5A", label: "2 z_α (midpoint rule)" }, { y: za, color: "#999", label: "z_α" }],
        vlines: [{ x: ss, color: "#4FAE5C", label: "S* = " + ss }] });
      var fmin = Math.min.apply(null, fs.concat([a])) / 3;
      plot(fPlot, { title: "Hoeffding FPR bound against S", xlabel: "number of states S",
        ylabel: "bound on P(false positive)", logY: true, xmin: kk + 1, xmax: smax,
        ymin: Math.max(fmin, 1e-300), ymax: 2,
        series: [{ xs: xs, ys: fs, color: "#9B6BD1" }],
        hlines: [{ y: a, color: "#E15A5A", label: "α = " + a }],
        vlines: [{ x: ss, color: "#4FAE5C", label: "S*" }] });
    }
    update();
  };

  /* Embedding: (S, rho) -> an example generation by the model, its phi, z, self-PPL. */
  explorers.embedding = function (root, data) {
    var controls = el("div", { "class": "cm-controls" });
    var outputs = el("div", { "class": "cm-outputs" });
    var text = el("div", { "class": "cm-tokens", "data-field": "tokens" });
    var tables = el("div", { "class": "cm-plots" });
    root.appendChild(controls);
    root.appendChild(outputs);
    var prompt = el("div", { "class": "cm-prompt" });
    root.appendChild(prompt);
    root.appendChild(text);
    var legendBox = el("div", {});
    root.appendChild(legendBox);
    root.appendChild(tables);
    var upd = function () { update(); };
    var S = slider(controls, "S", "number of states S", data.S_values, data.start.S, null, upd);
    var rho = slider(controls, "rho", "gate density ρ", data.rho_values, data.start.rho,
      function (r) { return r.toFixed(2); }, upd);
    var out = {
      n: readout(outputs, "n_tokens", "tokens n"),
      rhoReal: readout(outputs, "rho_realised", "realised ρ", "share of positions actually forced"),
      phi: readout(outputs, "phi", "φ (legal transitions)"),
      z: readout(outputs, "z", "z"),
      pz: readout(outputs, "predicted_z", "predicted z", "ρ√((S−1)(n−1)) with the realised ρ and this n"),
      p: readout(outputs, "p_value", "p-value"),
      ppl: readout(outputs, "self_ppl", "self-PPL", "perplexity of the text under the generating model"),
      meanZ: readout(outputs, "mean_z", "mean z over prompts")
    };
    var heat = el("div", { "class": "cm-heat" });
    tables.appendChild(heat);
    function cellOf(s, r) {
      for (var i = 0; i < data.cells.length; i++) {
        if (data.cells[i].S === s && data.cells[i].rho === r) { return data.cells[i]; }
      }
      return null;
    }
    function table(title, field, digits, s, r) {
      var t = el("table", { "class": "cm-table", "data-table": field });
      t.appendChild(el("caption", { text: title }));
      var head = el("tr", {}, [el("th", { text: "S \\ ρ" })]);
      data.rho_values.forEach(function (rv) { head.appendChild(el("th", { text: rv.toFixed(2) })); });
      t.appendChild(head);
      data.S_values.forEach(function (sv) {
        var row = el("tr", {}, [el("th", { text: String(sv) })]);
        data.rho_values.forEach(function (rv) {
          var c = cellOf(sv, rv), v = c ? c[field] : NaN;
          var td = el("td", { text: fmt(v, digits) });
          if (sv === s && rv === r) { td.className = "cm-current"; }
          row.appendChild(td);
        });
        t.appendChild(row);
      });
      return t;
    }
    function update() {
      var s = S(), r = rho(), c = cellOf(s, r);
      if (!c) { return; }
      var ex = c.example;
      out.n(ex.n_tokens, 0, String(ex.n_tokens));
      out.rhoReal(ex.rho_realised, 2);
      out.phi(ex.phi, 3);
      out.z(ex.z, 2);
      out.pz(forms.predictedZ(ex.n_tokens, ex.rho_realised, s, 1), 2);
      out.p(ex.p_value, 3);
      out.ppl(ex.self_ppl, 2);
      out.meanZ(c.mean_z, 2);
      prompt.textContent = "prompt: " + ex.prompt;
      tokensView(text, ex.tokens, ex.states, ex.forced, data.colours);
      while (legendBox.firstChild) { legendBox.removeChild(legendBox.firstChild); }
      legend(legendBox, s, data.colours);
      while (heat.firstChild) { heat.removeChild(heat.firstChild); }
      heat.appendChild(table("mean z over " + c.n_prompts + " prompts", "mean_z", 1, s, r));
      heat.appendChild(table("mean self-PPL (unwatermarked: " + fmt(data.baseline_ppl, 2) + ")",
        "mean_ppl", 2, s, r));
    }
    update();
  };

  /* Robustness: delta -> observed z ratio against (1 - delta)^2, and TPR. */
  explorers.robustness = function (root, data) {
    var controls = el("div", { "class": "cm-controls" });
    var outputs = el("div", { "class": "cm-outputs" });
    var plots = el("div", { "class": "cm-plots" });
    var text = el("div", { "class": "cm-tokens", "data-field": "tokens" });
    root.appendChild(controls);
    root.appendChild(outputs);
    root.appendChild(plots);
    root.appendChild(el("div", { "class": "cm-prompt", text: "the first watermarked text after the attack (substituted tokens have a red outline):" }));
    root.appendChild(text);
    var upd = function () { update(); };
    var delta = slider(controls, "delta", "substitution rate δ", data.deltas, data.start.delta,
      function (d) { return d.toFixed(2); }, upd);
    var out = {
      law: readout(outputs, "law", "(1−δ)²", "the theorem's z ratio"),
      mc: readout(outputs, "mc_ratio", "z ratio, Monte Carlo"),
      text: readout(outputs, "text_ratio", "z ratio, model text"),
      mcTpr: readout(outputs, "mc_tpr", "TPR, Monte Carlo"),
      textTpr: readout(outputs, "text_tpr", "TPR, model text"),
      star: readout(outputs, "delta_star", "δ* = 1 − 1/√2")
    };
    var rPlot = plotBox(plots), tPlot = plotBox(plots);
    var xsLaw = [];
    for (var i = 0; i <= 100; i++) { xsLaw.push(data.deltas[data.deltas.length - 1] * i / 100); }
    function update() {
      var d = delta(), i = data.deltas.indexOf(d);
      out.law(forms.zRatio(d), 3);
      out.mc(data.mc.ratio[i], 3);
      out.text(data.text.ratio[i], 3);
      out.mcTpr(data.mc.tpr[i], 2);
      out.textTpr(data.text.tpr[i], 2);
      out.star(forms.deltaStar(), 3);
      var dmax = data.deltas[data.deltas.length - 1];
      var all = data.mc.ratio.concat(data.text.ratio).filter(function (v) { return v !== null && isFinite(v); });
      plot(rPlot, { title: "z after / z before", xlabel: "substitution rate δ", ylabel: "z ratio",
        xmin: 0, xmax: dmax, ymin: Math.min(0, Math.min.apply(null, all) - 0.05),
        ymax: Math.max(1.1, Math.max.apply(null, all) + 0.05), legend: "bl",
        series: [{ xs: xsLaw, ys: xsLaw.map(forms.zRatio), color: "#222", label: "(1−δ)²" },
          { xs: data.deltas, ys: data.mc.ratio, color: "#4A8FD3", label: "Monte Carlo", dots: true },
          { xs: data.deltas, ys: data.text.ratio, color: "#E15A5A", label: "model text", dots: true }],
        vlines: [{ x: d, color: "#4FAE5C", label: "δ = " + d.toFixed(2) },
          { x: forms.deltaStar(), color: "#999", label: "δ*", dash: "4 3", row: 1 }],
        marks: [{ x: d, y: forms.zRatio(d), color: "#4FAE5C" }] });
      plot(tPlot, { title: "detection rate at α = " + data.alpha, xlabel: "substitution rate δ",
        ylabel: "TPR (share detected)", xmin: 0, xmax: dmax, ymin: 0, ymax: 1.05, legend: "bl",
        series: [{ xs: data.deltas, ys: data.mc.tpr, color: "#4A8FD3", label: "Monte Carlo" },
          { xs: data.deltas, ys: data.text.tpr, color: "#E15A5A", label: "model text" }],
        vlines: [{ x: d, color: "#4FAE5C" }, { x: forms.deltaStar(), color: "#999", dash: "4 3", label: "δ*" }] });
      var ex = data.text.examples[i];
      tokensView(text, ex.tokens, ex.states, null, data.colours, ex.substituted);
    }
    update();
  };
  CM.explorers = explorers;

  CM.mount = function (root) {
    window.ChainMarkMount.mount(root, function (body, data) { explorers[root.getAttribute("data-kind")](body, data); });
  };

  /* Mount the explorer just before the <script> that calls this. */
  CM.mountFrom = function (script, id) {
    CM.mount(window.ChainMarkMount.blockBefore(script, id, "cm-explorer"));
  };

  window.ChainMarkExplorers = CM;
})();

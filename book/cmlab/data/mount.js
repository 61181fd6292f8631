/* ChainMark page glue shared by explorers.js and playground.js: DOM helpers and mounting a block.
 *
 * chainmark.widgets.browser_block inlines this file in front of the block's own script, so
 * every block carries it and a page needs nothing else (no external script, no request).
 * A block is a div (class cm-explorer or cm-playground) with its data in a JSON script
 * element (class cm-data), a fallback line (.cm-fallback) and an empty .cm-body.
 */
(function () {
  "use strict";
  var VERSION = "1";
  if (window.ChainMarkMount && window.ChainMarkMount.version === VERSION) {
    return;
  }
  var M = { version: VERSION };
  var SVGNS = "http://www.w3.org/2000/svg";

  /* An HTML element: attribute "text" sets its text, the others are set as attributes. */
  M.el = function (tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") { node.textContent = attrs[k]; } else { node.setAttribute(k, attrs[k]); }
    });
    (children || []).forEach(function (c) { if (c) { node.appendChild(c); } });
    return node;
  };

  /* An SVG element with attributes and optional text. */
  M.svg = function (tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  };

  /* Mount a block once: read its data, drop the fallback line, then build(body, data, root) draws. */
  M.mount = function (root, build) {
    if (!root || root.getAttribute("data-mounted") === "1") { return; }
    var data = JSON.parse(root.querySelector("script.cm-data").textContent);
    var fallback = root.querySelector(".cm-fallback");
    if (fallback) { fallback.parentNode.removeChild(fallback); }
    build(root.querySelector(".cm-body"), data, root);
    root.setAttribute("data-mounted", "1");
  };

  /* The block of class cssClass just before the calling <script>, else the element with this id. */
  M.blockBefore = function (script, id, cssClass) {
    var prev = script && script.previousElementSibling;
    if (prev && prev.classList.contains(cssClass)) { return prev; }
    return id ? document.getElementById(id) : null;
  };

  window.ChainMarkMount = M;
})();

// kb ui: DOM helpers shared by the page's scripts. Text from the index only ever becomes text
// nodes (append of a string), never markup.
"use strict";

(() => {
  /** An element with a class and children; strings become text nodes, never markup. */
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  /** Whether the lines from..to meet ``range`` ([first, last] or null). */
  function inRange(range, from, to) {
    return !!range && from <= range[1] && to >= range[0];
  }

  window.kb = { el, clear, inRange };
})();

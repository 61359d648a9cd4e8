// kb ui: a small Markdown renderer producing DOM nodes, never HTML text: headings, paragraphs,
// lists, block quotes, code blocks, emphasis and links. Raw HTML in a document is shown as text;
// a link keeps only an http(s) target or a relative one (opened in the page's document view):
// javascript:, data: and every other scheme are shown as text.
"use strict";

(() => {
  const { el, inRange } = window.kb;

  const SCHEME = /^([a-z][a-z0-9+.-]*):/i;

  /** A safe href for a Markdown link: http(s) as is, a relative path as the document view of
   * that file; anything else (javascript:, data:, vbscript:, ...) gives null: shown as text. */
  function safeHref(raw, basePath, link) {
    // Browsers drop tabs and newlines inside URLs ("java\nscript:"), so judge what they would.
    const url = String(raw).replace(/[\u0000-\u0020\u007f-\u009f]/g, "");
    if (!url) return null;
    const scheme = SCHEME.exec(url);
    if (scheme) return /^https?$/i.test(scheme[1]) ? url : null;
    if (url.startsWith("//")) return "https:" + url;
    if (url.startsWith("#")) return null;
    const target = url.split(/[?#]/)[0];
    if (!target) return null;
    let decoded = target;
    try { decoded = decodeURIComponent(target); } catch (_) { /* keep as written */ }
    const dir = basePath.includes("/") ? basePath.slice(0, basePath.lastIndexOf("/") + 1) : "";
    const parts = [];
    for (const part of (decoded.startsWith("/") ? decoded : dir + decoded).split("/")) {
      if (part === "..") parts.pop();
      else if (part !== "." && (part !== "" || parts.length === 0)) parts.push(part);
    }
    return link(parts.join("/"));
  }

  // An underscore opens emphasis only at a word's start and closes only at its end
  // (snake_case and window.__name stay as written); an asterisk anywhere. Every span is
  // bounded (SPAN characters), so a hostile paragraph costs at most SPAN steps a character.
  const SPAN = 1000;
  const OPEN_ = "(?<![^\\s(\\[])";
  const CLOSE_ = "(?![\\w])";
  const inner = (name) => `(?=\\S)(?<${name}>[\\s\\S]{0,${SPAN}}?\\S)`;
  const INLINE = new RegExp([
    `(?<tick>\`{1,16})(?<code>[^\`]|[^\`][\\s\\S]{0,${SPAN}}?[^\`])\\k<tick>(?!\`)`,
    `(?<bang>!?)\\[(?<label>[^\\]\\n]{0,${SPAN}})\\]` +
      `\\(\\s*<?(?<url>[^)\\s>]{0,${2 * SPAN}})>?(?:\\s+"[^"\\n]{0,${SPAN}}")?\\s*\\)`,
    `<(?<auto>(?:https?|mailto|javascript|data|vbscript):[^>\\s]{0,${2 * SPAN}})>`, // judged by safeHref
    "\\*\\*" + inner("strong") + "\\*\\*",
    OPEN_ + "__" + inner("strong2") + "__" + CLOSE_,
    "\\*" + inner("em") + "\\*",
    OPEN_ + "_" + inner("em2") + "_" + CLOSE_,
  ].join("|"), "g");

  function inline(text, parent, ctx, depth = 0) {
    if (depth > 8) {
      parent.append(text);
      return parent;
    }
    let at = 0;
    INLINE.lastIndex = 0;
    const matches = Array.from(text.matchAll(INLINE));
    for (const m of matches) {
      if (m.index < at) continue;
      if (m.index > at) parent.append(text.slice(at, m.index));
      const g = m.groups;
      if (g.code !== undefined) {
        parent.append(el("code", "", g.code));
      } else if (g.label !== undefined) {
        const href = safeHref(g.url, ctx.basePath, ctx.link);
        const label = g.label || g.url;
        if (href) {
          const a = el("a", g.bang ? "image-link" : "");
          a.href = href;
          if (/^https?:/i.test(href)) {
            a.target = "_blank";
            a.rel = "noopener noreferrer";
          }
          if (g.bang) a.append("🖼 " + label);
          else inline(label, a, ctx, depth + 1);
          parent.append(a);
        } else {
          parent.append(m[0]);
        }
      } else if (g.auto !== undefined) {
        const href = safeHref(g.auto, ctx.basePath, ctx.link);
        if (href && /^https?:/i.test(href)) {
          const a = el("a", "", g.auto);
          a.href = href;
          a.target = "_blank";
          a.rel = "noopener noreferrer";
          parent.append(a);
        } else {
          parent.append(m[0]);
        }
      } else if ((g.strong ?? g.strong2) !== undefined) {
        parent.append(inline(g.strong ?? g.strong2, el("strong"), ctx, depth + 1));
      } else if ((g.em ?? g.em2) !== undefined) {
        parent.append(inline(g.em ?? g.em2, el("em"), ctx, depth + 1));
      }
      at = m.index + m[0].length;
    }
    if (at < text.length) parent.append(text.slice(at));
    return parent;
  }

  /** Markdown lines as blocks; each block knows its first and last source line (from 1). */
  function render(lines, { range = null, first = 1, at = 0, basePath = "", link }) {
    const ctx = { basePath, link };
    const box = el("div", "markdown");
    const add = (node, start, end) => {
      const from = start + first - 1;
      const to = end + first - 1;
      node.dataset.from = String(from);
      node.dataset.to = String(to);
      node.title = to > from ? `lines ${from}–${to}` : `line ${from}`;
      if (inRange(range, from, to)) node.classList.add("hit");
      if (at && from <= at && at <= to) node.classList.add("at");
      box.append(node);
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const start = i + 1;
      let m;
      if (/^\s*$/.test(line)) {
        i++;
      } else if ((m = /^\s{0,3}(`{3,}|~{3,})(.*)$/.exec(line))) {
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
        i++;
        const lang = m[2].trim().split(/\s+/)[0];
        const code = el("code", "", body.join("\n"));
        if (lang) code.dataset.lang = lang;
        add(el("pre", "code", code), start, Math.min(i, lines.length));
      } else if ((m = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
        add(inline(m[2], el("h" + m[1].length), ctx), start, start);
        i++;
      } else if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
        add(el("hr"), start, start);
        i++;
      } else if (/^\s{0,3}>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s{0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s{0,3}>\s?/, ""));
        add(inline(quoted.join(" "), el("blockquote"), ctx), start, i);
      } else if (/^\s*([-*+]|\d{1,9}[.)])\s+/.test(line)) {
        const end = listEnd(lines, i);
        add(listNode(lines.slice(i, end), ctx), start, end);
        i = end;
      } else {
        const para = [];
        while (i < lines.length && !/^\s*$/.test(lines[i]) && (para.length === 0 || !blockStart(lines[i]))) {
          para.push(lines[i++].trim());
        }
        add(inline(para.join(" "), el("p"), ctx), start, i);
      }
    }
    return box;
  }

  function blockStart(line) {
    return /^\s{0,3}(#{1,6}\s|`{3,}|~{3,}|>)/.test(line) || /^\s*([-*+]|\d{1,9}[.)])\s+/.test(line);
  }

  function listEnd(lines, i) {
    let j = i;
    while (j < lines.length && !/^\s*$/.test(lines[j]) && (j === i || !/^\s{0,3}(#{1,6}\s|`{3,}|~{3,}|>)/.test(lines[j]))) j++;
    return j;
  }

  /** List lines as nested <ul>/<ol> by indentation; continuation lines join their item. */
  function listNode(lines, ctx) {
    const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
    const root = { indent: -1, list: null, children: [] };
    const stack = [root];
    let last = null;
    for (const line of lines) {
      const m = ITEM.exec(line);
      if (!m) {
        if (last) last.text += " " + line.trim();
        continue;
      }
      const indent = m[1].replace(/\t/g, "    ").length;
      while (stack.length > 1 && indent <= stack[stack.length - 1].indent) stack.pop();
      const parent = stack[stack.length - 1];
      const item = { indent, ordered: /\d/.test(m[2]), text: m[3], children: [] };
      (parent === root ? root.children : parent.children).push(item);
      stack.push(item);
      last = item;
    }
    const build = (items) => {
      const list = el(items[0] && items[0].ordered ? "ol" : "ul");
      for (const item of items) {
        const li = inline(item.text, el("li"), ctx);
        if (item.children.length) li.append(build(item.children));
        list.append(li);
      }
      return list;
    };
    return build(root.children);
  }

  window.kb.markdown = { render, safeHref };
})();

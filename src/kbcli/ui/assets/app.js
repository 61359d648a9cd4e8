// kb ui: the search page. Plain ES2020, no framework, no build step.
// Every piece of text that comes from the index is put into the page with textContent or
// createTextNode, never innerHTML: a document holding <script> or an onerror attribute shows as
// text and runs nothing. Links from Markdown keep only http(s) and relative targets.
"use strict";

(() => {
  const DEBOUNCE_MS = 150;
  const MAX_MARKDOWN_CHARS = 2_000_000; // larger Markdown is shown as its numbered lines
  const START = new URLSearchParams(location.search);
  const TOKEN = START.get("token") || "";

  const { el, clear, inRange } = window.kb;
  const $ = (id) => document.getElementById(id);
  const ui = {
    error: $("error"), q: $("q"), mode: $("mode"), folder: $("folder"), filter: $("filter"),
    explain: $("explain"), results: $("results"), summary: $("summary"),
    views: { search: $("view-search"), doc: $("view-doc"), status: $("view-status"), ask: $("view-ask") },
    docPath: $("doc-path"), docEditor: $("doc-editor"), docKbget: $("doc-kbget"),
    docBody: $("doc-body"), docSource: $("doc-source"), docBack: $("doc-back"),
    statusList: $("status-list"), navAsk: $("nav-ask"),
    question: $("question"), answer: $("answer"), askButton: $("ask-button"),
  };

  function showError(message) {
    ui.error.textContent = message || "";
    ui.error.hidden = !message;
  }

  // ---------- URLs and the API ----------

  /** A URL of this page for a state (the token kept, so it can be bookmarked and reloaded). */
  function pageUrl(state) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(state)) {
      if (value !== undefined && value !== null && value !== "" && value !== false) {
        params.set(key, value === true ? "1" : String(value));
      }
    }
    if (TOKEN) params.set("token", TOKEN);
    return location.pathname + "?" + params.toString();
  }

  function docUrl(path, line, page, chunk) {
    return pageUrl({ ...searchState(), doc: path, line: line || "", page: page || "", chunk: chunk || "" });
  }

  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  /** fetch() an /api route with the token header; the JSON body, or an ApiError of one line. */
  async function api(path, options = {}) {
    const headers = { Accept: "application/json", Authorization: "Bearer " + TOKEN };
    if (options.body) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { ...options, headers, cache: "no-store", credentials: "omit" });
    } catch (err) {
      if (err && err.name === "AbortError") throw err;
      throw new ApiError("kb ui is not answering: is `kb ui` still running?", 0);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.error === "string" ? data.error : `HTTP ${response.status}`;
      throw new ApiError(firstLine(message), response.status);
    }
    if (data === null || typeof data !== "object") throw new ApiError("kb ui sent no JSON", response.status);
    return data;
  }

  function firstLine(text) {
    return String(text).split("\n")[0].slice(0, 500);
  }

  function copyText(text, button) {
    const done = () => {
      const label = button.textContent;
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = label; }, 1200);
    };
    const fallback = () => {
      const area = el("textarea", "offscreen");
      area.value = text;
      document.body.append(area);
      area.select();
      try { document.execCommand("copy"); done(); } catch (_) { /* nothing more to try */ }
      area.remove();
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, fallback);
    } else {
      fallback();
    }
  }

  // ---------- search ----------

  function searchState() {
    return {
      q: ui.q.value.trim(),
      mode: ui.mode.value === "hybrid" ? "" : ui.mode.value,
      folder: ui.folder.value.trim(),
      filter: ui.filter.value.trim(),
      explain: ui.explain.checked,
    };
  }

  function fillSearch(params) {
    ui.q.value = params.get("q") || "";
    const mode = params.get("mode") || "hybrid";
    ui.mode.value = ["keyword", "semantic", "hybrid"].includes(mode) ? mode : "hybrid";
    ui.folder.value = params.get("folder") || "";
    ui.filter.value = params.get("filter") || "";
    ui.explain.checked = params.get("explain") === "1";
  }

  let searchSeq = 0;
  let searchTimer = 0;
  let searchAbort = null;
  let hitNodes = [];
  let selected = -1;

  function scheduleSearch() {
    clearTimeout(searchTimer);
    history.replaceState(null, "", pageUrl(searchState()));
    document.title = searchState().q ? searchState().q + " · kb" : "kb";
    searchTimer = setTimeout(runSearch, DEBOUNCE_MS);
  }

  /** One search; a response that is not the latest one asked for is dropped. */
  async function runSearch() {
    clearTimeout(searchTimer);
    const state = searchState();
    const seq = ++searchSeq;
    if (searchAbort) searchAbort.abort();
    if (!state.q) {
      searchAbort = null;
      showError("");
      renderResults(null);
      return;
    }
    searchAbort = new AbortController();
    const params = new URLSearchParams({ q: state.q, mode: ui.mode.value, k: "10" });
    if (state.folder) params.set("folder", state.folder);
    if (state.filter) params.set("filter", state.filter);
    if (state.explain) params.set("explain", "1");
    ui.results.setAttribute("aria-busy", "true");
    try {
      const data = await api("/api/search?" + params.toString(), { signal: searchAbort.signal });
      if (seq !== searchSeq) return;
      showError("");
      renderResults(data);
    } catch (err) {
      if (seq !== searchSeq || (err && err.name === "AbortError")) return;
      showError(err.message);
      renderResults(null);
    } finally {
      if (seq === searchSeq) ui.results.removeAttribute("aria-busy");
    }
  }

  /** The snippet as text nodes, a line a row numbered as ``snippet_lines`` says, with the
   * API's highlight spans ([start, end) in UTF-16 code units, as String.slice counts) in <mark>. */
  function highlighted(snippet, spans, numbers) {
    const text = String(snippet || "");
    const marks = (Array.isArray(spans) ? spans : [])
      .filter((s) => Array.isArray(s) && Number.isInteger(s[0]) && Number.isInteger(s[1]))
      .map(([a, b]) => [Math.max(0, a), Math.min(text.length, b)])
      .filter(([a, b]) => a < b)
      .sort((x, y) => x[0] - y[0]);
    const out = el("div", "snippet");
    let offset = 0;
    text.split("\n").forEach((line, i) => {
      const end = offset + line.length;
      const row = el("div", "snippet-line");
      const number = Array.isArray(numbers) ? numbers[i] : null;
      if (Number.isInteger(number)) row.append(el("span", "ln", String(number)));
      const body = el("span", "text");
      let at = offset;
      for (const [a, b] of marks) {
        const from = Math.max(a, at);
        const to = Math.min(b, end);
        if (to <= from) continue;
        if (from > at) body.append(text.slice(at, from));
        body.append(el("mark", "", text.slice(from, to)));
        at = to;
      }
      if (at < end) body.append(text.slice(at, end));
      row.append(body);
      out.append(row);
      offset = end + 1;
    });
    return out;
  }

  function freshnessBadge(freshness) {
    if (!freshness || typeof freshness !== "object" || !freshness.state || freshness.state === "current") {
      return null;
    }
    const badge = el("span", "badge fresh-" + String(freshness.state).replace(/[^a-z_-]/gi, ""),
      String(freshness.state));
    badge.title = freshness.indexed_at ? "indexed " + freshness.indexed_at : "not current";
    return badge;
  }

  function renderResults(data) {
    clear(ui.results);
    hitNodes = [];
    selected = -1;
    if (!data) {
      ui.summary.textContent = "";
      return;
    }
    const hits = Array.isArray(data.hits) ? data.hits : [];
    const took = typeof data.took_ms === "number" ? ` in ${Math.round(data.took_ms)} ms` : "";
    if (!hits.length) {
      ui.summary.textContent = data.refused
        ? "Nothing relevant found" + took + "."
        : "No results" + took + ".";
      return;
    }
    // Hits come by file, each with its other matching chunks (by chunk, grouped here).
    const groups = new Map();
    let count = 0;
    for (const hit of hits) {
      const key = String(hit.path ?? "");
      if (!groups.has(key)) groups.set(key, []);
      const chunks = Array.isArray(hit.chunks) ? hit.chunks : [];
      groups.get(key).push(hit, ...chunks.map((chunk) => ({ ...chunk, path: hit.path })));
      count += 1 + chunks.length;
    }
    const files = groups.size;
    ui.summary.textContent =
      `${count} result${count === 1 ? "" : "s"} in ${files} file${files === 1 ? "" : "s"}${took}`;
    for (const [path, fileHits] of groups) {
      const head = el("h2", "file-path");
      const cut = path.lastIndexOf("/") + 1;
      const open = el("a", "", el("span", "dir", path.slice(0, cut)), el("span", "base", path.slice(cut)));
      open.href = docUrl(path, fileHits[0].line, fileHits[0].page, fileHits[0].chunk_id);
      head.append(open);
      if (fileHits.length > 1) head.append(el("span", "count", `${fileHits.length} chunks`));
      const list = el("div", "hits");
      for (const hit of fileHits) list.append(hitNode(hit));
      ui.results.append(el("section", "file", head, list));
    }
  }

  function hitNode(hit) {
    const link = el("a", "hit");
    link.href = docUrl(hit.path, hit.line, hit.page, hit.chunk_id);
    link.setAttribute("role", "option");
    link.dataset.path = String(hit.path ?? "");
    if (Number.isInteger(hit.line)) link.dataset.line = String(hit.line);
    const numbered = Array.isArray(hit.snippet_lines) && hit.snippet_lines.some(Number.isInteger);
    const meta = el("div", "hit-meta", numbered && !Number.isInteger(hit.page) ? null : el("span", "loc", placeText(hit)));
    meta.title = String(hit.location || hit.path || "");
    if (hit.note_by) meta.append(el("span", "badge", "note by " + hit.note_by));
    const fresh = freshnessBadge(hit.freshness);
    if (fresh) meta.append(fresh);
    if (ui.explain.checked && typeof hit.score === "number") {
      meta.append(el("span", "score", hit.score.toFixed(3)));
    }
    link.append(meta, highlighted(hit.snippet, hit.highlights, hit.snippet_lines));
    if (ui.explain.checked && hit.explain) link.append(el("pre", "explain", String(hit.explain)));
    hitNodes.push(link);
    return link;
  }

  /** Where a hit is inside its file ("line 61", "page 2"); the file is the group's heading. */
  function placeText(hit) {
    if (Number.isInteger(hit.page)) return "page " + hit.page;
    if (Number.isInteger(hit.line)) return "line " + hit.line;
    return String(hit.location || hit.path || "");
  }

  function select(index) {
    if (!hitNodes.length) return;
    const next = Math.max(0, Math.min(hitNodes.length - 1, index));
    if (selected >= 0 && hitNodes[selected]) {
      hitNodes[selected].classList.remove("selected");
      hitNodes[selected].setAttribute("aria-selected", "false");
    }
    selected = next;
    const node = hitNodes[selected];
    node.classList.add("selected");
    node.setAttribute("aria-selected", "true");
    node.scrollIntoView({ block: "nearest" });
  }

  // ---------- routing ----------

  let pushedDoc = false;

  function go(url, push) {
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
    route();
  }

  function showView(name) {
    for (const [key, node] of Object.entries(ui.views)) node.hidden = key !== name;
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.view === name);
    }
    document.body.dataset.view = name;
  }

  function route() {
    const params = new URLSearchParams(location.search);
    fillSearch(params);
    showError("");
    const doc = params.get("doc");
    const q = params.get("q");
    // the tab's and a bookmark's name: what the view shows
    document.title = doc ? doc.slice(doc.lastIndexOf("/") + 1) + " · kb"
      : params.get("view") === "status" ? "Status · kb"
      : params.get("view") === "ask" ? "Ask · kb"
      : q ? q + " · kb" : "kb";
    if (doc) {
      showView("doc");
      openDocument(params.get("doc"), parseInt(params.get("line") || "", 10),
        parseInt(params.get("page") || "", 10), params.get("chunk") || "");
    } else if (params.get("view") === "status") {
      showView("status");
      loadStatus();
    } else if (params.get("view") === "ask") {
      showView("ask");
      ui.question.focus();
    } else {
      showView("search");
      if (ui.q.value.trim()) runSearch();
      else renderResults(null);
    }
  }

  function backToSearch() {
    if (pushedDoc && history.length > 1) {
      pushedDoc = false;
      history.back();
    } else {
      go(pageUrl(searchState()), false);
    }
  }

  // ---------- the document view ----------

  let docSeq = 0;

  async function openDocument(path, line, page, chunk) {
    const seq = ++docSeq;
    ui.docPath.textContent = path;
    ui.docEditor.textContent = "";
    ui.docKbget.textContent = "";
    ui.docSource.hidden = true;
    ui.docBack.href = pageUrl(searchState());
    clear(ui.docBody);
    ui.docBody.append(el("p", "summary", "Loading…"));
    const params = new URLSearchParams({ path });
    if (Number.isInteger(line) && line > 0) params.set("line", String(line));
    if (chunk) params.set("chunk", chunk);
    let data;
    try {
      data = await api("/api/document?" + params.toString());
    } catch (err) {
      if (seq !== docSeq) return;
      clear(ui.docBody);
      showError(err.message);
      return;
    }
    if (seq !== docSeq) return;
    renderDocument(data, line, page);
  }

  function hitRange(data, line) {
    if (Array.isArray(data.hit_lines) && data.hit_lines.length === 2) {
      const [a, b] = data.hit_lines.map(Number);
      if (Number.isInteger(a) && Number.isInteger(b)) return [a, Math.max(a, b)];
    }
    return Number.isInteger(line) && line > 0 ? [line, line] : null;
  }

  function renderDocument(data, line, page) {
    const path = String(data.path ?? "");
    ui.docPath.textContent = path;
    const editor = String(data.editor || path);
    ui.docEditor.textContent = editor;
    ui.docEditor.href = editorHref(editor);
    ui.docKbget.textContent = String(data.kb_get || `kb get '${editor}'`);
    const range = hitRange(data, line);
    const first = Number.isInteger(data.first_line) && data.first_line > 0 ? data.first_line : 1;
    const at = Number.isInteger(line) && line > 0 ? line : range ? range[0] : 0;
    clear(ui.docBody);
    const notes = Array.isArray(data.notes) ? data.notes.map(String) : [];
    if (Number.isInteger(data.total_lines) && Array.isArray(data.lines) && data.lines.length < data.total_lines) {
      notes.push(`Lines ${first}–${first + data.lines.length - 1} of ${data.total_lines}.`);
    }
    for (const note of notes) ui.docBody.append(el("p", "note", note));
    if (data.kind === "pages") {
      const lines = Array.isArray(data.lines) ? data.lines.map(String) : [];
      const wanted = Number.isInteger(page) && page > 0 ? page : null;
      ui.docBody.append(pagesView(Array.isArray(data.pages) ? data.pages : [], lines, first, range, wanted));
    } else if (data.kind === "markdown" && textSize(data.lines) > MAX_MARKDOWN_CHARS) {
      ui.docBody.append(el("p", "note", "Too large to render as Markdown: shown as text."));
      ui.docBody.append(linesView(data.lines.map(String), range, first, at));
    } else if (data.kind === "markdown") {
      const lines = Array.isArray(data.lines) ? data.lines.map(String) : [];
      const link = (target) => docUrl(target, "");
      const rendered = window.kb.markdown.render(lines, { range, first, at, basePath: path, link });
      const source = linesView(lines, range, first, at);
      source.hidden = true;
      ui.docSource.hidden = false;
      ui.docSource.textContent = "Show source";
      ui.docSource.onclick = () => {
        source.hidden = !source.hidden;
        rendered.hidden = !source.hidden;
        ui.docSource.textContent = source.hidden ? "Show source" : "Show rendered";
        scrollToHit();
      };
      ui.docBody.append(rendered, source);
    } else {
      ui.docBody.append(linesView(Array.isArray(data.lines) ? data.lines.map(String) : [], range, first, at));
    }
    scrollToHit();
  }

  function textSize(lines) {
    return Array.isArray(lines) ? lines.reduce((n, line) => n + String(line).length + 1, 0) : 0;
  }

  /** A vscode:// link for an absolute path, else the page's own document URL (nothing else). */
  function editorHref(editor) {
    if (editor.startsWith("/")) return "vscode://file" + encodeURI(editor);
    return location.href;
  }

  function scrollToHit() {
    const shown = (n) => n.offsetParent !== null;
    const target = Array.from(ui.docBody.querySelectorAll(".at")).find(shown)
      || Array.from(ui.docBody.querySelectorAll(".hit")).find(shown);
    if (target) target.scrollIntoView({ block: "center" });
  }

  /** Numbered lines (the first is ``first``), the hit's lines marked and its own line ``at``. */
  function linesView(lines, range, first = 1, at = 0) {
    const box = el("div", "lines");
    lines.forEach((text, i) => {
      const number = first + i;
      const row = el("div", "line", el("span", "ln", String(number)), el("span", "text", text || "\u200b"));
      row.id = "L" + number;
      if (inRange(range, number, number)) row.classList.add("hit");
      if (number === at) row.classList.add("at");
      box.append(row);
    });
    if (!lines.length) box.append(el("p", "summary", "This file has no indexed text."));
    return box;
  }

  /** A PDF's pages or a DOCX's sections, each headed; the one holding the hit is marked: the
   * page asked for, else the section whose lines (found in order in the file's indexed
   * lines) meet the hit's. */
  function pagesView(pages, lines, first, range, wanted) {
    const box = el("div", "pages");
    const whole = lines.join("\n");
    let cursor = 0;
    let cursorLine = first; // the line number at ``cursor`` (counted forward only once)
    const newlines = (from, to) => {
      let n = 0;
      for (let k = whole.indexOf("\n", from); k >= 0 && k < to; k = whole.indexOf("\n", k + 1)) n++;
      return n;
    };
    pages.forEach((page, i) => {
      const text = String(page.text ?? "");
      const number = Number.isInteger(page.page) ? page.page : null;
      const title = page.heading ? String(page.heading) : "Page " + (number ?? i + 1);
      const section = el("section", "page", el("h2", "page-head", title));
      section.id = "page-" + (number ?? i + 1);
      const at = text ? whole.indexOf(text, cursor) : -1;
      let meets = false;
      if (at >= 0) {
        const from = cursorLine + newlines(cursor, at);
        const to = from + newlines(at, at + text.length);
        cursor = at + text.length;
        cursorLine = to;
        section.dataset.from = String(from);
        section.dataset.to = String(to);
        meets = inRange(range, from, to);
      }
      if (wanted !== null ? number === wanted : meets) section.classList.add("hit");
      section.append(el("div", "page-text", text));
      box.append(section);
    });
    if (!pages.length) box.append(el("p", "summary", "This file has no extracted text."));
    return box;
  }

  // ---------- status ----------

  const STATUS_LABELS = [
    ["path", "Index"], ["files", "Files"], ["chunks", "Chunks"], ["size_bytes", "Size"],
    ["embedder", "Embedder"], ["store", "Store"], ["last_ingest", "Last sync"],
    ["last_sync", "Last sync"], ["vectors_pending", "Vectors pending"], ["chat_model", "Chat model"],
    ["scoped", "Scoped token"],
  ];

  let statusData = null;

  function formatValue(key, value) {
    if (key === "embedder" && value && typeof value === "object") {
      const dims = value.dimension ? ` (${value.dimension} dimensions)` : "";
      return [value.provider, value.model].filter(Boolean).join("/") + dims;
    }
    if (/^last_/.test(key) && typeof value === "string" && !Number.isNaN(Date.parse(value))) {
      return new Date(value).toLocaleString() + " (" + value + ")";
    }
    if (typeof value === "number" && /bytes|size/.test(key)) {
      const units = ["B", "KB", "MB", "GB", "TB"];
      let n = value;
      let u = 0;
      while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
      return (u ? n.toFixed(1) : String(n)) + " " + units[u];
    }
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (value === null || value === undefined || value === "") return "—";
    return String(value);
  }

  const label = (key) => key.charAt(0).toUpperCase() + key.slice(1).replace(/_/g, " ");

  /** The figures people look for first, then the others under "More". */
  function statusRows(data, list, depth) {
    const known = depth ? [] : STATUS_LABELS.filter(([key]) => key in data);
    const seen = new Set(known.map(([key]) => key));
    const rest = Object.keys(data).filter((key) => !seen.has(key)).sort();
    addRows(data, known, list, depth);
    if (!depth && rest.length) {
      const more = el("dl", "status");
      addRows(data, rest.map((key) => [key, label(key)]), more, depth + 1);
      list.after(el("details", "more", el("summary", "", "More"), more));
    } else {
      addRows(data, rest.map((key) => [key, label(key)]), list, depth);
    }
    return list;
  }

  function addRows(data, rows, list, depth) {
    for (const [key, name] of rows) {
      const value = data[key];
      list.append(el("dt", "", name));
      if (key !== "embedder" && value && typeof value === "object" && !Array.isArray(value) && depth < 3) {
        list.append(el("dd", "", statusRows(value, el("dl", "status nested"), depth + 1)));
      } else if (Array.isArray(value)) {
        list.append(el("dd", "", value.map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v))).join(", ") || "—"));
      } else {
        list.append(el("dd", "", formatValue(key, value)));
      }
    }
    return list;
  }

  async function fetchStatus() {
    statusData = await api("/api/status");
    // Ask shows when the status names a chat model; a server that does not say offers it
    // anyway (asking without one answers one line: "no chat model configured").
    const says = "chat_model" in statusData || "chat" in statusData;
    const chat = statusData.chat_model ?? (statusData.chat && (statusData.chat.model ?? statusData.chat));
    ui.navAsk.hidden = says && !chat;
    return statusData;
  }

  async function loadStatus() {
    clear(ui.statusList);
    for (const old of document.querySelectorAll("#view-status .more")) old.remove();
    try {
      const data = { ...(await fetchStatus()) };
      // a scoped view counts "sources" (its files); show one "Files" either way
      if (!("files" in data) && "sources" in data) data.files = data.sources;
      if (data.files === data.sources) delete data.sources;
      statusRows(data, ui.statusList, 0);
    } catch (err) {
      showError(err.message);
    }
  }

  // ---------- ask ----------

  async function ask(event) {
    event.preventDefault();
    const question = ui.question.value.trim();
    if (!question) return;
    showError("");
    clear(ui.answer);
    ui.askButton.disabled = true;
    ui.answer.append(el("p", "summary", "Thinking…"));
    try {
      const data = await api("/api/ask", {
        method: "POST",
        body: JSON.stringify({ question, mode: ui.mode.value }),
      });
      renderAnswer(data);
    } catch (err) {
      clear(ui.answer);
      showError(err.message);
    } finally {
      ui.askButton.disabled = false;
    }
  }

  function renderAnswer(data) {
    clear(ui.answer);
    const citations = Array.isArray(data.citations) ? data.citations : [];
    const byNumber = new Map(citations.map((c) => [Number(c.n), c]));
    const text = el("div", data.refused ? "answer-text refused" : "answer-text");
    let said = String(data.answer || "");
    if (data.refused && !said.trim()) said = String(data.reason || "Nothing relevant was found in the knowledge base.");
    else if (data.reason && !said.trim()) said = String(data.reason);
    for (const para of said.split(/\n{2,}/)) {
      const p = el("p");
      let at = 0;
      for (const m of para.matchAll(/\[(\d{1,3})\]/g)) {
        if (m.index > at) p.append(para.slice(at, m.index));
        const cite = byNumber.get(Number(m[1]));
        if (cite) {
          const a = el("a", "cite", `[${m[1]}]`);
          a.href = docUrl(cite.path, cite.line, cite.page, cite.chunk_id);
          a.title = String(cite.location || cite.path);
          p.append(a);
        } else {
          p.append(m[0]);
        }
        at = m.index + m[0].length;
      }
      if (at < para.length) p.append(para.slice(at));
      text.append(p);
    }
    ui.answer.append(text);
    if (citations.length) {
      const list = el("ol", "citations");
      for (const cite of citations) {
        const a = el("a", "", String(cite.location || cite.path));
        a.href = docUrl(cite.path, cite.line, cite.page, cite.chunk_id);
        const li = el("li", "", a);
        if (Number.isInteger(Number(cite.n))) li.value = Number(cite.n);
        list.append(li);
      }
      ui.answer.append(list);
    }
  }

  // ---------- events ----------

  /** Links of this page open in place (history kept); modified clicks keep the browser's way. */
  function onClick(event) {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const copy = event.target.closest("button.copy");
    if (copy) {
      const source = $(copy.dataset.copy);
      copyText(source ? source.textContent : "", copy);
      return;
    }
    const link = event.target.closest("a");
    if (!link) return;
    const nav = link.dataset.view;
    if (nav) {
      event.preventDefault();
      go(pageUrl({ ...searchState(), view: nav === "search" ? "" : nav }), true);
      if (nav === "search") ui.q.focus();
      return;
    }
    if (link === ui.docBack) {
      event.preventDefault();
      backToSearch();
      return;
    }
    if (link.origin === location.origin && link.pathname === location.pathname && link.search.includes("doc=")) {
      event.preventDefault();
      openLink(link.href);
    }
  }

  function openLink(href) {
    pushedDoc = document.body.dataset.view === "search";
    go(href, true);
  }

  function typing(target) {
    return target instanceof HTMLElement && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  function onKey(event) {
    if (event.metaKey || event.ctrlKey || event.altKey) return;
    const view = document.body.dataset.view;
    if (event.key === "/" && !typing(event.target)) {
      event.preventDefault();
      if (view !== "search") go(pageUrl(searchState()), false);
      ui.q.focus();
      ui.q.select();
      return;
    }
    if (event.key === "Escape") {
      if (view === "doc") {
        event.preventDefault();
        backToSearch();
      } else if (view !== "search") {
        event.preventDefault();
        go(pageUrl(searchState()), false);
      } else if (event.target === ui.q && selected >= 0) {
        event.preventDefault();
        hitNodes[selected].classList.remove("selected");
        selected = -1;
      } else if (typing(event.target)) {
        event.target.blur();
      }
      return;
    }
    if (view !== "search") return;
    const inBox = event.target === ui.q || !typing(event.target);
    if (!inBox) return;
    if (event.key === "ArrowDown" && hitNodes.length) {
      event.preventDefault();
      select(selected + 1);
    } else if (event.key === "ArrowUp" && hitNodes.length) {
      event.preventDefault();
      select(selected <= 0 ? 0 : selected - 1);
    } else if (event.key === "Enter") {
      if (selected >= 0 && hitNodes[selected]) {
        event.preventDefault();
        openLink(hitNodes[selected].href);
      } else if (event.target === ui.q) {
        event.preventDefault();
        runSearch();
      }
    }
  }

  document.addEventListener("click", onClick);
  document.addEventListener("keydown", onKey);
  ui.q.addEventListener("input", scheduleSearch);
  ui.folder.addEventListener("input", scheduleSearch);
  ui.filter.addEventListener("input", scheduleSearch);
  ui.mode.addEventListener("change", scheduleSearch);
  ui.explain.addEventListener("change", scheduleSearch);
  $("search-form").addEventListener("submit", (event) => { event.preventDefault(); runSearch(); });
  $("ask-form").addEventListener("submit", ask);
  window.addEventListener("popstate", route);
  for (const link of document.querySelectorAll("nav a, .brand")) {
    link.href = pageUrl({ view: link.dataset.view && link.dataset.view !== "search" ? link.dataset.view : "" });
  }

  route();
  if (document.body.dataset.view === "search") ui.q.focus();
  if (!statusData) fetchStatus().catch((err) => { if (err.status === 401 || err.status === 403) showError(err.message); });
})();

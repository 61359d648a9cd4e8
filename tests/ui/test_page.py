"""``kb ui``'s page in a real headless Chromium (Debian's ``chromium`` through playwright),
against ``kb ui`` started as a real process on a small real index: searching as you type,
reading a hit at its line, the keyboard, folders and filters, hostile documents that must run
nothing, a scoped token, refusals, and screenshots of each view at 1280 and 390 pixels
(kept in the test's tmp folder and copied to build/ui-screenshots/)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from extras import need

need("starlette")  # kb ui's server: the ui extra

from ui_page import (  # noqa: E402
    CANARY,
    DESKTOP,
    PHONE,
    SYNC_LINE,
    SYNC_QUERY,
    Watched,
    browser,
    build_index,
    chromium,
    in_viewport,
    layout_facts,
    screenshot,
    ui_server,
)

FULL_TOKEN = "full-access-token-0123456789abcdef"
SCOPED_TOKEN = "guide-only-token-0123456789abcdef"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    chromium()  # skip before indexing anything when there is no browser
    return build_index(tmp_path_factory.mktemp("ui-page"))


@pytest.fixture(scope="module")
def server(corpus):
    _, db, home = corpus
    with ui_server(db, home) as running:
        yield running


@pytest.fixture(scope="module")
def chrome(corpus):
    with browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ui-screenshots")


@pytest.fixture
def tab(chrome):
    watched = Watched(chrome, DESKTOP)
    yield watched
    watched.close()


def _results(page: Any) -> list[dict[str, Any]]:
    """The results as shown: each file heading and the place and text of its hits."""
    page.wait_for_selector("#results .hit")
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#results .file')).map(f => ({
            path: f.querySelector('.file-path a').textContent,
            hits: Array.from(f.querySelectorAll('.hit')).map(h => ({
                line: h.dataset.line, text: h.querySelector('.snippet').textContent,
                marks: Array.from(h.querySelectorAll('mark')).map(m => m.textContent)}))}))"""
    )


def _search(page: Any, text: str) -> list[dict[str, Any]]:
    page.fill("#q", "")
    page.locator("#q").press_sequentially(text, delay=20)
    page.wait_for_function(
        "q => new URLSearchParams(location.search).get('q') === q && "
        "!document.getElementById('results').hasAttribute('aria-busy') && "
        "document.querySelector('#results .hit')", arg=text,
    )  # fmt: skip
    return _results(page)


def _status(page: Any) -> dict[str, str]:
    """The status panel as shown: label -> value."""
    page.wait_for_selector("#status-list dt")
    labels = page.locator("#status-list > dt").all_text_contents()
    return dict(zip(labels, page.locator("#status-list > dd").all_text_contents(), strict=True))


def _error(page: Any) -> str:
    page.wait_for_selector("#error:not([hidden])")
    return str(page.text_content("#error"))


def test_typing_a_query_shows_the_right_file_first_with_its_terms_marked(server, tab):
    page = tab.page
    page.goto(server.page())
    assert page.evaluate("document.activeElement.id") == "q"
    results = _search(page, "sourdough starter")
    assert results[0]["path"].endswith("guide/baking.md")
    marks = {m.lower() for hit in results[0]["hits"] for m in hit["marks"]}
    assert marks == {"sourdough", "starter"}  # exact, after emoji (two UTF-16 units each)
    # the search lives in the URL, token kept: reloading shows the same results
    assert "q=sourdough+starter" in page.url and f"token={server.token}" in page.url
    assert page.title() == "sourdough starter · kb"
    page.reload()
    assert _results(page)[0]["path"].endswith("guide/baking.md")
    assert page.input_value("#q") == "sourdough starter"
    assert not tab.errors and not tab.dialogs


def test_a_page_loaded_with_q_shows_its_results_without_typing(server, tab):
    page = tab.page
    page.goto(server.page(q=SYNC_QUERY, mode="keyword"))
    results = _results(page)
    assert results[0]["path"].endswith("notes/sync.txt")
    assert results[0]["hits"][0]["line"] == str(SYNC_LINE)
    assert page.input_value("#mode") == "keyword"


def test_a_file_shows_its_matching_chunks_under_one_heading(server, tab):
    page = tab.page
    page.goto(server.page(q="routine log entry", mode="keyword"))
    results = _results(page)
    assert results[0]["path"].endswith("notes/sync.txt")
    assert [r["path"] for r in results].count(results[0]["path"]) == 1
    lines = [int(hit["line"]) for hit in results[0]["hits"]]
    assert len(lines) > 1 and len(set(lines)) == len(lines)
    assert page.locator("#results .file .count").first.text_content() == f"{len(lines)} chunks"


def test_an_older_answer_arriving_late_is_dropped(server, tab):
    page = tab.page
    # the first search is sent 1 s late and cannot be cancelled, so its answer comes after
    # the second one's
    page.add_init_script(
        """const realFetch = window.fetch;
        window.fetch = (url, options) => !String(url).includes('q=tomatoes')
            ? realFetch(url, options)
            : new Promise(done => setTimeout(done, 1000))
                .then(() => realFetch(url, { ...options, signal: undefined }));"""
    )
    page.goto(server.page())
    page.fill("#q", "tomatoes")
    page.wait_for_timeout(300)  # debounced and sent
    page.fill("#q", SYNC_QUERY)
    page.wait_for_timeout(1500)  # the held answer has arrived by now
    results = _results(page)
    assert [r["path"].rsplit("/", 1)[1] for r in results] == ["sync.txt"]
    assert page.input_value("#q") == SYNC_QUERY


def test_opening_a_hit_shows_its_line_highlighted_and_scrolled_into_view(server, tab, shots):
    page = tab.page
    page.goto(server.page(q=SYNC_QUERY))
    _results(page)
    page.click("#results .hit >> nth=0")
    page.wait_for_selector("#view-doc:not([hidden]) .line.hit")
    assert "doc=" in page.url and f"line={SYNC_LINE}" in page.url
    hit = page.locator(f"#L{SYNC_LINE}")
    assert {"hit", "at"} <= set((hit.get_attribute("class") or "").split())
    assert "flamingo client cannot reconnect" in hit.text_content()
    assert page.locator(".line.at").count() == 1
    assert in_viewport(page, f"#L{SYNC_LINE}")
    assert not in_viewport(page, "#L1")  # it scrolled: line 1 is out of sight
    assert page.text_content("#doc-editor").endswith(f"sync.txt:{SYNC_LINE}")
    assert page.text_content("#doc-kbget") == f"kb get {page.text_content('#doc-editor')}"
    screenshot(page, shots, f"document-{DESKTOP}")
    # back to the results, as they were
    page.click("#doc-back")
    page.wait_for_selector("#view-search:not([hidden]) #results .hit")
    assert page.input_value("#q") == SYNC_QUERY


def test_the_keyboard_focuses_selects_opens_and_goes_back(server, tab):
    page = tab.page
    page.goto(server.page())
    page.evaluate("document.activeElement.blur()")  # the key works away from the box too
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    _search(page, "tomatoes")
    assert len(page.locator("#results .hit").all()) >= 2
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    selected = page.locator("#results .hit.selected")
    assert selected.count() == 1
    second = page.locator("#results .hit").nth(1)
    assert "selected" in (second.get_attribute("class") or "")
    page.keyboard.press("ArrowUp")
    first = page.locator("#results .hit").first
    assert "selected" in (first.get_attribute("class") or "")
    target = first.get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_selector("#view-doc:not([hidden])")
    assert page.url.endswith(target.split("?", 1)[1]) or target.split("?", 1)[1] in page.url
    page.keyboard.press("Escape")
    page.wait_for_selector("#view-search:not([hidden]) #results .hit")
    assert page.input_value("#q") == "tomatoes"
    assert "doc=" not in page.url


def test_a_folder_keeps_results_inside_it(server, corpus, tab):
    docs, _, _ = corpus
    page = tab.page
    page.goto(server.page())
    everywhere = _search(page, "tomatoes")
    assert any("guide/" in r["path"] for r in everywhere)
    page.fill("#folder", str(docs / "notes"))
    page.wait_for_function("() => new URLSearchParams(location.search).get('folder')")
    page.wait_for_timeout(600)
    inside = _results(page)
    assert inside and all("/notes/" in r["path"] for r in inside)
    assert "folder=" in page.url


def test_a_bad_filter_is_one_line_in_the_page_not_a_blank_page(server, tab):
    page = tab.page
    page.goto(server.page(q="tomatoes", filter="this is not a filter ((("))
    message = _error(page)
    assert message and "\n" not in message and "Traceback" not in message
    assert page.is_visible("#q") and page.input_value("#q") == "tomatoes"


def test_a_hostile_document_shows_as_text_and_runs_nothing(server, tab):
    page = tab.page
    page.goto(server.page(q="pelicanpayload script"))
    results = _results(page)
    assert results[0]["path"].endswith("hostile.md")
    page.click("#results .hit >> nth=0")
    page.wait_for_selector("#view-doc:not([hidden]) .markdown")
    page.wait_for_timeout(300)
    body = page.locator("#doc-body")
    text = body.text_content()
    assert "<script>window.__pwned = 'script'</script>" in text
    assert "onerror=\"window.__pwned = 'img'\"" in text
    found = page.evaluate(
        """() => ({
            pwned: window.__pwned === undefined ? null : String(window.__pwned),
            scripts: document.querySelectorAll('#doc-body script, #doc-body img, #doc-body svg, '
                + '#doc-body iframe, #doc-body [onclick], #doc-body [onerror]').length,
            hrefs: Array.from(document.querySelectorAll('#doc-body a')).map(a => a.href),
            code: document.querySelector('#doc-body pre code').textContent,
        })"""
    )
    assert found["pwned"] is None and found["scripts"] == 0
    assert not [h for h in found["hrefs"] if not h.startswith(("http://127.0.0.1", "https://"))]
    assert "https://example.com/ok" in found["hrefs"]
    assert any("guide%2Fbaking.md" in h for h in found["hrefs"])  # a relative link: its view
    assert "<script>" in found["code"]
    # clicking what looks like the javascript: link runs nothing either
    page.locator("#doc-body").get_by_text("javascript:window.__pwned='link'").first.click()
    page.locator("#doc-source").click()  # and the source view shows the raw text
    assert page.locator(".lines").is_visible()
    page.wait_for_timeout(200)
    assert page.evaluate("window.__pwned === undefined")
    assert not tab.dialogs and not tab.errors
    assert not [m for m in tab.console if "Content Security Policy" in m]


def test_the_status_panel_shows_the_index(server, tab, shots):
    page = tab.page
    page.goto(server.page(view="status"))
    shown = _status(page)
    assert shown.get("Files") == "8", shown
    assert int(shown["Chunks"]) >= 6
    assert "simple" in shown.get("Embedder", "")
    screenshot(page, shots, f"status-{DESKTOP}")


def test_no_token_and_a_wrong_host_are_refused(server, tab):
    page = tab.page
    for token, status in (("", 401), ("wrong-token-wrong-token-wrong", 403)):
        response = page.goto(server.page(token=token, q="tomatoes"))
        assert response.status == status
        assert "tomatoes" not in page.content() and not page.query_selector("#q")
        assert response.request.redirected_from is None
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request(
        "GET", f"/?token={server.token}", headers={"Host": f"evil.example:{server.port}"}
    )
    assert connection.getresponse().status in (403, 421)
    connection.close()


def test_a_scoped_token_sees_nothing_outside_its_scope(corpus, chrome, tmp_path):
    docs, db, home = corpus
    tokens = tmp_path / "tokens.yaml"
    scope = {"source": {"$prefix": str(docs / "guide") + "/"}}
    tokens.write_text(
        json.dumps(
            {"tokens": [
                {"token": FULL_TOKEN, "name": "all", "filter": {}},
                {"token": SCOPED_TOKEN, "name": "guide", "filter": scope},
            ]}
        ),
        encoding="utf-8",
    )  # fmt: skip
    with ui_server(db, home, "--tokens", str(tokens)) as scoped:
        assert scoped.token == ""  # each user has their own: none printed
        tab = Watched(chrome, DESKTOP)
        page = tab.page
        try:
            page.goto(scoped.page(token=FULL_TOKEN, q=CANARY))
            assert _results(page)[0]["path"].endswith("secret/plans.md")
            page.goto(scoped.page(token=SCOPED_TOKEN, q=CANARY + " tomatoes"))
            results = _results(page)
            assert results and all("/guide/" in r["path"] for r in results)
            assert CANARY not in page.text_content("#results")
            # a document outside the scope: the same one line as one that is not indexed
            page.goto(scoped.page(token=SCOPED_TOKEN, doc=str(docs / "secret" / "plans.md")))
            outside = _error(page)
            assert CANARY not in page.content()
            page.goto(scoped.page(token=SCOPED_TOKEN, doc=str(docs / "secret" / "none.md")))
            unknown = _error(page)
            assert unknown.replace("none.md", "plans.md") == outside
            page.goto(scoped.page(token=SCOPED_TOKEN, view="status"))
            shown = _status(page)
            assert shown["Files"] == "3" and shown["Scoped token"] == "yes", shown
        finally:
            tab.close()


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_each_view_fits_its_width_and_is_kept_as_a_screenshot(server, chrome, shots, width):
    tab = Watched(chrome, width, height=844 if width == PHONE else 900)
    page = tab.page
    try:
        page.goto(server.page(q="tomatoes"))
        _results(page)
        screenshot(page, shots, f"search-{width}")
        facts = layout_facts(page)
        assert facts["scrollWidth"] <= facts["innerWidth"], facts
        assert in_viewport(page, "#q") and in_viewport(page, "#results .hit")

        sync = _first_path(server, SYNC_QUERY)
        page.goto(server.page(q=SYNC_QUERY, doc=sync, line=str(SYNC_LINE)))
        page.wait_for_selector(".line.hit")
        page.wait_for_timeout(200)
        screenshot(page, shots, f"document-{width}")
        facts = layout_facts(page)
        assert facts["scrollWidth"] <= facts["innerWidth"], facts
        assert in_viewport(page, f"#L{SYNC_LINE}")

        page.goto(server.page(doc=_first_path(server, "sourdough starter"), line="7"))
        page.wait_for_selector(".markdown .hit")
        screenshot(page, shots, f"markdown-{width}")
        assert layout_facts(page)["scrollWidth"] <= width

        page.goto(server.page(q="heron router"))
        page.click("#results .hit >> nth=0")
        page.wait_for_selector(".pages .page.hit")
        screenshot(page, shots, f"pdf-{width}")
        assert layout_facts(page)["scrollWidth"] <= width

        page.goto(server.page(q="pelicanpayload"))
        page.click("#results .hit >> nth=0")
        page.wait_for_selector(".markdown pre")
        screenshot(page, shots, f"hostile-{width}")
        assert layout_facts(page)["scrollWidth"] <= width

        page.goto(server.page(view="status"))
        page.wait_for_selector("#status-list dt")
        screenshot(page, shots, f"status-{width}")
        assert layout_facts(page)["scrollWidth"] <= width

        dark = Watched(chrome, width, dark=True)
        dark.page.goto(server.page(q="tomatoes"))
        _results(dark.page)
        screenshot(dark.page, shots, f"search-dark-{width}")
        background = dark.page.evaluate("getComputedStyle(document.body).backgroundColor")
        dark.close()
        assert background != "rgb(255, 255, 255)"
        assert not tab.errors
    finally:
        tab.close()


def _first_path(server: Any, query: str) -> str:
    """The path of the first hit of ``query``, from the API the page calls."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    from urllib.parse import urlencode

    connection.request(
        "GET", "/api/search?" + urlencode({"q": query}),
        headers={"Authorization": f"Bearer {server.token}"},
    )  # fmt: skip
    response = connection.getresponse()
    data = json.loads(response.read())
    connection.close()
    return str(data["hits"][0]["path"])


def test_ask_without_a_chat_model_is_one_line_in_the_page(server, tab):
    page = tab.page
    page.goto(server.page(view="ask"))
    page.fill("#question", "How do I feed a sourdough starter?")
    page.click("#ask-button")
    assert _error(page).startswith("no chat model configured")
    assert page.is_visible("#question")


def test_ask_answers_with_numbered_citations_that_open_the_document(corpus, chrome, shots):
    from fake_chat import FakeChatServer

    _, db, home = corpus
    with (
        FakeChatServer() as chat,
        ui_server(db, home, env={"OPENAI_BASE_URL": chat.url + "/v1"}) as server,
    ):
        for width in (DESKTOP, PHONE):
            tab = Watched(chrome, width)
            page = tab.page
            try:
                page.goto(server.page(view="ask"))
                page.fill("#question", "How often do I feed the sourdough starter?")
                page.click("#ask-button")
                page.wait_for_selector("#answer .answer-text a.cite")
                assert not page.is_visible("#error")
                cites = page.locator("#answer .citations a").all_text_contents()
                assert cites and "baking.md" in cites[0]
                screenshot(page, shots, f"ask-{width}")
                assert layout_facts(page)["scrollWidth"] <= width
                page.click("#answer .answer-text a.cite >> nth=0")
                page.wait_for_selector("#view-doc:not([hidden]) .markdown .hit")
                assert page.text_content("#doc-path").endswith("guide/baking.md")
                assert chat.requests, "the page's question reached the chat model"
                if width == DESKTOP:  # nothing relevant: the refusal, no citation
                    page.goto(server.page(view="ask"))
                    page.fill("#question", "xqzzvh wplorfq jjukkd")
                    page.click("#ask-button")
                    page.wait_for_selector("#answer .answer-text.refused")
                    assert page.text_content("#answer .answer-text").strip()
                    assert not page.locator("#answer .citations").count()
            finally:
                tab.close()


def test_markdown_is_rendered_as_elements_and_a_pdf_as_its_pages(server, tab):
    page = tab.page
    page.goto(server.page(doc=_first_path(server, "sourdough starter"), line="7"))
    page.wait_for_selector(".markdown .hit")
    shape = page.evaluate(
        """() => { const md = document.querySelector('.markdown');
            return { h1: md.querySelector('h1').textContent, h2: md.querySelectorAll('h2').length,
                     strong: md.querySelector('p strong').textContent,
                     nested: md.querySelectorAll('ul > li > ul > li').length,
                     hit: Array.from(md.querySelectorAll('.hit')).map(n => n.textContent) }; }"""
    )
    assert shape["h1"] == "Baking bread" and shape["h2"] == 2 and shape["strong"] == "sourdough"
    assert shape["nested"] == 1
    assert any("Feed the sourdough starter" in text for text in shape["hit"])
    assert "Feed the sourdough starter" in page.text_content(".markdown > .at")
    page.click("#doc-source")
    assert page.locator("#L7").is_visible() and "at" in page.get_attribute("#L7", "class")

    page.goto(server.page(q="heron router"))
    results = _results(page)
    assert results[0]["path"].endswith("manual.pdf")
    page.click("#results .hit >> nth=0")
    page.wait_for_selector("#view-doc:not([hidden]) .pages .page.hit")
    assert "heron router" in page.text_content(".page.hit")
    assert page.text_content(".page.hit .page-head") == "Page 1"

    page.goto(server.page(q="ibis command"))
    assert _results(page)[0]["path"].endswith("install.docx")
    page.click("#results .hit >> nth=0")
    page.wait_for_selector("#view-doc:not([hidden]) .pages .page.hit")
    heads = page.locator(".pages .page .page-head").all_text_contents()
    assert "Usage" in heads, heads
    hit = page.locator(".page.hit")
    assert "Usage" in hit.locator(".page-head").all_text_contents()
    assert "ibis command" in hit.last.text_content()


def test_scores_on_demand_show_the_explain_text(server, tab):
    page = tab.page
    page.goto(server.page(q="sourdough starter"))
    _results(page)
    assert not page.locator("#results .explain").count()
    assert not page.locator("#results .score").count()
    page.check("#explain")
    page.wait_for_selector("#results .explain")
    assert "explain=1" in page.url
    assert page.locator("#results .explain").first.text_content().strip()
    assert float(page.locator("#results .score").first.text_content()) > 0


def test_typing_is_debounced_into_few_searches(server, tab):
    page = tab.page
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/search" in r.url else None)
    page.goto(server.page())
    page.locator("#q").press_sequentially("sourdough starter", delay=25)  # 17 keys, ~0.4 s
    _results(page)
    page.wait_for_timeout(400)
    assert 1 <= len(asked) <= 3, asked
    assert "q=sourdough+starter" in asked[-1]


def test_the_copy_buttons_copy_the_editor_place_and_the_kb_get_command(server, chrome):
    tab = Watched(chrome, DESKTOP)
    origin = server.base.rstrip("/")
    tab.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin)
    page = tab.page
    try:
        page.goto(server.page(doc=_first_path(server, SYNC_QUERY), line=str(SYNC_LINE)))
        page.wait_for_selector(".line.hit")
        page.click("button[data-copy=doc-kbget]")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == page.text_content("#doc-kbget")
        assert copied.startswith("kb get ") and copied.endswith(f"sync.txt:{SYNC_LINE}")
        page.click("button[data-copy=doc-editor]")
        assert page.evaluate("navigator.clipboard.readText()").endswith(f"sync.txt:{SYNC_LINE}")
    finally:
        tab.close()


def test_a_freshness_state_other_than_current_is_marked(server, tab):
    """Issue 39 adds ``freshness`` to each hit; until the server sends it, the API's answer
    is stood in for here (the page's rendering is what is tested)."""
    hit = {
        "rank": 1, "path": "/docs/a.md", "location": "/docs/a.md:3", "line": 3,
        "chunk_id": "c1", "score": 0.5, "snippet": "old text", "highlights": [[0, 3]],
        "freshness": {"state": "stale", "indexed_at": "2026-01-01T00:00:00+00:00"},
    }  # fmt: skip
    current = {**hit, "chunk_id": "c2", "line": 9, "freshness": {"state": "current"}}
    body = json.dumps({"query": "old", "mode": "hybrid", "hits": [hit, current], "refused": False})
    page = tab.page
    page.route("**/api/search?*", lambda route: route.fulfill(
        status=200, content_type="application/json", body=body))  # fmt: skip
    page.goto(server.page(q="old"))
    _results(page)
    badges = page.locator("#results .badge").all_text_contents()
    assert badges == ["stale"]
    assert page.locator("#results mark").first.text_content() == "old"


UNSAFE_LINKS = [
    "javascript:window.__pwned=1", " JaVaScRiPt:window.__pwned=1", "java\nscript:x",
    "java\tscript:x", "\x00javascript:x", "\u0085javascript:x", "data:text/html,<b>x</b>",
    "DATA:image/svg+xml,<svg onload=x>", "vbscript:x", "file:///etc/passwd", "#top", "",
]  # fmt: skip


def test_markdown_links_keep_only_http_and_relative_targets(server, tab):
    page = tab.page
    page.goto(server.page())
    page.wait_for_function("window.kb && window.kb.markdown")
    judged = page.evaluate(
        """(urls) => urls.map(u => window.kb.markdown.safeHref(u, '/docs/a/b.md',
            p => 'doc:' + p))""",
        [*UNSAFE_LINKS, "https://example.com/x", "http://e.org", "//cdn.example/x", "../c.md#h"],
    )
    assert judged[: len(UNSAFE_LINKS)] == [None] * len(UNSAFE_LINKS)
    assert judged[len(UNSAFE_LINKS) :] == [
        "https://example.com/x", "http://e.org", "https://cdn.example/x", "doc:/docs/c.md",
    ]  # fmt: skip


def test_markdown_inline_marks_and_underscores_inside_words(server, tab):
    page = tab.page
    page.goto(server.page())
    page.wait_for_function("window.kb && window.kb.markdown")
    shape = page.evaluate(
        """(line) => { const box = window.kb.markdown.render([line], {link: p => p});
            const p = box.querySelector('p');
            return { strong: Array.from(p.querySelectorAll('strong')).map(n => n.textContent),
                     em: Array.from(p.querySelectorAll('em')).map(n => n.textContent),
                     code: p.querySelector('code').textContent,
                     elements: p.querySelectorAll('*').length,
                     text: p.textContent }; }""",
        "A **b** and *i*, _e_ and __s__, `<b>x</b>`, snake_case_name and window.__pwned__x.",
    )
    assert shape["strong"] == ["b", "s"] and shape["em"] == ["i", "e"]
    assert shape["code"] == "<b>x</b>" and shape["elements"] == 5
    assert "snake_case_name and window.__pwned__x." in shape["text"]


def test_a_huge_markdown_file_is_shown_as_its_lines(server, tab):
    """Past 2,000,000 characters the page shows a Markdown file's numbered lines instead of
    rendering it (the API's answer is stood in for: the page's choice is what is tested)."""
    lines = [
        "# Big",
        "",
        *(
            f"Line {n} *of* a [long](https://example.com) file, " + "padding " * 8
            for n in range(25_000)
        ),
    ]
    body = json.dumps({
        "path": "/docs/big.md", "kind": "markdown", "lines": lines, "first_line": 1,
        "total_lines": len(lines), "pages": [], "hit_lines": [20_000, 20_002],
        "editor": "/docs/big.md:20001", "kb_get": "kb get /docs/big.md:20001",
    })  # fmt: skip
    page = tab.page
    page.route("**/api/document?*", lambda route: route.fulfill(
        status=200, content_type="application/json", body=body))  # fmt: skip
    page.goto(server.page(doc="/docs/big.md", line="20001"))
    page.wait_for_selector(".lines .line.at")
    assert "Too large to render as Markdown" in page.text_content("#doc-body")
    assert not page.locator(".markdown").count() and page.locator("#doc-source").is_hidden()
    assert in_viewport(page, "#L20001")

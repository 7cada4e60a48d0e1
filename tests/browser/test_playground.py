"""The playground in a real Chromium, against a real server on loopback (the dev issuer, the
offline, a scripted or a fake HTTP model; nothing outside 127.0.0.1). Screenshots of the main
states go to tests/browser/.output/<test>/."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from aircoach.settings import Settings
from tests.helpers import app_with, served
from tests.llm.fakes import HANG_LIMIT_S, FakeModelServer, Reply, gemini_text
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.tools.fake_service import FakeToolService
from tests.tools.fake_service import Reply as ToolReply

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def _tools(origin: str, token: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{origin}/api/tools", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_page_loads_clean_signs_in_and_builds_the_toolbar_from_api_tools(
    settings, session_for, token
):
    some_tools = settings.model_copy(update={"tool_env": {"LEX_SEARCH_URL": "http://127.0.0.1:9"}})
    with served(app_with(some_tools)) as origin:
        s = session_for(origin)
        with s.page.expect_response(f"{origin}/") as first:
            s.open()
        headers = first.value.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        expect(s.page.locator("#dev-form")).to_be_visible()
        s.shot("01-sign-in")

        s.dev_sign_in("Giulia")
        expect(s.page.locator("#who-name")).to_have_text("Utente: dev|Giulia")
        tools = _tools(origin, token())
        switches = s.page.locator("#toolbar input")
        expect(switches).to_have_count(len(tools))
        for tool in tools:
            switch = s.page.locator(f'#toolbar input[data-tool="{tool["name"]}"]')
            label = s.page.locator("#toolbar label").filter(
                has=s.page.locator(f'input[data-tool="{tool["name"]}"]')
            )
            expect(label).to_contain_text(tool["label"])
            if tool["available"]:
                expect(switch).to_be_enabled()
                assert switch.is_checked() == tool["default_enabled"], tool["name"]
            else:
                expect(switch).to_be_disabled()
                expect(switch).not_to_be_checked()
                expect(label).to_contain_text(tool["unavailable_reason"])
        assert {t["name"]: t["available"] for t in tools} == {
            "domanda_teoria": True,
            "verifica_risposta": True,
            "web_search": False,
            "kb_search": True,  # the course manual on board (issue 16)
            "lex_search": True,
        }
        expect(s.page.locator("#progress")).to_contain_text("Risposte: 0")
        s.shot("02-signed-in-toolbar")
    assert s.console_errors == []
    assert s.outside == []


def test_switching_a_tool_off_changes_the_request_body(settings, session_for):
    script = Script([text("Prima risposta."), text("Seconda risposta.")])
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        bodies = []
        s.page.on(
            "request",
            lambda r: r.url.endswith("/api/stream_query") and bodies.append(r.post_data_json),
        )
        turn = s.ask("Ciao")
        expect(turn.locator(".answer")).to_have_text("Prima risposta.")
        s.page.uncheck('#toolbar input[data-tool="domanda_teoria"]')
        turn = s.ask("Ancora")
        expect(turn.locator(".answer")).to_have_text("Seconda risposta.")
    script.assert_used()
    assert [b["tools"]["domanda_teoria"] for b in bodies] == [True, False]
    assert [b["query"] for b in bodies] == ["Ciao", "Ancora"]
    assert bodies[1]["tools"]["verifica_risposta"] is True
    # The unavailable tools are sent off, as the server would take them anyway.
    assert bodies[1]["tools"]["web_search"] is False


def test_a_quiz_question_is_a_card_whose_option_grades_and_updates_progress(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("pilota")
        turn = s.ask("Dammi una domanda del capitolo 3")
        card = turn.locator("article.quiz")
        expect(card).to_have_count(1)
        expect(card).to_have_attribute("data-question", re.compile(r"^3-\d+$"))
        expect(turn.locator(".turn-footer")).to_contain_text("Modello: ")
        options = card.locator("button.option")
        assert options.count() >= 2
        s.shot("03-quiz-card")

        options.first.click()
        grading = card.locator(".grading .result")
        expect(grading).to_be_visible()
        expect(grading).to_contain_text("la risposta corretta è")
        assert grading.get_attribute("data-corretta") in ("true", "false")
        right = grading.get_attribute("data-corretta") == "true"
        expect(card.locator("button.option.correct")).to_have_count(1)
        answer_turn = s.page.locator("#turns > li").nth(1)
        expect(answer_turn.locator(".human")).to_have_text("la a")
        expect(answer_turn.locator(".turn-footer")).to_contain_text("Turni di contesto: 1")

        bar = s.page.locator('#progress svg g[data-capitolo="3"]')
        expect(bar).to_have_attribute("data-risposte", "1")
        expect(bar).to_have_attribute("data-corrette", "1" if right else "0")
        expect(bar.locator("text.count")).to_have_text(f"{int(right)}/1")
        s.page.click("#history-panel summary")
        expect(s.page.locator("#history > li")).to_have_count(2)
        expect(s.page.locator("#history > li").first).to_contain_text("la a")
        s.shot("04-quiz-graded-progress")
    assert s.console_errors == []


def test_an_option_chosen_before_the_turn_has_settled_is_sent_not_dropped(settings, session_for):
    """After `done` the page refreshes its panels before the next message may go: an option
    clicked meanwhile (here the progress request is held until the test lets it through) is
    kept and sent when the turn has settled."""
    held: list[Any] = []
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("svelto")
        s.page.route(f"{origin}/api/progress", lambda route: held.append(route))
        turn = s.ask("Dammi una domanda del capitolo 3")
        expect(turn.locator(".turn-footer")).to_contain_text("Modello: ")
        card = turn.locator("article.quiz")
        expect(s.page.locator("#send")).to_be_disabled()  # still settling: progress is held
        card.locator("button.option").first.click()
        expect(card.locator("button.option.chosen")).to_have_count(1)
        expect(s.page.locator("#turns > li")).to_have_count(1)  # kept, not sent yet
        s.shot("13-choice-kept-while-settling")

        for route in held:
            route.continue_()
        s.page.unroute(f"{origin}/api/progress")  # and one not yet seen here goes through
        expect(card.locator(".grading .result")).to_be_visible()
        expect(s.page.locator("#turns > li").nth(1).locator(".human")).to_have_text("la a")
        expect(s.page.locator("#send")).to_be_enabled()
    assert s.console_errors == []


def _write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


@dataclass
class SteppedModelServer(FakeModelServer):
    """A fake model whose streamed reply sends its first chunk at once and each next one only
    when the test calls `step()`: the test sees every partial render before the next."""

    gates: list[threading.Event] = field(default_factory=list)
    _opened: int = 0

    def step(self) -> None:
        self.gates[self._opened].set()
        self._opened += 1

    def stop(self) -> None:
        for gate in self.gates:
            gate.set()
        super().stop()

    def _answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        assert reply.chunks is not None
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for i, chunk in enumerate(reply.chunks):
            if i:
                self.gates[i - 1].wait(HANG_LIMIT_S)
            _write_chunk(handler, chunk.encode())
        _write_chunk(handler, b"")


def test_a_slow_models_answer_renders_progressively_before_done(data_dir, session_for):
    model = SteppedModelServer(gates=[threading.Event() for _ in range(2)])
    model.script(gemini_text("Il vento ", "in coda ", "allunga la corsa."))
    model.start()
    try:
        settings = Settings(
            _env_file=None,
            data_dir=data_dir,
            google_api_key="fake-key",
            model_base_url=model.url,
            model_max_retries=0,
            tool_env={},
        )
        with served(app_with(settings)) as origin:
            s = session_for(origin)
            s.open()
            s.dev_sign_in()
            turn = s.ask("Che effetto ha il vento in coda al decollo?")
            answer, footer = turn.locator(".answer"), turn.locator(".turn-footer")
            expect(answer).to_have_text("Il vento")
            expect(footer).to_be_hidden()
            s.shot("05-streaming-first-delta")
            model.step()
            expect(answer).to_have_text("Il vento in coda")
            expect(footer).to_be_hidden()
            model.step()
            expect(answer).to_have_text("Il vento in coda allunga la corsa.")
            expect(footer).to_contain_text("Modello: gemini-2.5-flash")
            expect(footer).to_contain_text(re.compile(r"\d+,\d s$"))
            s.shot("06-streamed-done")
    finally:
        model.stop()
    model.assert_used()


def test_an_expired_token_shows_a_sign_in_notice(settings, session_for, token):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.page.fill("#token-input", token("scaduto", ttl_s=-120))
        s.page.click("#token-form button")
        notice = s.page.locator("#notices .notice-error")
        expect(notice).to_contain_text("Accesso richiesto")
        expect(s.page.locator("#signin")).to_be_visible()
        expect(s.page.locator("#app")).to_be_hidden()
        s.shot("07-expired-token-notice")


def test_source_cards_error_notices_and_the_docs_panel(settings, session_for, token):
    lex = FakeToolService().start()
    results = [
        {
            "title": "SERA.5005 Regole VFR",
            "url": "https://eur-lex.europa.eu/sera5005",
            "content": "Visibilità e distanza dalle nubi.",
        },
        {"title": "Voce senza link", "url": "javascript:alert(1)", "content": "Testo."},
    ]
    lex.plan("/lex", ToolReply(200, {"results": results}))
    script = Script(
        [call("lex_search", query="minimi VFR"), text("Ecco le regole."), RuntimeError("boom")]
    )
    with_lex = settings.model_copy(update={"tool_env": {"LEX_SEARCH_URL": f"{lex.url}/lex"}})
    try:
        with served(app_with(with_lex, models=ScriptedModels(script))) as origin:
            s = session_for(origin)
            s.open()
            s.dev_sign_in("istruttore", admin=True)
            turn = s.ask("Quali sono i minimi VFR?")
            cards = turn.locator("article.source")
            expect(cards).to_have_count(2)
            link = cards.first.locator("a")
            expect(link).to_have_text("SERA.5005 Regole VFR")
            expect(link).to_have_attribute("href", "https://eur-lex.europa.eu/sera5005")
            expect(cards.first).to_contain_text("Visibilità e distanza dalle nubi.")
            expect(cards.nth(1).locator("a")).to_have_count(0)  # not an http(s) link
            expect(turn.locator(".answer")).to_have_text("Ecco le regole.")
            # The cards came from the client shape of HTTP tool results (`items`), not `results`.
            page = httpx.get(
                f"{origin}/api/history",
                headers={"Authorization": f"Bearer {token('dev|istruttore')}"},
            ).json()
            data = page["turns"][0]["tools"][0]["data"]
            assert data["success"] is True and "results" not in data
            assert [item["title"] for item in data["items"]] == [r["title"] for r in results]

            failing = s.ask("E di notte?")
            # In Italian, as the page asks (the browser itself would ask for English).
            expect(failing.locator(".notice-error")).to_contain_text("riprova")
            expect(failing.locator(".turn-footer")).to_contain_text("Modello: ")
            s.shot("08-sources-and-error")

            s.page.click("#docs-panel summary")
            version = re.compile(r"^[0-9a-f]{6,}$")
            expect(s.page.locator("#docs-version")).to_have_text(version)
            s.page.click("#docs-reload")
            expect(s.page.locator("#docs-list li")).not_to_have_count(0)
            expect(s.page.locator("#docs-list")).to_contain_text("tools.json")
            expect(s.page.locator("#docs-version")).to_have_text(version)
            expect(s.page.locator("#notices .notice-info")).to_contain_text("Documenti ricaricati")
            s.shot("09-docs-panel")
    finally:
        lex.stop()
    script.assert_used()
    assert s.outside == []


def test_a_grounding_warning_is_shown_when_a_citation_is_unverified(settings, session_for):
    script = Script([text("Lo stabilisce il Reg. (UE) n. 999/2099, art. 7.")])
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        turn = s.ask("Quale regolamento fissa i minimi VMC?")
        warning = turn.locator(".notice-warning")
        expect(warning).to_contain_text("non trovano riscontro")
        expect(warning.locator("li")).to_have_count(1)
        expect(warning.locator("li")).to_contain_text("999/2099")
        expect(turn.locator(".answer")).to_contain_text("Lo stabilisce il Reg. (UE) n. 999/2099")
        expect(turn.locator(".turn-footer")).to_contain_text("Modello: scripted")
        s.shot("12-grounding-warning")
    script.assert_used()


def test_a_phone_width_screen_has_no_horizontal_scroll(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin, width=360, height=740)
        s.open()
        s.dev_sign_in()
        turn = s.ask("Dammi una domanda del capitolo 7")
        expect(turn.locator("article.quiz")).to_have_count(1)
        expect(turn.locator(".turn-footer")).to_contain_text("Modello: ")
        s.page.click("#history-panel summary")
        expect(s.page.locator("#history > li")).to_have_count(1)
        widths = s.page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] <= widths[1] == 360, widths
        s.shot("10-phone-360")
    assert s.console_errors == []


def test_the_toolbar_and_sign_in_work_with_the_keyboard_alone(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        page = s.page
        page.focus("#dev-name")
        page.keyboard.press("Control+A")
        page.keyboard.type("tastiera")
        page.keyboard.press("Enter")  # submits the form
        expect(page.locator("#app")).to_be_visible()
        expect(page.locator("#query")).to_be_focused()
        page.keyboard.type("Dammi una domanda del capitolo 2")
        page.keyboard.press("Enter")
        card = page.locator("#turns article.quiz")
        expect(card.locator(".option")).not_to_have_count(0)
        expect(page.locator("#turns .turn-footer")).to_be_visible()
        page.focus("#query")
        page.keyboard.press("Shift+Tab")  # back from the message box: the card's last option
        focused = page.locator(".option:focus")
        expect(focused).to_have_count(1)
        letter = focused.get_attribute("data-letter")
        page.keyboard.press("Enter")
        expect(card.locator(".grading .result")).to_be_visible()
        expect(page.locator("#turns > li .human").nth(1)).to_have_text(f"la {letter}")

        switch = page.locator('#toolbar input[data-tool="domanda_teoria"]')
        switch.focus()
        page.keyboard.press("Space")
        expect(switch).not_to_be_checked()
        s.shot("11-keyboard")


def test_the_history_panel_pages_through_older_turns(settings, session_for, token):
    script = Script([text(f"Risposta {i}.") for i in range(12)])
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        headers = {"Authorization": f"Bearer {token('dev|storico')}"}
        for i in range(12):
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": f"Domanda {i}", "stream": False},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        s = session_for(origin)
        s.open()
        s.dev_sign_in("storico")
        s.page.click("#history-panel summary")
        entries = s.page.locator("#history > li")
        expect(entries).to_have_count(10)
        expect(entries.first).to_contain_text("Domanda 11")
        s.page.click("#history-more")
        expect(entries).to_have_count(12)
        expect(entries.last).to_contain_text("Domanda 0")
        expect(s.page.locator("#history-more")).to_be_hidden()
    script.assert_used()

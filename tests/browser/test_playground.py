"""The playground in a real Chromium, against a real server on loopback (the dev issuer, the
offline, a scripted or a fake HTTP model; nothing outside 127.0.0.1). Screenshots of the main
states go to tests/browser/.output/<test>/."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from aircoach.knowledge.library import course_bank
from aircoach.models import MessageRequest
from aircoach.settings import Settings
from aircoach.turn.answer import FALLBACK_ANSWER
from tests.browser.conftest import WAIT_MS
from tests.helpers import app_with, served
from tests.llm.fakes import HANG_LIMIT_S, FakeModelServer, Reply, gemini_error, gemini_text
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.tools.fake_service import FakeToolService
from tests.tools.fake_service import Reply as ToolReply

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# axe-core, vendored as npm ships it (docs/playground.md names the version).
AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"


def _key(capitolo: int, numero: int) -> str:
    """The right letter of a question of the shipped bank (the page never sees it)."""
    questions, _ = course_bank()
    return next(
        q["corretta"] for q in questions if (q["capitolo"], q["numero"]) == (capitolo, numero)
    )


def _background(locator: Any) -> str:
    return locator.evaluate("(node) => getComputedStyle(node).backgroundColor")


def _tools(origin: str, token: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{origin}/api/tools", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_page_loads_clean_signs_in_to_a_welcome_screen_and_a_closed_settings_drawer(
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
        s.screens("01-sign-in")

        s.dev_sign_in("Giulia")
        page = s.page
        expect(page.locator("#who-name")).to_have_text("Utente: dev|Giulia")
        welcome = page.locator("#welcome")
        expect(welcome).to_be_visible()
        expect(welcome).to_contain_text("manuale del corso")
        expect(welcome.locator("button.suggestion")).to_have_count(3)
        for label in (
            "Domanda del capitolo…",
            "Ripasso",
            "Simulazione d'esame",
            "I miei progressi",
        ):
            expect(welcome.get_by_role("button", name=label, exact=True)).to_be_visible()
        # The drawer is not rendered while closed: no tool switch on the main screen.
        drawer = page.locator("#settings")
        assert drawer.get_attribute("hidden") is not None
        expect(page.locator("#toolbar input").first).to_be_hidden()
        expect(page.locator("#tech")).to_be_hidden()
        s.shot("02-welcome")
        s.screens("02-welcome")

        s.open_settings()
        expect(page.locator("#nav-settings")).to_have_attribute("aria-expanded", "true")
        tools = _tools(origin, token())
        switches = page.locator("#toolbar input")
        expect(switches).to_have_count(len(tools))
        for tool in tools:
            switch = page.locator(f'#toolbar input[data-tool="{tool["name"]}"]')
            label = page.locator("#toolbar label").filter(
                has=page.locator(f'input[data-tool="{tool["name"]}"]')
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
        s.shot("03-settings")
        s.screens("03-settings")
        page.click("#settings-close")
        assert drawer.get_attribute("hidden") is not None
        expect(page.locator("#nav-settings")).to_be_focused()
        expect(page.locator("#progress")).to_contain_text("Risposte: 0")
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
        s.answered(turn)
        s.open_settings()
        s.page.uncheck('#toolbar input[data-tool="domanda_teoria"]')
        s.page.keyboard.press("Escape")
        expect(s.page.locator("#settings")).to_be_hidden()
        turn = s.ask("Ancora")
        expect(turn.locator(".answer")).to_have_text("Seconda risposta.")
    script.assert_used()
    assert [b["tools"]["domanda_teoria"] for b in bodies] == [True, False]
    assert [b["query"] for b in bodies] == ["Ciao", "Ancora"]
    assert bodies[1]["tools"]["verifica_risposta"] is True
    # The unavailable tools are sent off, as the server would take them anyway.
    assert bodies[1]["tools"]["web_search"] is False


def test_a_quiz_answered_wrong_is_red_with_one_result_and_a_next_question(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("pilota")
        page = s.page
        turn = s.answered(s.ask("Dammi una domanda del capitolo 3"))
        card = turn.locator("article.quiz")
        expect(card).to_have_count(1)
        expect(card).to_have_attribute("data-question", re.compile(r"^3-\d+$"))
        expect(turn.locator(".turn-footer")).not_to_contain_text("Modello")
        options = card.locator("button.option")
        assert options.count() >= 2
        s.shot("03-quiz-card")
        s.screens("04-quiz-card")

        chapter, number = card.get_attribute("data-question").split("-")
        right = _key(int(chapter), int(number))
        wrong = next(o for o in options.all() if o.get_attribute("data-letter") != right)
        wrong_letter = wrong.get_attribute("data-letter")
        wrong.click()
        result = card.locator(".grading .result")
        expect(result).to_be_visible()
        expect(result).to_have_attribute("data-corretta", "false")
        expect(result).to_contain_text(f"la risposta corretta è {right}")
        expect(card.locator("button.option.wrong")).to_have_attribute("data-letter", wrong_letter)
        expect(card.locator("button.option.correct")).to_have_attribute("data-letter", right)
        assert _background(card.locator("button.option.wrong")) == "rgb(253, 236, 235)"  # red
        assert _background(card.locator("button.option.correct")) == "rgb(227, 244, 232)"  # green
        expect(card.locator(".explanation")).not_to_be_empty()
        expect(card.locator(".manual-link")).to_be_visible()
        # The result once: in the card; the coach's own words on it folded away.
        expect(page.locator(".result")).to_have_count(1)
        expect(page.locator(".grading-card")).to_have_count(0)
        answer_turn = page.locator("#turns > li").nth(1)
        s.answered(answer_turn)
        expect(answer_turn.locator(".human")).to_have_text(f"la {wrong_letter}")
        expect(answer_turn.locator("details.coach-comment")).not_to_have_attribute("open", "")
        expect(answer_turn.locator(".answer")).to_be_hidden()
        expect(page.locator("#tech-context")).to_have_text("1")
        s.shot("04-quiz-graded")
        s.screens("05-quiz-answered-wrong")

        card.locator(".manual-link").click()
        panel = page.locator("#manual-panel")
        expect(panel).to_be_visible()
        expect(panel.locator("#manual-title")).to_have_text(
            re.compile(rf"^§ {chapter}\.\d+ "), timeout=WAIT_MS
        )
        page.click("#manual-close")
        expect(panel).to_be_hidden()

        question = card.locator(".question").text_content()
        card.get_by_role("button", name="Perché?").click()
        why = s.answered(page.locator("#turns > li").nth(2))
        expect(why.locator(".human")).to_have_text(
            re.compile(rf"^Spiegami perché: {re.escape(question)} \S")
        )
        expect(why.locator(".answer")).not_to_be_empty()

        card.get_by_role("button", name="Prossima domanda").click()
        next_turn = s.answered(page.locator("#turns > li").nth(3))
        expect(next_turn.locator(".human")).to_have_text(
            f"Dammi un'altra domanda del capitolo {chapter}"
        )
        expect(next_turn.locator("article.quiz")).to_have_attribute(
            "data-question", re.compile(rf"^{chapter}-\d+$")
        )
        next_turn.locator("button.skip-question").click()
        expect(next_turn.locator("article.quiz")).to_contain_text("Domanda saltata")
        s.answered(page.locator("#turns > li").nth(4))

        page.click("#nav-progress")
        bar = page.locator(f'#progress li[data-capitolo="{chapter}"]')
        expect(bar).to_have_attribute("data-risposte", "1")
        expect(bar).to_have_attribute("data-corrette", "0")
        expect(bar.locator(".count")).to_have_text("0/1")
        entries = page.locator("#history > li")
        expect(entries).to_have_count(5)
        answered = entries.nth(3)  # newest first: skip, next question, why, the answer, ...
        expect(answered.locator(".human")).to_have_text(f"la {wrong_letter}")
        expect(answered.locator(".first-line")).not_to_contain_text("[modello offline]")
        expect(answered.locator(".first-line")).to_contain_text("SBAGLIATA")
        # A question's turn, whose answer is the card: its question (it showed nothing).
        for asked in (entries.nth(1), entries.nth(4)):
            expect(asked.locator(".first-line")).to_contain_text(
                re.compile(rf"^Capitolo {chapter}, domanda \d+: \S")
            )
    assert s.console_errors == []


def test_a_slow_panel_refresh_never_holds_the_next_message(settings, session_for):
    """After `done` the page refreshes its panels in the background: with the progress request
    held, the chat takes the next message at once, and an option clicked on the quiz card is
    sent (before, the page stayed busy until the panels had loaded, and a click on "Nuova
    chat" meanwhile was lost); the grading's own progress fills the progress panel."""
    held: list[Any] = []
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("svelto")
        s.page.route(f"{origin}/api/progress", lambda route: held.append(route))
        turn = s.answered(s.ask("Dammi una domanda del capitolo 3"))
        card = turn.locator("article.quiz")
        expect(s.page.locator("#send")).to_be_enabled()  # free, though progress is held
        expect(s.page.locator("#new-chat")).to_be_enabled()
        card.locator("button.option").first.click()
        expect(card.locator(".grading .result")).to_be_visible()
        expect(s.page.locator("#turns > li").nth(1).locator(".human")).to_have_text("la a")
        # The grading's own progress (`progresso`) fills the panel, its request still held.
        expect(s.page.locator("#progress")).to_contain_text("Risposte: 1")
        s.shot("13-choice-kept-while-settling")
        assert held  # the refresh was still waiting all along

        for route in held:
            route.continue_()
        s.page.unroute(f"{origin}/api/progress")
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


def _on_fake_gemini(data_dir: Path, url: str) -> Settings:
    """Settings whose model is the fake Gemini server at `url`, with no retries."""
    return Settings(
        _env_file=None,
        data_dir=data_dir,
        google_api_key="fake-key",
        model_base_url=url,
        model_max_retries=0,
        tool_env={},
    )


def test_a_slow_models_answer_renders_progressively_before_done(data_dir, session_for):
    model = SteppedModelServer(gates=[threading.Event() for _ in range(2)])
    model.script(gemini_text("Il vento ", "in coda ", "allunga la corsa."))
    model.start()
    try:
        settings = _on_fake_gemini(data_dir, model.url)
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
            expect(footer).to_have_text(re.compile(r"^\d+,\d s$"))
            expect(s.page.locator("#tech-model")).to_have_text("gemini-2.5-flash")
            expect(s.page.locator("#tech-request")).to_have_text(re.compile(r"^[0-9a-f]{32}$"))
            s.shot("06-streamed-done")
    finally:
        model.stop()
    model.assert_used()


def test_a_paste_longer_than_a_message_is_cut_and_the_page_says_so(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        box, note = s.page.locator("#query"), s.page.locator("#query-note")
        limit = int(box.get_attribute("maxlength") or 0)
        metadata = MessageRequest.model_fields["query"].metadata
        assert limit == next(m.max_length for m in metadata if hasattr(m, "max_length"))
        expect(note).to_be_hidden()
        s.page.evaluate(
            """([text]) => {
                const data = new DataTransfer();
                data.setData("text/plain", text);
                const box = document.querySelector("#query");
                box.focus();
                box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data}));
            }""",
            ["x" * (limit + 1000)],
        )
        expect(note).to_be_visible()
        expect(note).to_contain_text(f"è stato tagliato: un messaggio può avere al massimo {limit}")
        box.fill("Cos'è lo stallo?")
        expect(note).to_be_hidden()


def test_a_dev_name_the_api_refuses_is_named_as_the_page_labels_it(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.page.fill("#dev-name", "a/b")
        s.page.click("#dev-signin")
        notice = s.page.locator("#notices .notice-error")
        expect(notice).to_contain_text("Nome dell'utente di prova non valido")
        expect(notice).not_to_contain_text("'name'")
        expect(s.page.locator("#signin")).to_be_visible()


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
            s.answered(turn)
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
            s.answered(failing)
            s.shot("08-sources-and-error")

            s.open_settings()
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
        s.answered(turn)
        expect(s.page.locator("#tech-model")).to_have_text("scripted")
        # The verdict's `sentence` offsets mark the sentence that cites it (before, the page
        # read `start`/`end`, which the server never sends, and marked nothing).
        mark = turn.locator(".answer mark.doubted")
        expect(mark).to_have_count(1)
        expect(mark).to_have_text("Lo stabilisce il Reg. (UE) n. 999/2099, art. 7.")
        s.shot("12-grounding-warning")
    script.assert_used()


@pytest.mark.parametrize("width", [320, 360])
def test_a_phone_width_screen_has_no_horizontal_scroll(settings, session_for, width):
    with served(app_with(settings)) as origin:
        s = session_for(origin, width=width, height=740)
        s.open()
        s.dev_sign_in()
        page = s.page

        def fits() -> None:
            widths = page.evaluate(
                "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert widths[0] <= widths[1] == width, widths

        def small_targets() -> list[Any]:
            """The visible buttons, switch rows, disclosures ("Commento del coach") and
            stand-alone links under 44 px high or wide."""
            return page.evaluate(
                """() => [...document.querySelectorAll(
                        'button, label.tool, label.check, label.exam-option, summary, ' +
                        'a.manual-link, .source > a')]
                    .filter((b) => b.offsetParent !== null)
                    .map((b) => [b.textContent.trim().slice(0, 30),
                                 b.getBoundingClientRect().width, b.getBoundingClientRect().height])
                    .filter(([, w, h]) => w < 44 || h < 44)"""
            )

        fits()
        assert small_targets() == []
        turn = s.answered(s.ask("Dammi una domanda del capitolo 7"))
        expect(turn.locator("article.quiz")).to_have_count(1)
        turn.locator("button.option").first.click()
        expect(turn.locator(".manual-link")).to_be_visible()
        s.answered(page.locator("#turns > li").nth(1))
        s.answered(s.ask("Che cosa provoca lo stallo di un'ala?"))
        expect(page.locator("article.source")).not_to_have_count(0)
        fits()
        assert small_targets() == []
        page.click("#nav-progress")
        expect(page.locator("#progress .chapter")).to_have_count(10)
        expect(page.locator("#history > li")).to_have_count(3)
        fits()
        s.open_settings()
        fits()
        assert small_targets() == []
        s.shot(f"10-phone-{width}")
        page.keyboard.press("Escape")
        # The exam (its questions, then its result) and the review view fit too.
        page.click("#nav-exam")
        page.click("#exam-new")
        expect(page.locator("#exam-questions fieldset")).not_to_have_count(0)
        fits()
        assert small_targets() == []
        page.click("#exam-submit")
        expect(page.locator(".exam-outcome")).not_to_have_count(0)
        fits()
        assert small_targets() == []
        page.click("#nav-review")
        expect(page.locator("#review-cards .review-card")).not_to_have_count(0)
        fits()
        assert small_targets() == []
    assert s.console_errors == []


def test_on_a_phone_a_long_section_title_leaves_the_close_button_whole(settings, session_for):
    """At 320 px "§ 7.13 Il volo da diporto o sportivo (VDS)" squeezed the panel's button to
    "Chi/udi" (the page breaks long words anywhere)."""
    with served(app_with(settings)) as origin:
        s = session_for(origin, width=320, height=740, phone=2)
        s.open()
        s.dev_sign_in()
        page = s.page
        s.answered(s.ask("cosa sono gli ultraleggeri VDS?"))
        page.locator('a.citation[data-ref="7.13"]').first.click()
        expect(page.locator("#manual-title")).to_have_text(re.compile(r"^§ 7\.13 .{30,}"))
        lines = page.evaluate(
            """() => [...document.querySelectorAll('button')]
                .filter((b) => b.offsetParent !== null && !/\\s/.test(b.textContent.trim()))
                .map((b) => {
                    const range = document.createRange();
                    range.selectNodeContents(b);
                    const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
                    return [b.textContent.trim(), tops.size];
                })
                .filter(([, n]) => n > 1)"""
        )
        assert lines == []
    assert s.console_errors == []


def _above_the_composer(page: Any, locator: Any) -> list[float]:
    """`[top, bottom, composer top]` of `locator` on screen: in view when `top >= 0` and
    `bottom <= composer top` (the sticky message box covers what is below it)."""
    box = locator.bounding_box()
    composer = page.locator("#composer").bounding_box()
    return [box["y"], box["y"] + box["height"], composer["y"]]


def _in_view(place: list[float]) -> bool:
    top, bottom, composer_top = place
    return top >= 0 and bottom <= composer_top + 0.5


@pytest.mark.parametrize(("width", "height", "scale"), [(360, 640, 3), (390, 844, 2)])
def test_on_a_phone_each_new_turn_and_a_grading_show_above_the_message_box(
    settings, session_for, width, height, scale
):
    """On a phone the sticky message box covers the bottom of the screen: a new turn came in
    under it (scrolled to its end while still empty, then not followed as it grew), and a
    grading's "Prossima domanda" was scrolled to the screen's bottom edge, under the box."""
    with served(app_with(settings)) as origin:
        s = session_for(origin, width=width, height=height, phone=scale)
        s.open()
        s.dev_sign_in()
        page = s.page
        s.answered(s.ask("Cos'è il QNH e come si imposta l'altimetro?"))
        s.answered(s.ask("Che cosa provoca lo stallo di un'ala?"))
        quiz = s.answered(s.ask("Dammi una domanda del capitolo 7"))
        first = quiz.locator("button.option").first
        assert _in_view(_above_the_composer(page, quiz.locator(".human"))), "question"
        assert _in_view(_above_the_composer(page, first)), "first option"
        assert _in_view(_above_the_composer(page, quiz.locator(".skip-question"))), "Salta"
        s.shot(f"phone-{width}-new-turn")
        first.click()
        s.answered(page.locator("#turns > li").nth(3))
        next_question = quiz.locator("button.next-question")
        assert _in_view(_above_the_composer(page, next_question)), "Prossima domanda"
        s.shot(f"phone-{width}-graded")
        theory = s.answered(s.ask("Che cosa provoca lo stallo di un'ala?"))
        assert _in_view(_above_the_composer(page, theory.locator(".human"))), "theory question"
        assert _in_view(_above_the_composer(page, theory.locator(".answer p").first)), "answer"
    assert s.console_errors == []


def test_sign_in_a_quiz_a_citation_and_the_settings_work_with_the_keyboard_alone(
    settings, session_for
):
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
        s.answered(page.locator("#turns > li").first)
        page.focus("#query")
        page.keyboard.press("Shift+Tab")  # back from the message box: the card's "Salta"
        expect(page.locator(".skip-question")).to_be_focused()
        page.keyboard.press("Shift+Tab")  # and its last option
        focused = page.locator(".option:focus")
        expect(focused).to_have_count(1)
        letter = focused.get_attribute("data-letter")
        page.keyboard.press("Enter")
        expect(card.locator(".grading .result")).to_be_visible()
        expect(page.locator("#turns > li .human").nth(1)).to_have_text(f"la {letter}")
        s.answered(page.locator("#turns > li").nth(1))

        # The manual link of the result, then back with Escape to where the reader was.
        link = card.locator(".manual-link")
        link.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#manual-panel")).to_be_visible()
        expect(page.locator("#manual-title")).to_be_focused()
        page.keyboard.press("Escape")
        expect(page.locator("#manual-panel")).to_be_hidden()
        expect(link).to_be_focused()

        page.focus("#nav-settings")
        page.keyboard.press("Enter")
        expect(page.locator("#settings-title")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.locator("#settings-close")).to_be_focused()
        page.keyboard.press("Tab")
        switch = page.locator("#toolbar input").first
        expect(switch).to_be_focused()
        was = switch.is_checked()
        page.keyboard.press("Space")
        assert switch.is_checked() is not was
        s.shot("11-keyboard")
        page.keyboard.press("Escape")
        expect(page.locator("#settings")).to_be_hidden()
        expect(page.locator("#nav-settings")).to_be_focused()
    assert s.console_errors == []


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
        s.page.click("#nav-progress")
        entries = s.page.locator("#history > li")
        expect(entries).to_have_count(10)
        expect(entries.first).to_contain_text("Domanda 11")
        s.page.click("#history-more")
        expect(entries).to_have_count(12)
        expect(entries.last).to_contain_text("Domanda 0")
        expect(s.page.locator("#history-more")).to_be_hidden()
    script.assert_used()


def test_the_default_conversation_shows_its_own_last_turns_and_pages_to_older_ones(
    settings, session_for, token
):
    """21 turns in the default conversation, then one in another: "Chat principale" shows
    the default conversation's last 20 (`conversation_id=default`), and "Messaggi precedenti
    di questa chat" the one before them, then goes (before, the page fetched every
    conversation's last 20 turns and kept the default one's: 19 here, none after 20 turns
    elsewhere, and no way to older ones)."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|lungo')}"}
        bodies = [{"query": f"Domanda {i}"} for i in range(21)]
        bodies.append({"query": "Altrove", "conversation_id": "altra"})
        for body in bodies:
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={**body, "stream": False},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        s = session_for(origin)
        s.open()
        s.dev_sign_in("lungo")
        page = s.page
        asked: list[str] = []
        page.on("request", lambda r: "/api/history?" in r.url and asked.append(r.url))
        page.click('#conversations button[data-conversation="altra"]')
        expect(page.locator("#turns .human")).to_have_text(["Altrove"])
        older = page.locator("#turns-older")
        expect(older).to_be_hidden()

        page.click('#conversations button[data-conversation=""]')
        humans = page.locator("#turns .human")
        expect(humans).to_have_text([f"Domanda {i}" for i in range(1, 21)])
        expect(page.locator("#welcome")).to_be_hidden()
        assert any("conversation_id=default" in url for url in asked), asked
        s.shot("default-conversation")

        expect(older).to_have_text("Messaggi precedenti di questa chat")
        older.click()
        expect(humans).to_have_text([f"Domanda {i}" for i in range(21)])
        expect(older).to_be_hidden()
        expect(humans.first).to_be_in_viewport()
        # A new message goes after the stored turns.
        s.answered(s.ask("Domanda nuova"))
        expect(humans.last).to_have_text("Domanda nuova")
        expect(humans).to_have_count(22)
    assert s.console_errors == []


def test_sign_in_shows_the_default_conversations_last_turns_and_keeps_a_message_sent_meanwhile(
    settings, session_for, token
):
    """A student who comes back sees where they left off: at sign-in the chat shows the
    default conversation's last 20 turns with "Messaggi precedenti di questa chat" (before,
    it started empty until "Chat principale" was clicked). A message sent while those turns
    are on their way stays after them, once, though the page that arrives holds it too."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|ritorno')}"}
        for i in range(21):
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": f"Domanda {i}", "stream": False},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        s = session_for(origin)
        s.open()
        page = s.page
        held: list[Any] = []
        # A pattern, not a function: Playwright cannot send a function to the browser, so the
        # page would then intercept every request, and its unroute() below would hand on the
        # requests the context's guard was still handling (the turn's panel refresh): the
        # guard's continue_() then failed with "Route is already handled!" on a busy machine.
        default_turns = re.compile(r"/api/history\?(.*&)?conversation_id=default(&|$)")
        page.route(default_turns, lambda route: held.append(route))
        with page.expect_request(default_turns, timeout=WAIT_MS):
            s.dev_sign_in("ritorno")
        s.answered(s.ask("Domanda nuova"))
        assert len(held) == 1, [route.request.url for route in held]  # sent once, still held
        held[0].continue_()
        page.unroute(default_turns)
        humans = page.locator("#turns .human")
        # The page of 20 holds the new turn: the 19 before it are added before it, not it again.
        expect(humans).to_have_text([f"Domanda {i}" for i in range(2, 21)] + ["Domanda nuova"])
        expect(page.locator("#turns > li").last).not_to_have_class(re.compile(r"\bturn-stored\b"))
        expect(page.locator("#welcome")).to_be_hidden()
        expect(page.locator('#conversations button[data-conversation=""]')).to_have_attribute(
            "aria-current", "true"
        )
        older = page.locator("#turns-older")
        expect(older).to_have_text("Messaggi precedenti di questa chat")
        older.click()
        expect(humans).to_have_text([f"Domanda {i}" for i in range(21)] + ["Domanda nuova"])
        expect(older).to_be_hidden()
    assert s.console_errors == []


def _at_the_newest(page: Any) -> bool:
    """The newest turn shows above the message box; one taller than that space, from its
    start at the top of the screen (within a pixel: at a phone's device scale of 3 a scroll
    lands on a third of a CSS pixel, and the top read -0.14 for a tall quiz question)."""
    top, bottom, composer_top = place = _above_the_composer(page, page.locator("#turns > li").last)
    return _in_view(place) if bottom - top <= composer_top else -1 < top < 1


@pytest.mark.parametrize("phone", [None, 3], ids=["desktop", "phone"])
def test_sign_in_and_a_switch_of_chat_open_at_the_newest_turn(settings, session_for, token, phone):
    """A student coming back reads where they left off: after sign-in, and after a switch of
    chat, the page shows the newest turn above the message box (before, it opened at the top
    of the loaded turns: 20 old turns to scroll past). "Messaggi precedenti di questa chat"
    still keeps the reader's place: it shows the oldest turn it added, not the newest."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|ritorno')}"}
        bodies = [{"query": f"Domanda {i}"} for i in range(22)]
        bodies += [{"query": f"Altrove {i}", "conversation_id": "altra"} for i in range(6)]
        for body in bodies:
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={**body, "stream": False},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        size = {"width": 360, "height": 640, "phone": phone} if phone else {}
        s = session_for(origin, **size)
        s.open()
        s.dev_sign_in("ritorno")
        page = s.page
        humans = page.locator("#turns .human")
        expect(humans).to_have_count(20)
        expect(humans.last).to_have_text("Domanda 21")
        expect(page.locator("#query")).to_be_focused()  # the sign-in's last step
        assert _at_the_newest(page), _above_the_composer(page, page.locator("#turns > li").last)
        assert not _in_view(_above_the_composer(page, humans.first))
        s.shot("opened-at-newest")

        page.click('#conversations button[data-conversation="altra"]')
        expect(humans).to_have_text([f"Altrove {i}" for i in range(6)])
        assert _at_the_newest(page), _above_the_composer(page, page.locator("#turns > li").last)

        page.click('#conversations button[data-conversation=""]')
        expect(humans.last).to_have_text("Domanda 21")
        expect(humans).to_have_count(20)
        assert _at_the_newest(page), _above_the_composer(page, page.locator("#turns > li").last)

        page.locator("#turns-older").click()
        expect(humans).to_have_count(22)
        expect(page.locator("#turns > li").first).to_be_focused()
        # The oldest turn added shows from its start, not the newest.
        assert _in_view(_above_the_composer(page, humans.first))
        assert not _in_view(_above_the_composer(page, humans.last))
    assert s.console_errors == []


def test_stored_quiz_source_and_exam_turns_show_as_the_live_ones(settings, session_for, token):
    """A conversation's stored turns show their tool results as the live turn did (before,
    a question's turn, stored with an empty answer, showed the student's message alone): the
    first question closed with its grading in the card (the wrong choice red, the key green)
    and the coach's words folded; the manual search's source cards; the newest turn's
    question still open, answered here and graded in its card; a chat exam's questions."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|ritorna')}"}

        def turn(query: str, conversation: str) -> dict[str, Any]:
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": query, "stream": False, "conversation_id": conversation},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
            return response.json()

        first = turn("Dammi una domanda del capitolo 3", "ripasso")["tool"]["data"]["question"]
        right = _key(first["capitolo"], first["numero"])
        wrong = next(letter for letter in first["risposte"] if letter != right)
        turn(f"la {wrong}", "ripasso")
        turn("Cosa dice il manuale sullo stallo?", "ripasso")
        second = turn("Dammi un'altra domanda del capitolo 3", "ripasso")["tool"]["data"]
        second = second["question"]
        exam = turn("simulazione d'esame con 5 domande", "esame")["tool"]["data"]["esame"]

        s = session_for(origin)
        s.open()
        s.dev_sign_in("ritorna")
        page = s.page
        page.click('#conversations button[data-conversation="ripasso"]')
        turns = page.locator("#turns > li")
        expect(turns).to_have_count(4)
        card = turns.nth(0).locator("article.quiz")
        expect(card).to_have_attribute("data-question", f"3-{first['numero']}")
        expect(card.locator(".question")).to_have_text(first["testo"])
        expect(card.locator("button.option")).to_have_count(len(first["risposte"]))
        for option in card.locator("button.option").all():
            expect(option).to_be_disabled()
        expect(card.locator(".skip-question")).to_have_count(0)
        expect(card.locator(".result")).to_have_attribute("data-corretta", "false")
        expect(card.locator("button.option.wrong")).to_have_attribute("data-letter", wrong)
        expect(card.locator("button.option.correct")).to_have_attribute("data-letter", right)
        expect(turns.nth(1).locator("details.coach-comment")).to_have_count(1)
        expect(turns.nth(1).locator(".grading-card")).to_have_count(0)
        expect(turns.nth(2).locator(".turn-sources .source").first).to_contain_text("§ 1.4")

        newest = turns.nth(3).locator("article.quiz")
        expect(newest).to_have_attribute("data-question", f"3-{second['numero']}")
        expect(newest.locator(".skip-question")).to_be_enabled()
        s.shot("stored-quiz")
        key = _key(second["capitolo"], second["numero"])
        newest.locator(f'button.option[data-letter="{key}"]').click()
        expect(newest.locator(".result")).to_have_attribute("data-corretta", "true")
        s.answered(turns.nth(4))

        page.click('#conversations button[data-conversation="esame"]')
        card = page.locator("#turns > li article.chat-exam")
        expect(card).to_contain_text("Simulazione d'esame · 5 domande")
        expect(card.locator(".chat-exam-questions > li")).to_have_count(5)
        expect(card.locator(".question").first).to_have_text(exam["domande"][0]["testo"])
        s.shot("stored-exam")
    assert s.console_errors == []


def test_older_turns_show_in_their_question_card_the_grading_a_newer_turn_holds(
    settings, session_for, token
):
    """A question asked, answered wrong in the next turn, then 19 more turns: the chat's last
    20 turns begin with the grading, whose question is on the page before. Until that page
    comes the grading is a card of its own; once "Messaggi precedenti di questa chat" adds it,
    the question's card shows the grading (the wrong choice red, the key green, the result)
    and the grading's turn folds the coach's words under "Commento del coach", as when both
    turns come on one page (before, the older card stayed uncoloured, as if unanswered)."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|pagine')}"}

        def turn(query: str) -> dict[str, Any]:
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": query, "stream": False},
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
            return response.json()

        question = turn("Dammi una domanda del capitolo 3")["tool"]["data"]["question"]
        right = _key(question["capitolo"], question["numero"])
        wrong = next(letter for letter in question["risposte"] if letter != right)
        assert turn(f"la {wrong}")["tool"]["tool_name"] == "verifica_risposta"
        for i in range(19):
            turn(f"Domanda {i}")

        s = session_for(origin)
        s.open()
        s.dev_sign_in("pagine")
        page = s.page
        turns = page.locator("#turns > li")
        expect(turns).to_have_count(20)
        expect(turns.first.locator(".human")).to_have_text(f"la {wrong}")
        graded = page.locator(f'#turns > li[data-turn="{turns.first.get_attribute("data-turn")}"]')
        expect(graded.locator(".grading-card .result")).to_have_attribute("data-corretta", "false")

        page.locator("#turns-older").click()
        expect(turns).to_have_count(21)
        card = turns.first.locator("article.quiz")
        expect(card).to_have_attribute("data-question", f"3-{question['numero']}")
        expect(card.locator(".result")).to_have_attribute("data-corretta", "false")
        expect(card.locator("button.option.wrong")).to_have_attribute("data-letter", wrong)
        expect(card.locator("button.option.correct")).to_have_attribute("data-letter", right)
        for option in card.locator("button.option").all():
            expect(option).to_be_disabled()
        expect(card.locator(".skip-question")).to_have_count(0)
        expect(graded.locator(".grading-card")).to_have_count(0)
        expect(graded.locator("details.coach-comment")).to_have_count(1)
        expect(turns.first).to_be_focused()
        s.shot("older-card-graded")
    assert s.console_errors == []


def _stopped(
    origin: str, headers: dict[str, str], query: str, *, asked: threading.Event | None = None
) -> None:
    """A streamed turn cancelled (`POST /api/turns/{id}/cancel`) after its first words, or,
    with `asked`, once that is set (the model was asked and has said nothing): stored
    `interrupted`."""
    with httpx.stream(
        "POST",
        f"{origin}/api/stream_query",
        json={"query": query},
        headers={**headers, "Accept": "text/event-stream"},
        timeout=30,
    ) as response:
        assert response.status_code == 200, response.read()
        turn_id = response.headers["X-Turn-ID"]
        lines = response.iter_lines()
        if asked is None:
            next(line for line in lines if '"agent_message"' in line)
        else:
            assert asked.wait(WAIT_MS / 1000), "the model was never asked"
        cancel = httpx.post(f"{origin}/api/turns/{turn_id}/cancel", headers=headers, timeout=30)
        assert cancel.status_code == 202, cancel.text
        events = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert events[-1] == {**events[-1], "type": "done", "status": "cancelled"}, events


MODEL_ERROR_MARK = (
    "Risposta non completata: il modello linguistico non ha risposto. Invia di nuovo la domanda."
)
INTERRUPTED_MARK = "Risposta interrotta prima della fine: invia di nuovo la domanda."


def test_stored_turns_that_failed_or_were_interrupted_say_so_as_the_live_ones(
    data_dir, session_for
):
    """A student coming back sees which stored answers were cut short: a turn the model
    failed (stored `error`, the fallback answer) and two turns stopped, one after its first
    words, one before any (stored `interrupted`), each carry a small Italian mark; a turn that
    ended `ok` none (before, the first read as a normal answer and the last was an empty
    bubble). The failed one says why, from its stored `error_code` (it said only "an
    error"). A live turn that ends `interrupted` carries the same mark. On a phone (360 px)
    the marks are small and fit. In "I miei progressi" the turn stopped before any word shows
    its mark, not an empty line."""
    model = FakeModelServer().script(
        gemini_error(500),
        gemini_text("Il vento in coda ", "allunga la corsa.", hang_after=1),
        Reply(hang_before=True),
        gemini_text("Il vento contrario accorcia la corsa."),
    )
    model.start()
    try:
        settings = _on_fake_gemini(data_dir, model.url)
        with served(app_with(settings)) as origin:
            minted = httpx.post(f"{origin}/api/dev/token", json={"name": "ritorno"}, timeout=30)
            assert minted.status_code == 200, minted.text
            headers = {"Authorization": f"Bearer {minted.json()['access_token']}"}
            failed = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": "Perché il motore perde giri?", "stream": False},
                headers=headers,
                timeout=30,
            )
            assert failed.status_code == 200, failed.text
            _stopped(origin, headers, "Che effetto ha il vento in coda?")
            model.hanging.clear()
            _stopped(origin, headers, "E il vento al traverso?", asked=model.hanging)
            done = httpx.post(
                f"{origin}/api/stream_query",
                json={"query": "E il vento contrario?", "stream": False},
                headers=headers,
                timeout=30,
            )
            assert done.status_code == 200, done.text
            # What the page has to go on: the stored status, and the answer kept.
            stored = httpx.get(f"{origin}/api/history", headers=headers, timeout=30).json()
            assert [(t["status"], t["error_code"], t["system"]) for t in stored["turns"]] == [
                ("ok", None, "Il vento contrario accorcia la corsa."),
                ("interrupted", None, ""),
                ("interrupted", None, "Il vento in coda "),
                ("error", "model_unavailable", FALLBACK_ANSWER),
            ]

            s = session_for(origin, width=360, height=640, phone=3)
            s.open()
            s.dev_sign_in("ritorno")
            page = s.page
            turns = page.locator("#turns > li")
            expect(turns).to_have_count(4)
            marks = page.locator("#turns .turn-outcome")
            expect(marks).to_have_count(3)
            expect(turns.nth(0).locator(".turn-outcome.notice-error")).to_have_text(
                MODEL_ERROR_MARK
            )
            expect(turns.nth(0).locator(".answer")).to_have_text(FALLBACK_ANSWER)
            for n in (1, 2):
                expect(turns.nth(n).locator(".turn-outcome.notice-warning")).to_have_text(
                    INTERRUPTED_MARK
                )
            expect(turns.nth(1).locator(".answer")).to_have_text("Il vento in coda")
            expect(turns.nth(3).locator(".turn-outcome")).to_have_count(0)
            # Small and readable on a phone: the small text size, within the screen.
            for mark in marks.all():
                assert mark.evaluate("(n) => getComputedStyle(n).fontSize") == "14px"
                box = mark.bounding_box()
                assert box["x"] >= 0 and box["x"] + box["width"] <= 360, box
            widths = page.evaluate(
                "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert widths[0] <= widths[1] == 360, widths
            s.shot("stored-failed-and-interrupted")

            page.click("#nav-progress")
            history = page.locator("#history > li")
            expect(history).to_have_count(4)
            expect(history.nth(1).locator(".first-line")).to_have_count(0)
            expect(history.nth(1).locator(".turn-outcome.notice-warning")).to_have_text(
                INTERRUPTED_MARK
            )
            for n in (0, 2, 3):
                expect(history.nth(n).locator(".first-line")).not_to_be_empty()
            expect(page.locator("#history .first-line:empty")).to_have_count(0)
            page.click("#nav-chat")

            # The live turn stopped before its end (by a newer message elsewhere, a cancel).
            interrupted = _canned(
                {"type": "agent_message", "content": "Il vento al traverso"},
                {"type": "done", "status": "cancelled", "model": "finto", "prompt_version": "a"},
            )
            page.route(
                f"{origin}/api/stream_query",
                lambda route: route.fulfill(
                    status=200, content_type="text/event-stream", body=interrupted
                ),
            )
            live = s.answered(s.ask("E al traverso?"))
            expect(live.locator(".turn-outcome.notice-warning")).to_have_text(INTERRUPTED_MARK)
            expect(turns.nth(3).locator(".turn-outcome")).to_have_count(0)
    finally:
        model.stop()
    model.assert_used()
    assert s.console_errors == []


def test_a_chat_exam_of_another_size_than_asked_says_so_on_its_card(settings, session_for):
    """A mock exam asked in the chat for 100 questions has 60, for 3 has 5: its result's
    `nota` (the student's sentence; the shipped tools end the turn with the exam, so the model
    never says it) shows on the card, live and stored (before, the card said only its size)."""
    notes = {
        "simulazione d'esame con 100 domande": (
            60,
            "Hai chiesto 100 domande, ma una simulazione ne ha al massimo 60.",
        ),
        "simulazione d'esame con 3 domande": (
            5,
            "Hai chiesto 3 domande, ma una simulazione ne ha almeno 5.",
        ),
    }
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("misura")
        page = s.page
        for query, (size, note) in notes.items():
            card = s.answered(s.ask(query)).locator("article.chat-exam")
            expect(card.locator(".chat-exam-questions > li")).to_have_count(size)
            expect(card.locator(".chat-exam-note")).to_have_text(note)
        s.shot("chat-exam-note")
        page.click('#conversations button[data-conversation=""]')
        stored = page.locator("#turns > li.turn-stored article.chat-exam .chat-exam-note")
        expect(stored).to_have_text([note for _, note in notes.values()])
        # An exam of the size asked has no note.
        card = s.answered(s.ask("simulazione d'esame con 5 domande")).locator("article.chat-exam")
        expect(card.locator(".chat-exam-questions > li")).to_have_count(5)
        expect(card.locator(".chat-exam-note")).to_have_count(0)
    assert s.console_errors == []


MARKDOWN_ANSWER = """Il **QNH** è la pressione riportata al livello del mare.

- con il QNH l'altimetro indica l'*altitudine*;
- con il QFE indica l'altezza sull'aeroporto.

<script>window.pwned = 1</script><img src="https://example.com/x.png" onerror="window.pwned = 2">
<span style="color: red">stile</span> [un link](javascript:alert(1)) e [SERA](https://eur-lex.europa.eu/)

(Fonte: § 3.2 (Strumenti di volo))"""


def test_a_theory_answer_renders_markdown_safely_and_its_citation_opens_the_section(
    settings, session_for
):
    script = Script([call("kb_search", query="QNH altimetro"), text(MARKDOWN_ANSWER)])
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        page = s.page
        turn = s.answered(s.ask("Cos'è il QNH?"))
        answer = turn.locator(".answer")
        expect(answer.locator("strong")).to_have_text("QNH")
        expect(answer.locator("li")).to_have_count(2)
        expect(answer.locator("em")).to_have_text("altitudine")
        # Nothing active or styled comes out of the model's text.
        expect(answer.locator("script, img, span, [style], [onerror]")).to_have_count(0)
        expect(answer).to_contain_text('<span style="color: red">stile</span>')  # as text
        assert page.evaluate("() => window.pwned") is None
        expect(answer.get_by_text("un link")).to_be_visible()
        expect(answer.locator("a", has_text="un link")).to_have_count(0)
        expect(answer.locator("a", has_text="SERA")).to_have_attribute(
            "href", "https://eur-lex.europa.eu/"
        )
        expect(answer.locator("a", has_text="SERA")).to_have_attribute("rel", "noopener noreferrer")
        # The manual search's results as source cards: reference, title, snippet.
        sources = turn.locator("article.source")
        expect(sources).not_to_have_count(0)
        expect(sources.first.locator("a.citation")).to_have_text(
            "§ 3.2 Altimetro e regolazioni QNH, QFE, 1013"
        )
        expect(sources.first).to_contain_text("barometro aneroide")
        expect(sources.first.locator("p")).to_have_text(re.compile(r"^.{20,181}…$"))
        # Below the answer: on a phone the answer comes first.
        expect(turn.locator(".answer + .turn-sources article.source")).to_have_count(
            sources.count()
        )

        citation = answer.locator("a.citation")
        expect(citation).to_have_text("§ 3.2 (Strumenti di volo)")
        citation.click()
        panel = page.locator("#manual-panel")
        expect(panel).to_be_visible()
        expect(page.locator("#manual-title")).to_have_text(
            "§ 3.2 Altimetro e regolazioni QNH, QFE, 1013"
        )
        expect(page.locator("#manual-chapter")).to_have_text("Capitolo 3 · Strumenti di volo")
        expect(page.locator("#manual-text")).to_contain_text("finestrella di Kollsman")
        s.shot("14-manual-section")
        s.screens("07-manual-section")
        page.click("#manual-close")
        expect(panel).to_be_hidden()
        expect(citation).to_be_focused()
    script.assert_used()
    assert s.console_errors == [], "\n".join(s.console_errors)
    assert s.outside == []


def test_an_offline_theory_answer_has_a_badge_and_an_off_topic_one_no_source_cards(
    settings, session_for
):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        turn = s.answered(s.ask("Che cosa provoca lo stallo di un'ala?"))
        expect(turn.locator(".turn-footer .badge")).to_have_text("modello offline")
        expect(turn.locator(".answer")).not_to_contain_text("[modello offline]")
        expect(turn.locator(".answer a.citation").first).to_have_text(
            re.compile(r"^§ 1\.4 \(Principi di aerodinamica\)")
        )
        expect(turn.locator("article.source").first.locator("a.citation")).to_contain_text("§ 1.4")

        expect(s.page.locator("#live")).to_have_text(
            re.compile(r"^Risposta del coach: Dal manuale del corso: Lo stallo")
        )
        s.screens("06-theory-answer")

        off_topic = s.answered(s.ask("Come si prepara la carbonara?"))
        expect(off_topic.locator(".answer")).to_contain_text("Non ho trovato")
        expect(off_topic.locator("article.source, .sources")).to_have_count(0)
        expect(off_topic.locator(".card")).to_have_count(0)
    assert s.console_errors == []


def test_the_welcome_buttons_ask_the_coach_and_open_the_progress(settings, session_for):
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("benvenuto")
        page = s.page
        bodies: list[Any] = []
        page.on(
            "request",
            lambda r: r.url.endswith("/api/stream_query") and bodies.append(r.post_data_json),
        )
        page.get_by_role("button", name="Domanda del capitolo…").click()
        picker = page.locator("#chapter-picker")
        expect(picker).to_be_visible()
        expect(picker.locator("button")).to_have_count(10)
        expect(picker.locator("button").nth(4)).to_have_text("5. Meteorologia")
        expect(picker.locator("button").first).to_be_focused()
        s.screens("08-chapter-picker")
        picker.locator("button").nth(4).click()
        first = s.answered(page.locator("#turns > li").first)
        expect(first.locator("article.quiz")).to_have_attribute(
            "data-question", re.compile(r"^5-\d+$")
        )
        expect(page.locator("#welcome")).to_be_hidden()
        assert bodies[-1]["query"] == "Dammi una domanda del capitolo 5"

        # Back to a fresh welcome (a new sign-in): "Ripasso" opens the review view.
        page.click("#sign-out")
        s.dev_sign_in("benvenuto2")
        page.locator("#welcome").get_by_role("button", name="Ripasso", exact=True).click()
        expect(page.locator("#review-view")).to_be_visible()
        expect(page.locator("#chat-view")).to_be_hidden()
        page.click("#nav-chat")
        page.click("#sign-out")
        s.dev_sign_in("benvenuto3")
        suggestion = page.locator("button.suggestion").first
        asked = suggestion.text_content()
        suggestion.click()
        s.answered(page.locator("#turns > li").first)
        assert bodies[-1]["query"] == asked

        page.click("#sign-out")
        s.dev_sign_in("benvenuto4")
        page.get_by_role("button", name="I miei progressi", exact=True).last.click()
        expect(page.locator("#progress-view")).to_be_visible()
        expect(page.locator("#chat-view")).to_be_hidden()
        expect(page.locator("#progress-title")).to_be_focused()
    assert s.console_errors == []


def test_progress_lists_every_chapter_with_its_title_from_the_header(settings, session_for, token):
    with served(app_with(settings)) as origin:
        chapters = httpx.get(
            f"{origin}/api/quiz/chapters", headers={"Authorization": f"Bearer {token('x')}"}
        ).json()["items"]
        s = session_for(origin, width=390, height=844)
        s.open()
        s.dev_sign_in("progressi")
        page = s.page
        turn = s.answered(s.ask("Dammi una domanda del capitolo 4"))
        chapter, number = turn.locator("article.quiz").get_attribute("data-question").split("-")
        turn.locator(f'button.option[data-letter="{_key(int(chapter), int(number))}"]').click()
        expect(turn.locator(".result")).to_have_attribute("data-corretta", "true")
        s.answered(page.locator("#turns > li").nth(1))

        page.click("#nav-progress")
        expect(page.locator("#nav-progress")).to_have_attribute("aria-current", "page")
        rows = page.locator("#progress li.chapter")
        expect(rows).to_have_count(len(chapters))
        for i, c in enumerate(chapters):
            expect(rows.nth(i).locator(".chapter-title")).to_have_text(
                f"{c['capitolo']}. {c['titolo']}"
            )
        four = page.locator('#progress li[data-capitolo="4"]')
        expect(four.locator(".count")).to_have_text("1/1")
        expect(four).to_contain_text("(100 %)")
        expect(four.locator("progress")).to_have_attribute("value", "100")
        one = page.locator('#progress li[data-capitolo="1"]')
        expect(one).to_contain_text("Nessuna risposta finora · 35 domande nel capitolo")
        expect(one.locator("progress")).to_have_attribute("value", "0")
        expect(page.locator("#progress .summary")).to_have_text("Risposte: 1 · corrette: 1 (100 %)")
        expect(page.locator("#history > li").first.locator(".first-line")).to_contain_text(
            "CORRETTA"
        )
        s.screens("09-progress")
        page.click("#nav-chat")
        expect(page.locator("#chat-view")).to_be_visible()
        expect(page.locator("#progress-view")).to_be_hidden()
    assert s.console_errors == []


def test_a_grounding_verdict_with_offsets_marks_the_doubted_passage(settings, session_for):
    """The verdict's `sentence` offsets count code points: after a character outside the BMP
    (two UTF-16 units in JavaScript) the page still marks the right passage."""
    answer = "🛫 Il QNH si imposta prima del decollo. Lo dice il Reg. (UE) n. 999/2099."
    doubted = "Reg. (UE) n. 999/2099"
    start = answer.index(doubted)  # Python counts code points, as the server does
    events = [
        {"type": "agent_message", "content": answer},
        {
            "type": "grounding",
            "citations": [
                {
                    "text": doubted,
                    "key": "ue-999-2099",
                    "verified": False,
                    "sentence": {"start": start, "end": start + len(doubted)},
                }
            ],
            "unverified": [doubted],
        },
        {"type": "done", "model": "finto", "prompt_version": "abc123", "context_turns": 0},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(
            f"{origin}/api/stream_query",
            lambda route: route.fulfill(status=200, content_type="text/event-stream", body=body),
        )
        turn = s.answered(s.ask("Chi fissa il QNH?"))
        expect(turn.locator(".notice-warning")).to_contain_text("non trovano riscontro")
        mark = turn.locator(".answer mark.doubted")
        expect(mark).to_have_count(1)
        expect(mark).to_have_text(doubted)
    assert s.console_errors == []


def _canned(*events: dict[str, Any]) -> str:
    return "".join(f"id: {i}\ndata: {json.dumps(e)}\n\n" for i, e in enumerate(events, 1))


def test_choices_made_while_an_answer_arrives_are_all_sent_in_order(settings, session_for):
    """Three questions at once; the first is answered and, while its grading is still
    arriving, the other two: each choice is sent, in order, one turn each (before, the page
    kept one waiting choice, and the second was dropped: its card stayed closed, ungraded)."""
    questions = [
        {"capitolo": 3, "numero": n, "testo": f"Domanda {n}?", "risposte": {"a": "Sì", "b": "No"}}
        for n in (1, 2, 3)
    ]
    quiz = _canned(
        {"type": "tool_result", "tool_name": "domanda_teoria", "data": {"questions": questions}},
        {"type": "done", "status": "ok", "model": "finto", "prompt_version": "abc"},
    )
    done = _canned({"type": "done", "status": "ok", "model": "finto", "prompt_version": "abc"})
    sent: list[str] = []
    held: list[Any] = []

    def stream(route: Any) -> None:
        sent.append(json.loads(route.request.post_data)["query"])
        if len(sent) == 1:
            route.fulfill(status=200, content_type="text/event-stream", body=quiz)
        elif len(sent) == 2:
            held.append(route)  # the first grading is still arriving
        else:
            route.fulfill(status=200, content_type="text/event-stream", body=done)

    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", stream)
        turn = s.answered(s.ask("Dammi tre domande del capitolo 3"))
        cards = turn.locator("article.quiz")
        expect(cards).to_have_count(3)
        cards.nth(0).locator('button[data-letter="a"]').click()
        expect(s.page.locator("#send")).to_be_disabled()
        cards.nth(1).locator('button[data-letter="b"]').click()
        cards.nth(2).locator('button[data-letter="a"]').click()
        assert held and sent == ["Dammi tre domande del capitolo 3", "la a"]
        held[0].fulfill(status=200, content_type="text/event-stream", body=done)
        expect(s.page.locator("#turns > li")).to_have_count(4)
        expect(s.page.locator("#turns > li .human")).to_have_text(
            ["Dammi tre domande del capitolo 3", "la a", "la b", "la a"]
        )
        expect(s.page.locator("#turns > li").nth(3)).to_have_class(re.compile(r"\bturn-done\b"))
        assert sent[1:] == ["la a", "la b", "la a"]
    assert s.console_errors == []


def test_a_failed_tool_card_shows_the_students_sentence_not_the_models(settings, session_for):
    """A quiz request the tool refuses: the card says in Italian which tool failed (the
    result's `messaggio`), never the English `error` the model reads (before, the card showed
    "Quiz di teoria: capitolo must be between 1 and 10, got 12")."""
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        turn = s.answered(s.ask("Dammi una domanda del capitolo 12"))
        expect(turn.locator(".card-error")).to_have_text(
            "Lo strumento 'Quiz di teoria' non è riuscito a completare la richiesta."
        )
        expect(turn).to_contain_text("scegli un capitolo da 1 a 10")
        expect(turn).not_to_contain_text("must be")
    assert s.console_errors == []


def test_a_quiz_request_nothing_matches_shows_its_messaggio(settings, session_for):
    """No question matches: the page shows the quiz's sentence for the student, read from
    `messaggio` as for a failed tool, and no empty question list (before, the result named it
    `message`, the page showed nothing of it and an empty card list for several)."""
    script = Script(
        [
            call("domanda_teoria", testo="elicottero", quante=2),
            text("Scegli uno dei capitoli: 1 Principi di aerodinamica, ..."),
        ]
    )
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        turn = s.answered(s.ask("Dammi due domande sull'elicottero"))
        expect(turn.locator(".tool-note")).to_have_text(
            "Nessuna domanda trovata per questa richiesta."
        )
        expect(turn.locator(".cards")).to_have_count(0)
        expect(turn).to_contain_text("Scegli uno dei capitoli")
    assert s.console_errors == []


def test_a_choice_whose_turn_fails_reopens_its_card_with_an_italian_notice(settings, session_for):
    """The answer `la a` is refused (a 503), then `la b` ends without a grading (the model
    failed: its `error` event's message says why), then `la a` ends with text only: each
    time the card opens again, says in Italian what happened and takes another choice; `la c`
    is graded (before, the card stayed closed after a failed choice: the student could no
    longer answer it; and a failing model's turn said "il coach non l'ha corretta." instead
    of the error's message)."""
    question = {
        "capitolo": 3,
        "numero": 1,
        "testo": "Domanda?",
        "risposte": {"a": "Sì", "b": "No", "c": "Forse"},
    }
    done = {"type": "done", "status": "ok", "model": "finto", "prompt_version": "abc"}
    quiz = _canned(
        {"type": "tool_result", "tool_name": "domanda_teoria", "data": {"question": question}}, done
    )
    ungraded = _canned(
        {"type": "error", "code": "model_error", "message": "Il modello non ha risposto."},
        {**done, "status": "error"},
    )
    grading = {
        "capitolo": 3,
        "numero": 1,
        "risposta": "c",
        "corretta": True,
        "risposta_corretta": "c",
        "spiegazione": "Perché sì.",
    }
    graded = _canned(
        {"type": "tool_result", "tool_name": "verifica_risposta", "data": grading}, done
    )
    chatted = _canned({"type": "agent_message", "content": "Ci penso."}, done)
    refused = json.dumps({"error": "model_unavailable", "message": "Il coach non è disponibile."})
    sent: list[str] = []

    def stream(route: Any) -> None:
        sent.append(json.loads(route.request.post_data)["query"])
        if len(sent) == 2:
            route.fulfill(status=503, content_type="application/json", body=refused)
            return
        body = {1: quiz, 3: ungraded, 4: chatted}.get(len(sent), graded)
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", stream)
        card = s.answered(s.ask("Dammi una domanda del capitolo 3")).locator("article.quiz")
        options = card.locator("button.option")

        card.locator('button[data-letter="a"]').click()
        problem = card.locator(".grading .notice")
        expect(problem).to_have_text(
            "La risposta «a» non è stata valutata: Il coach non è disponibile. "
            "Scegli di nuovo la risposta."
        )
        for option in options.all():
            expect(option).to_be_enabled()
        expect(card.locator("button.option.chosen")).to_have_count(0)
        expect(card.locator("button.skip-question")).to_be_visible()
        s.shot("choice-refused")

        card.locator('button[data-letter="b"]').click()
        expect(s.page.locator("#turns > li").nth(2)).to_have_class(re.compile(r"\bturn-done\b"))
        expect(problem).to_have_text(
            "La risposta «b» non è stata valutata: Il modello non ha risposto. "
            "Scegli di nuovo la risposta."
        )
        expect(options.first).to_be_enabled()

        card.locator('button[data-letter="a"]').click()
        expect(s.page.locator("#turns > li").nth(3)).to_have_class(re.compile(r"\bturn-done\b"))
        expect(problem).to_have_text(
            "La risposta «a» non è stata valutata: il coach non l'ha corretta. "
            "Scegli di nuovo la risposta."
        )
        expect(options.first).to_be_enabled()

        card.locator('button[data-letter="c"]').click()
        expect(card.locator(".result")).to_have_attribute("data-corretta", "true")
        expect(card.locator(".grading .notice")).to_have_count(0)
        for option in options.all():
            expect(option).to_be_disabled()
        assert sent[1:] == ["la a", "la b", "la a", "la c"]
    # Chromium logs the refused request itself; nothing else.
    assert all("status of 503" in e for e in s.console_errors), s.console_errors


def test_a_skip_whose_request_fails_reopens_its_card_with_an_italian_notice(settings, session_for):
    """ "Salta" is refused (a 429), then its request fails on the network before any answer
    (nothing to rejoin): each time the card opens again, unskipped, and says in Italian what
    happened; the third "Salta" brings the next question and its card stays skipped (before,
    a failed skip left the card closed: the student could neither answer nor skip it)."""
    first = {"capitolo": 3, "numero": 1, "testo": "Domanda?", "risposte": {"a": "Sì", "b": "No"}}
    done = {"type": "done", "status": "ok", "model": "finto", "prompt_version": "abc"}

    def quiz(question: dict[str, Any]) -> str:
        return _canned(
            {"type": "tool_result", "tool_name": "domanda_teoria", "data": {"question": question}},
            done,
        )

    refused = json.dumps(
        {
            "error": "quota_exceeded",
            "message": "Hai raggiunto il limite di domande al minuto (1); riprova tra 30 s.",
        }
    )
    sent: list[str] = []

    def stream(route: Any) -> None:
        sent.append(json.loads(route.request.post_data)["query"])
        if len(sent) == 2:
            route.fulfill(status=429, content_type="application/json", body=refused)
        elif len(sent) == 3:
            route.abort("connectionreset")
        else:
            question = first if len(sent) == 1 else {**first, "numero": 2, "testo": "Altra?"}
            route.fulfill(status=200, content_type="text/event-stream", body=quiz(question))

    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", stream)
        card = s.answered(s.ask("Dammi una domanda del capitolo 3")).locator("article.quiz")
        skip = card.locator("button.skip-question")
        problem = card.locator(".grading .notice")

        skip.click()
        expect(problem).to_have_text(
            "La domanda non è stata saltata: Hai raggiunto il limite di domande al minuto (1); "
            "riprova tra 30 s. Rispondi o salta di nuovo."
        )
        expect(card).not_to_have_class(re.compile(r"\bskipped\b"))
        for option in card.locator("button.option").all():
            expect(option).to_be_enabled()
        expect(skip).to_be_visible()
        s.shot("skip-refused")

        skip.click()
        expect(problem).to_have_text(
            "La domanda non è stata saltata: Errore di rete: la connessione si è interrotta. "
            "Controlla la rete e riprova. Rispondi o salta di nuovo."
        )
        expect(skip).to_be_visible()

        skip.click()
        expect(s.page.locator('article.quiz[data-question="3-2"]')).to_be_visible()
        expect(s.page.locator("#turns > li").nth(3)).to_have_class(re.compile(r"\bturn-done\b"))
        expect(card).to_have_class(re.compile(r"\bskipped\b"))
        expect(card.locator(".grading")).to_have_text("Domanda saltata.")
        expect(skip).to_have_count(0)
        for option in card.locator("button.option").all():
            expect(option).to_be_disabled()
        assert sent[1:] == ["Dammi un'altra domanda del capitolo 3"] * 3
    # Chromium logs the refused and the dropped request itself; nothing else.
    assert all("status of 429" in e or "net::ERR" in e for e in s.console_errors), s.console_errors


def test_a_skip_whose_turn_ends_with_the_models_error_reopens_its_card(settings, session_for):
    """ "Salta" sends a turn in which the model fails (an `error` event, then `done`): the card
    opens again, unskipped, with the error's Italian message. The next "Salta" brings a new
    question, but its turn cannot be stored (an `error` event after the new card): that skip
    happened, and the card stays skipped (before, a skip whose turn ended with the model's
    error left its card skipped and closed, with no new question to answer)."""
    script = Script(
        [
            call("domanda_teoria", capitolo=3, numero=1),
            RuntimeError("the model broke"),
            call("domanda_teoria", capitolo=3, numero=2),
        ]
    )
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        card = s.answered(s.ask("Dammi una domanda del capitolo 3")).locator("article.quiz")
        skip = card.locator("button.skip-question")
        problem = card.locator(".grading .notice")
        turns = s.page.locator("#turns > li")

        skip.click()
        s.answered(turns.nth(1))
        # The page takes a message again in the same task that decides on the card.
        expect(s.page.locator("#send")).to_be_enabled()
        expect(turns.nth(1).locator(".notice-error")).to_have_count(1)
        expect(problem).to_have_text(
            "La domanda non è stata saltata: Il modello linguistico non è disponibile in "
            "questo momento; riprova tra poco. Rispondi o salta di nuovo."
        )
        expect(card).not_to_have_class(re.compile(r"\bskipped\b"))
        for option in card.locator("button.option").all():
            expect(option).to_be_enabled()
        expect(skip).to_be_visible()
        s.shot("skip-model-failed")

        # A real backend failure: the database refuses writes, reads still work.
        with closing(sqlite3.connect(settings.sqlite_file)) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON chats "
                "BEGIN SELECT RAISE(ABORT, 'full'); END"
            )
            db.commit()
        skip.click()
        unsaved = s.answered(turns.nth(2))
        expect(s.page.locator("#send")).to_be_enabled()
        expect(unsaved.locator('article.quiz[data-question="3-2"]')).to_be_visible()
        expect(unsaved.locator(".notice-error")).to_have_text(
            "Non è stato possibile salvare la risposta nella tua cronologia."
        )
        expect(card).to_have_class(re.compile(r"\bskipped\b"))
        expect(card.locator(".grading")).to_have_text("Domanda saltata.")
        expect(skip).to_have_count(0)
    script.assert_used()
    assert s.console_errors == []


def test_a_skip_whose_turn_brings_no_new_question_reopens_its_card(settings, session_for):
    """ "Salta" sends a turn that ends `done` ok with text only, then one that ends
    `interrupted` without an `error` event: neither brings a new question, so each time the
    card opens again, unskipped, saying in Italian that no new question came; the third
    "Salta" brings one and the card stays skipped (before, both kept the card skipped and
    closed, with nothing new to answer)."""
    first = {"capitolo": 3, "numero": 1, "testo": "Domanda?", "risposte": {"a": "Sì", "b": "No"}}
    done = {"type": "done", "status": "ok", "model": "finto", "prompt_version": "abc"}
    replies = {
        1: _canned(
            {"type": "tool_result", "tool_name": "domanda_teoria", "data": {"question": first}},
            done,
        ),
        2: _canned({"type": "agent_message", "content": "Va bene, passiamo oltre."}, done),
        3: _canned({"type": "agent_message", "content": "Ecco"}, {**done, "status": "interrupted"}),
        4: _canned(
            {
                "type": "tool_result",
                "tool_name": "domanda_teoria",
                "data": {"question": {**first, "numero": 2, "testo": "Altra?"}},
            },
            done,
        ),
    }
    sent: list[str] = []

    def stream(route: Any) -> None:
        sent.append(json.loads(route.request.post_data)["query"])
        route.fulfill(status=200, content_type="text/event-stream", body=replies[len(sent)])

    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", stream)
        card = s.answered(s.ask("Dammi una domanda del capitolo 3")).locator("article.quiz")
        skip = card.locator("button.skip-question")
        problem = card.locator(".grading .notice")
        turns = s.page.locator("#turns > li")
        no_question = (
            "La domanda non è stata saltata: il coach non ha mandato una nuova domanda. "
            "Rispondi o salta di nuovo."
        )

        for n in (1, 2):
            skip.click()
            s.answered(turns.nth(n))
            expect(problem).to_have_text(no_question)
            expect(card).not_to_have_class(re.compile(r"\bskipped\b"))
            for option in card.locator("button.option").all():
                expect(option).to_be_enabled()
            expect(skip).to_be_visible()
        s.shot("skip-without-question")

        skip.click()
        expect(turns.nth(3).locator('article.quiz[data-question="3-2"]')).to_be_visible()
        s.answered(turns.nth(3))
        expect(s.page.locator("#send")).to_be_enabled()
        expect(card).to_have_class(re.compile(r"\bskipped\b"))
        expect(card.locator(".grading")).to_have_text("Domanda saltata.")
        expect(skip).to_have_count(0)
        assert sent[1:] == ["Dammi un'altra domanda del capitolo 3"] * 3
    assert s.console_errors == []


def test_a_stream_dropped_before_done_rejoins_the_turn_after_the_last_event(settings, session_for):
    """A phone losing its signal: the stream of a turn stops after its first event. The page
    rejoins the turn (`GET /api/turns/{id}/events`, `Last-Event-ID` the last id read) and shows
    the rest of the answer once, then the turn ends (before, the turn stayed open without an
    answer and without a notice)."""
    script = Script([call("kb_search", query="stallo"), text("Lo stallo viene dall'angolo.")])
    rejoins: list[dict[str, str]] = []

    def cut(route: Any) -> None:
        response = route.fetch()  # the whole turn, run and stored on the real server
        first = response.text().split("\n\n")[0] + "\n\n"
        assert "id: 1" in first.splitlines(), first
        route.fulfill(status=200, headers=response.headers, body=first)

    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", cut)
        s.page.on(
            "request",
            lambda r: "/events" in r.url and rejoins.append(r.headers),
        )
        turn = s.answered(s.ask("Che cosa provoca lo stallo?"))
        expect(turn.locator(".answer")).to_have_text("Lo stallo viene dall'angolo.")
        expect(turn).not_to_have_class(re.compile(r"turn-failed"))
        expect(s.page.locator("#notices .notice-error")).to_have_count(0)
        assert [r["last-event-id"] for r in rejoins] == ["1"]
    script.assert_used()
    assert s.console_errors == []


def test_a_dropped_stream_that_cannot_rejoin_ends_the_turn_with_an_italian_notice(
    settings, session_for
):
    """No turn id to rejoin (the connection broke before the response): the turn ends, failed,
    and the notice is Italian (before: "Errore di rete: Failed to fetch")."""
    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in()
        s.page.route(f"{origin}/api/stream_query", lambda route: route.abort("failed"))
        turn = s.ask("Che cosa provoca lo stallo?")
        expect(turn).to_have_class(re.compile(r"\bturn-failed\b"))
        # In the turn, where the student looks: the page's notices are off a phone's screen.
        notice = turn.locator(".turn-outcome.notice-error")
        expect(notice).to_have_text(
            "Errore di rete: la connessione si è interrotta. Controlla la rete e riprova."
        )
        expect(s.page.locator("#notices .notice")).to_have_count(0)
        expect(s.page.locator("#send")).to_be_enabled()


SERIOUS = ("serious", "critical")


def _axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now (WCAG 2.x A and AA
    rules). The vendored script is evaluated through the DevTools protocol, which the page's
    CSP does not govern, so nothing is served or inlined for it."""
    if not page.evaluate("() => Boolean(window.axe)"):
        page.evaluate(AXE.read_text("utf-8"))
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {
                runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
            });
            return r.violations.map((v) => ({
                id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5),
            }));
        }"""
    )
    return [v for v in result if v["impact"] in SERIOUS]


def test_axe_finds_no_serious_violation_on_any_screen(settings, session_for):
    with served(app_with(settings)) as origin:
        for width, height in ((390, 844), (1280, 800)):
            s = session_for(origin, width=width, height=height)
            s.open()
            page = s.page
            screens = {"sign-in": _axe(page)}
            s.dev_sign_in(f"axe{width}")
            screens["welcome"] = _axe(page)
            turn = s.answered(s.ask("Dammi una domanda del capitolo 1"))
            screens["quiz"] = _axe(page)
            turn.locator("button.option").first.click()
            expect(turn.locator(".result")).to_be_visible()
            s.answered(page.locator("#turns > li").nth(1))
            screens["graded"] = _axe(page)
            theory = s.answered(s.ask("Che cosa provoca lo stallo di un'ala?"))
            screens["theory"] = _axe(page)
            # The theory answer's citation (the graded turn's may be folded in its comment).
            theory.locator(".answer a.citation").first.click()
            expect(page.locator("#manual-panel")).to_be_visible()
            screens["manual"] = _axe(page)
            page.keyboard.press("Escape")
            s.open_settings()
            screens["settings"] = _axe(page)
            page.keyboard.press("Escape")
            page.click("#nav-progress")
            expect(page.locator("#progress .chapter")).to_have_count(10)
            screens["progress"] = _axe(page)
            assert {k: v for k, v in screens.items() if v} == {}, width
            assert s.console_errors == []
    # The check can fail: a button without a name is one of axe's critical violations.
    page.evaluate(
        "() => document.querySelector('#progress').append(document.createElement('button'))"
    )
    assert "button-name" in {v["id"] for v in _axe(page)}
